// MPI implementation of Collectives. Every operation is a non-blocking MPI collective completed by
// polling MPI_Test against a deadline, so that a peer that died (killed, I/O error) turns into a
// CommError naming the operation after `timeout`, and then MPI_Abort ends the job, rather than a
// hang. MPI is initialized with MPI_THREAD_SERIALIZED: the engine calls it from its comm lane, from
// its compute lane (tensor-parallel all-reduces, on a group of their own) and, between steps, from
// the main thread; one process-wide mutex held around each MPI call keeps those calls serialized.
// It is never held while waiting, so each lane's collective makes progress whichever lane polls.
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>
#include <thread>

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
  MpiCollectives(MPI_Comm comm, std::chrono::seconds timeout) : timeout_(timeout), comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

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
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_gather(const void* shard, std::size_t shard_bytes, void* full, const char* what) override {
    MPI_Request req;
    std::unique_lock<std::mutex> lock(mpi_mutex());
    check(MPI_Iallgather(shard == full ? MPI_IN_PLACE : shard, int_count(shard_bytes, what), MPI_BYTE, full,
                         int_count(shard_bytes, what), MPI_BYTE, comm_, &req),
          "all-gather", what);
    lock.unlock();
    wait(req, "all-gather", what);
  }

  void reduce_scatter(const float* full, float* shard, std::size_t n, const char* what) override {
    MPI_Request req;
    std::unique_lock<std::mutex> lock(mpi_mutex());
    check(MPI_Ireduce_scatter_block(full, shard, int_count(n, what), MPI_FLOAT, MPI_SUM, comm_, &req),
          "reduce-scatter", what);
    lock.unlock();
    wait(req, "reduce-scatter", what);
  }

  void all_reduce(float* data, std::size_t n, const char* what) override {
    MPI_Request req;
    std::unique_lock<std::mutex> lock(mpi_mutex());
    check(MPI_Iallreduce(MPI_IN_PLACE, data, int_count(n, what), MPI_FLOAT, MPI_SUM, comm_, &req), "all-reduce", what);
    lock.unlock();
    wait(req, "all-reduce", what);
  }

  void all_reduce(double* data, std::size_t n, const char* what) override {
    MPI_Request req;
    std::unique_lock<std::mutex> lock(mpi_mutex());
    check(MPI_Iallreduce(MPI_IN_PLACE, data, int_count(n, what), MPI_DOUBLE, MPI_SUM, comm_, &req), "all-reduce",
          what);
    lock.unlock();
    wait(req, "all-reduce", what);
  }

  void broadcast(void* data, std::size_t bytes, int root, const char* what) override {
    MPI_Request req;
    std::unique_lock<std::mutex> lock(mpi_mutex());
    check(MPI_Ibcast(data, int_count(bytes, what), MPI_BYTE, root, comm_, &req), "broadcast", what);
    lock.unlock();
    wait(req, "broadcast", what);
  }

  void reduce(const float* in, float* out, std::size_t n, int root, const char* what) override {
    MPI_Request req;
    const void* send = (in == out && rank_ == root) ? MPI_IN_PLACE : in;
    std::unique_lock<std::mutex> lock(mpi_mutex());
    check(MPI_Ireduce(send, out, int_count(n, what), MPI_FLOAT, MPI_SUM, root, comm_, &req), "reduce", what);
    lock.unlock();
    wait(req, "reduce", what);
  }

  void barrier(const char* what) override {
    MPI_Request req;
    std::unique_lock<std::mutex> lock(mpi_mutex());
    check(MPI_Ibarrier(comm_, &req), "barrier", what);
    lock.unlock();
    wait(req, "barrier", what);
  }

  std::unique_ptr<Collectives> split(int color, int key, const char* what) override {
    MPI_Comm sub = MPI_COMM_NULL;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      check(MPI_Comm_split(comm_, color, key, &sub), "split", what);
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
  int int_count(std::size_t n, const char* what) const {
    if (n > static_cast<std::size_t>(INT32_MAX))
      throw CommError(fmt::format("{}: {} elements exceed MPI's int count; split the buffer", what, n));
    return static_cast<int>(n);
  }

  void check(int rc, const char* op, const char* what) const {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw CommError(fmt::format("rank {}: {} of {} failed: {}", rank_, op, what, std::string(msg, len)));
  }

  // Polls with a growing sleep so an idle comm lane does not burn a core that compute needs. The
  // sleep stays short: OpenMPI moves a collective forward only inside MPI_Test, so each round of it
  // can wait out one nap; naps of up to 500 us cost a 2-rank step here tens of milliseconds.
  void wait(MPI_Request& req, const char* op, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    auto nap = std::chrono::microseconds(1);
    constexpr auto kLongestNap = std::chrono::microseconds(50);
    for (;;) {
      int flag = 0;
      {
        std::lock_guard<std::mutex> lock(mpi_mutex());
        check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), op, what);
      }
      if (flag) return;
      if (std::chrono::steady_clock::now() > deadline)
        throw CommError(fmt::format("rank {}: {} of {} did not complete within {} s: a peer rank has probably failed",
                                    rank_, op, what, timeout_.count()));
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, kLongestNap);
    }
  }

  std::chrono::seconds timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
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
