#include "cli/sweep_runner.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <stdexcept>

#include "engine/comm/collectives.hpp"
#include "sim/isolate.hpp"

#ifdef ZINF_HAVE_MPI
#include <mpi.h>
#endif

namespace zinf::cli {

#ifdef ZINF_HAVE_MPI

namespace {

// Worker -> rank 0: a request for one more point, carrying the result of the last one (none in a
// worker's first `jobs` requests). Rank 0 -> worker: a point index, or kStop.
constexpr int kRequestTag = 7101;
constexpr int kAssignTag = 7102;
constexpr uint64_t kStop = ~uint64_t{0};

// How long rank 0 lets its own points run before it looks for requests again. Each worker holds
// one point beyond those it runs (kAhead), so it starts its next point the moment one ends and
// never waits on this interval; rank 0 wakes rarely enough that the polling costs well under 1 %
// of a core.
constexpr int kServeEveryMs = 5;
constexpr int kAhead = 1;

std::string encode_result(size_t index, bool ok, const std::string& text) {
  std::string msg(sizeof(uint64_t) + 1, '\0');
  const uint64_t i = index;
  std::memcpy(msg.data(), &i, sizeof i);
  msg[sizeof i] = ok ? 1 : 0;
  return msg + text;
}

}  // namespace

SweepWorld::SweepWorld() {
  if (!engine::launched_by_mpi()) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  mpi_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

SweepWorld::~SweepWorld() {
  if (!mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

SweepWorld::Verdict SweepWorld::agree(bool ok) const {
  if (!mpi_) return {ok, ok};
  int mine = ok ? 1 : 0, all = 0, first = mine;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Bcast(&first, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return {all != 0, first != 0};
}

void SweepWorld::run(const std::vector<size_t>& todo, int jobs, const std::function<std::string(size_t)>& job,
                     const std::function<void(size_t, bool, const std::string&)>& done) const {
  jobs = std::max(1, jobs);
  try {
    if (rank_ == 0) run_rank0(todo, jobs, job, done);
    else run_worker(jobs, job);
  } catch (const std::exception& e) {
    // Peers would wait for this rank forever: end the job with the reason.
    if (size_ > 1) {
      fmt::print(stderr, "zinf sweep: rank {}: {}\n", rank_, e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    throw;
  }
}

void SweepWorld::run_rank0(const std::vector<size_t>& todo, int jobs, const std::function<std::string(size_t)>& job,
                           const std::function<void(size_t, bool, const std::string&)>& done) const {
  std::deque<size_t> queue(todo.begin(), todo.end());
  sim::IsolatedPool pool;
  std::vector<int> stops(static_cast<size_t>(size_), 0);
  int workers_left = size_ - 1;
  auto next_for = [&](int src) {
    uint64_t v = kStop;
    if (!queue.empty()) {
      v = queue.front();
      queue.pop_front();
    } else if (++stops[static_cast<size_t>(src)] == jobs + kAhead) {
      --workers_left;
    }
    MPI_Send(&v, 1, MPI_UINT64_T, src, kAssignTag, MPI_COMM_WORLD);
  };
  auto serve = [&] {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kRequestTag, MPI_COMM_WORLD, &flag, &st);
      if (!flag) return;
      int bytes = 0;
      MPI_Get_count(&st, MPI_BYTE, &bytes);
      std::string msg(static_cast<size_t>(bytes), '\0');
      MPI_Recv(msg.data(), bytes, MPI_BYTE, st.MPI_SOURCE, kRequestTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (msg.size() > sizeof(uint64_t)) {
        uint64_t index = 0;
        std::memcpy(&index, msg.data(), sizeof index);
        done(static_cast<size_t>(index), msg[sizeof index] != 0, msg.substr(sizeof index + 1));
      }
      next_for(st.MPI_SOURCE);
    }
  };
  for (;;) {
    while (!queue.empty() && static_cast<int>(pool.running()) < jobs) {
      const size_t i = queue.front();
      queue.pop_front();
      pool.start(i, [&job, i] { return job(i); });
    }
    if (queue.empty() && pool.running() == 0 && workers_left == 0) break;
    if (pool.running() > 0) {
      for (auto& f : pool.wait(size_ > 1 ? kServeEveryMs : -1)) done(f.index, f.ok, f.text);
    } else {
      ::usleep(1000);  // only workers' points are left: wait for their results without spinning
    }
    if (size_ > 1) serve();
  }
}

void SweepWorld::run_worker(int jobs, const std::function<std::string(size_t)>& job) const {
  sim::IsolatedPool pool;
  std::deque<size_t> ahead;  // points assigned and not yet started
  const int slots = jobs + kAhead;
  for (int k = 0; k < slots; ++k) MPI_Send(nullptr, 0, MPI_BYTE, 0, kRequestTag, MPI_COMM_WORLD);
  int stops = 0;
  uint64_t assigned = 0;
  MPI_Request recv;
  MPI_Irecv(&assigned, 1, MPI_UINT64_T, 0, kAssignTag, MPI_COMM_WORLD, &recv);
  for (;;) {
    for (int flag = 1; flag && stops < slots;) {
      MPI_Test(&recv, &flag, MPI_STATUS_IGNORE);
      if (!flag) break;
      if (assigned == kStop) ++stops;
      else ahead.push_back(static_cast<size_t>(assigned));
      if (stops < slots) MPI_Irecv(&assigned, 1, MPI_UINT64_T, 0, kAssignTag, MPI_COMM_WORLD, &recv);
    }
    while (!ahead.empty() && static_cast<int>(pool.running()) < jobs) {
      const size_t i = ahead.front();
      ahead.pop_front();
      pool.start(i, [&job, i] { return job(i); });
    }
    if (stops == slots && pool.running() == 0) break;
    if (pool.running() == 0) {
      ::usleep(200);  // waiting for rank 0's answer; MPI's own blocking wait would spin on a core
      continue;
    }
    for (auto& f : pool.wait(ahead.empty() ? 2 : 20)) {
      // Start the point held ahead before telling rank 0, so the core never idles on the round trip.
      while (!ahead.empty() && static_cast<int>(pool.running()) < jobs) {
        const size_t i = ahead.front();
        ahead.pop_front();
        pool.start(i, [&job, i] { return job(i); });
      }
      const std::string msg = encode_result(f.index, f.ok, f.text);
      MPI_Send(msg.data(), static_cast<int>(msg.size()), MPI_BYTE, 0, kRequestTag, MPI_COMM_WORLD);
    }
  }
}

#else  // no MPI in this build: always a world of one

SweepWorld::SweepWorld() {
  if (engine::launched_by_mpi())
    fmt::print(stderr, "zinf sweep: started by mpirun, but this build has no MPI: every rank runs the whole sweep\n");
}
SweepWorld::~SweepWorld() = default;
SweepWorld::Verdict SweepWorld::agree(bool ok) const { return {ok, ok}; }

void SweepWorld::run(const std::vector<size_t>& todo, int jobs, const std::function<std::string(size_t)>& job,
                     const std::function<void(size_t, bool, const std::string&)>& done) const {
  run_rank0(todo, std::max(1, jobs), job, done);
}

void SweepWorld::run_rank0(const std::vector<size_t>& todo, int jobs, const std::function<std::string(size_t)>& job,
                           const std::function<void(size_t, bool, const std::string&)>& done) const {
  sim::run_isolated_parallel(
      todo.size(), jobs, [&](size_t k) { return job(todo[k]); },
      [&](size_t k, bool ok, const std::string& text) { done(todo[k], ok, text); });
}

void SweepWorld::run_worker(int, const std::function<std::string(size_t)>&) const {}

#endif

}  // namespace zinf::cli
