// MPI implementation of Collectives. Every operation is a non-blocking MPI collective completed by
// polling MPI_Test against a deadline, so that a peer that died (killed, I/O error) turns into a
// CommError naming the operation after `timeout`, and then MPI_Abort ends the job, rather than a
// hang. MPI is initialized with MPI_THREAD_SERIALIZED: the engine calls it from its comm lane, from
// its compute lane (tensor-parallel all-reduces, on a group of their own) and, between steps, from
// the main thread; one process-wide mutex held around each MPI call keeps those calls serialized.
// It is never held while waiting, so each lane's collective makes progress whichever lane polls.
// When a collective fails or times out, the rank holds a roll call before it gives up: on a
// communicator of its own (a duplicate, so no message can match a collective's) it tells every
// peer which collective it waits in (its sequence number and name), and listens a short while for
// theirs. A peer that answers is alive; one that answers from another collective is named with it;
// one that never answers is the rank that did not arrive. A rank that gives up also answers the
// roll calls it hears while still waiting. A rank that was itself stopped (SIGSTOP, swapped out)
// sees the gap between its polls and says that it was the late one, not its peers.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/comm/collectives.hpp"

#ifdef ZINF_HAVE_MPI
#include <mpi.h>
#endif

namespace zinf::engine {

#ifdef ZINF_HAVE_MPI
namespace {

// Held around every MPI call of the process (MPI_THREAD_SERIALIZED).
std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

class MpiCollectives final : public Collectives {
public:
  // A group split from `parent` (MpiCollectives::split).
  MpiCollectives(MPI_Comm comm, std::chrono::seconds timeout) : timeout_(timeout), comm_(comm) { set_up(); }

  explicit MpiCollectives(std::chrono::seconds timeout) : timeout_(timeout) {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (provided < MPI_THREAD_SERIALIZED)
        throw CommError("this MPI library does not provide MPI_THREAD_SERIALIZED, which zinf's comm lane needs");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    set_up();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_gather(const void* shard, std::size_t shard_bytes, void* full, const char* what) override {
    run("all-gather", what, [&](MPI_Request* req) {
      return MPI_Iallgather(shard == full ? MPI_IN_PLACE : shard, int_count(shard_bytes, what), MPI_BYTE, full,
                            int_count(shard_bytes, what), MPI_BYTE, comm_, req);
    });
  }

  void reduce_scatter(const float* full, float* shard, std::size_t n, const char* what) override {
    run("reduce-scatter", what, [&](MPI_Request* req) {
      return MPI_Ireduce_scatter_block(full, shard, int_count(n, what), MPI_FLOAT, MPI_SUM, comm_, req);
    });
  }

  void all_reduce(float* data, std::size_t n, const char* what) override {
    run("all-reduce", what, [&](MPI_Request* req) {
      return MPI_Iallreduce(MPI_IN_PLACE, data, int_count(n, what), MPI_FLOAT, MPI_SUM, comm_, req);
    });
  }

  void all_reduce(double* data, std::size_t n, const char* what) override {
    run("all-reduce", what, [&](MPI_Request* req) {
      return MPI_Iallreduce(MPI_IN_PLACE, data, int_count(n, what), MPI_DOUBLE, MPI_SUM, comm_, req);
    });
  }

  void broadcast(void* data, std::size_t bytes, int root, const char* what) override {
    run("broadcast", what,
        [&](MPI_Request* req) { return MPI_Ibcast(data, int_count(bytes, what), MPI_BYTE, root, comm_, req); });
  }

  void reduce(const float* in, float* out, std::size_t n, int root, const char* what) override {
    const void* send = (in == out && rank_ == root) ? MPI_IN_PLACE : in;
    run("reduce", what, [&](MPI_Request* req) {
      return MPI_Ireduce(send, out, int_count(n, what), MPI_FLOAT, MPI_SUM, root, comm_, req);
    });
  }

  void barrier(const char* what) override {
    run("barrier", what, [&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); });
  }

  std::unique_ptr<Collectives> split(int color, int key, const char* what) override {
    MPI_Comm sub = MPI_COMM_NULL;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      const int rc = MPI_Comm_split(comm_, color, key, &sub);
      if (rc != MPI_SUCCESS) throw CommError(fmt::format("rank {}: split of {} failed: {}", world_rank_, what, error_text(rc)));
    }
    std::lock_guard<std::mutex> lock(mpi_mutex());
    return std::make_unique<MpiCollectives>(sub, timeout_);
  }

  [[noreturn]] void abort(const std::string& why) override {
    fmt::print(stderr, "zinf: rank {} of {}: {}\n", rank_, size_, why);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

private:
  using Clock = std::chrono::steady_clock;
  static constexpr int kRollCallTag = 1;
  // What a rank that gives up, or answers one that did, says: which collective it waits in.
  struct RollCall {
    int64_t seq = 0;       // the collective's number on this communicator, from 1
    int32_t gave_up = 0;   // 1: the sender gave up waiting there; 0: it answers while still waiting
    char label[108] = {};  // "all-reduce of step loss"
  };
  // A failed MPI call: turned into a CommError after the roll call, outside the mutex.
  struct MpiFailure {
    std::string reason;
  };

  // Under the mutex (both constructors hold it).
  void set_up() {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm_dup(comm_, &watch_);
    MPI_Comm_set_errhandler(watch_, MPI_ERRORS_RETURN);
    // Ranks are named as the job numbers them (MPI_COMM_WORLD), also in a split group.
    MPI_Group mine, world;
    MPI_Comm_group(comm_, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> local(size_t(size_), 0);
    for (int r = 0; r < size_; ++r) local[size_t(r)] = r;
    world_of_.assign(size_t(size_), 0);
    MPI_Group_translate_ranks(mine, size_, local.data(), world, world_of_.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    world_rank_ = world_of_[size_t(rank_)];
  }

  static std::string error_text(int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return std::string(msg, size_t(len));
  }

  int int_count(std::size_t n, const char* what) const {
    if (n > static_cast<std::size_t>(INT32_MAX))
      throw CommError(fmt::format("{}: {} elements exceed MPI's int count; split the buffer", what, n));
    return static_cast<int>(n);
  }

  static void check(int rc) {
    if (rc != MPI_SUCCESS) throw MpiFailure{"failed: " + error_text(rc)};
  }

  template <typename Start>
  void run(const char* op, const char* what, Start start) {
    ++seq_;
    current_ = fmt::format("{} of {}", op, what);
    longest_gap_ = Clock::duration::zero();
    try {
      MPI_Request req;
      {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        check(start(&req));
      }
      wait(req);
    } catch (const MpiFailure& f) {
      give_up(current_, f.reason);
    }
  }

  // Polls with a growing sleep so an idle comm lane does not burn a core that compute needs. The
  // sleep stays short: OpenMPI moves a collective forward only inside MPI_Test, so each round of it
  // can wait out one nap; naps of up to 500 us cost a 2-rank step here tens of milliseconds.
  void wait(MPI_Request& req) {
    const auto deadline = Clock::now() + timeout_;
    auto last = Clock::now(), last_roll_poll = last;
    auto nap = std::chrono::microseconds(1);
    constexpr auto kLongestNap = std::chrono::microseconds(50);
    for (;;) {
      int flag = 0;
      {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
      }
      if (flag) return;
      const auto now = Clock::now();
      longest_gap_ = std::max(longest_gap_, now - last);
      last = now;
      if (now - last_roll_poll > std::chrono::milliseconds(20)) {
        answer_roll_calls();
        last_roll_poll = now;
      }
      if (now > deadline) throw MpiFailure{fmt::format("did not complete within {} s", timeout_.count())};
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, kLongestNap);
    }
  }

  RollCall my_roll_call(const std::string& here, bool gave_up = false) const {
    RollCall m;
    m.seq = seq_;
    m.gave_up = gave_up ? 1 : 0;
    std::strncpy(m.label, here.c_str(), sizeof m.label - 1);
    return m;
  }

  void send_roll_call(const RollCall& m, int to) {
    MPI_Request r;
    std::lock_guard<std::mutex> lock(mpi_mutex());
    if (MPI_Isend(&m, int(sizeof m), MPI_BYTE, to, kRollCallTag, watch_, &r) == MPI_SUCCESS) MPI_Request_free(&r);
  }

  // Takes in the roll calls that arrived; answers each with where this rank waits, once per peer.
  void answer_roll_calls() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      RollCall m;
      {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        if (MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, watch_, &flag, &st) != MPI_SUCCESS || !flag) return;
        if (MPI_Recv(&m, int(sizeof m), MPI_BYTE, st.MPI_SOURCE, kRollCallTag, watch_, MPI_STATUS_IGNORE) != MPI_SUCCESS)
          return;
      }
      m.label[sizeof m.label - 1] = '\0';
      heard_[st.MPI_SOURCE] = m;
      if (answered_.insert(st.MPI_SOURCE).second) send_roll_call(my_roll_call(current_), st.MPI_SOURCE);
    }
  }

  std::string ranks_text(const std::vector<int>& group_ranks) const {
    std::string out;
    for (size_t i = 0; i < group_ranks.size(); ++i)
      out += fmt::format("{}{}", i == 0 ? "" : i + 1 == group_ranks.size() ? " and " : ", ", world_of_[size_t(group_ranks[i])]);
    return fmt::format("rank{} {}", group_ranks.size() == 1 ? "" : "s", out);
  }

  // The roll call, then the CommError that names who did not arrive.
  [[noreturn]] void give_up(const std::string& here, const std::string& reason) {
    const RollCall mine = my_roll_call(here, true);
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && answered_.insert(r).second) send_roll_call(mine, r);
    const auto until = Clock::now() + std::min<Clock::duration>(timeout_, std::chrono::seconds(3));
    while (int(heard_.size()) < size_ - 1 && Clock::now() < until) {
      answer_roll_calls();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<int> missing, same, gave_up_here;
    std::string elsewhere;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto it = heard_.find(r);
      if (it == heard_.end()) missing.push_back(r);
      else if (it->second.seq == mine.seq) (it->second.gave_up ? gave_up_here : same).push_back(r);
      else
        elsewhere += fmt::format("; rank {} waits in {} (collective #{}) instead", world_of_[size_t(r)], it->second.label,
                                 it->second.seq);
    }
    std::string who;
    const double gap = std::chrono::duration<double>(longest_gap_).count();
    if (gap > 0.5 * double(timeout_.count())) {
      same.insert(same.end(), gave_up_here.begin(), gave_up_here.end());
      std::sort(same.begin(), same.end());
      // This rank was not running for much of the wait: it is the late one.
      who = fmt::format(": this rank did not run for {:.1f} s while it waited (stopped, swapped out or starved), so it "
                        "is the one that came late{}",
                        gap, same.empty() ? "" : "; " + ranks_text(same) + " waited for it in the same collective");
    } else if (!missing.empty()) {
      // A rank that does not answer is the one that did not arrive, whether or not others gave up
      // on this collective too (every on-time rank gives up at about the same moment).
      same.insert(same.end(), gave_up_here.begin(), gave_up_here.end());
      std::sort(same.begin(), same.end());
      who = fmt::format(": {} did not arrive (no answer to a roll call: stopped, hung, dead or busy elsewhere){}",
                        ranks_text(missing),
                        same.empty() ? "" : "; " + ranks_text(same) + " waited in the same collective");
    } else if (!gave_up_here.empty() && same.empty()) {
      // Every peer had given up on this very collective, and none is missing: they waited for this
      // rank, so it came late.
      who = fmt::format(": {} gave up waiting for this rank in this collective, so this rank is the one that came "
                        "late (it was stopped, slow or busy before it got here)",
                        ranks_text(gave_up_here));
    } else if (!elsewhere.empty()) {
      who = ": the ranks are in different collectives (they run different programs or steps)";
    } else {
      who = ": every rank answered from this collective";
    }
    throw CommError(fmt::format("rank {}: {} (collective #{}) {}{}{}", world_rank_, here, mine.seq, reason, who, elsewhere));
  }

  std::chrono::seconds timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm watch_ = MPI_COMM_NULL;  // roll calls only
  int rank_ = 0, size_ = 1, world_rank_ = 0;
  std::vector<int> world_of_;  // world rank of each rank of this group
  int64_t seq_ = 0;            // collectives started on this communicator
  Clock::duration longest_gap_{};  // the longest time between two polls of the current collective
  std::map<int, RollCall> heard_;  // roll calls heard, by rank of this group
  std::set<int> answered_;         // ranks told where this rank waits
  std::string current_;            // the collective this rank is in: what it answers a roll call with
};

}  // namespace

bool mpi_available() { return true; }

std::unique_ptr<Collectives> make_collectives(std::chrono::seconds timeout) {
  if (launched_by_mpi()) {
    auto mpi = std::make_unique<MpiCollectives>(timeout);
    if (mpi->size() > 1) return mpi;
  }
  return std::make_unique<LocalCollectives>();
}

#else

bool mpi_available() { return false; }

std::unique_ptr<Collectives> make_collectives(std::chrono::seconds) {
  if (launched_by_mpi()) throw CommError("zinf was built without MPI, but was started by an MPI launcher");
  return std::make_unique<LocalCollectives>();
}

#endif

}  // namespace zinf::engine
