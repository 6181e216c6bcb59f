#include "engine/exec/executor.hpp"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/io/io_priority.hpp"
#include "engine/thread_name.hpp"

namespace zinf::engine {

using core::Lane;
using core::Task;
using Clock = std::chrono::steady_clock;

Executor::Executor(const core::Program& program, int rank, TaskBackend& backend)
    : program_(program), rank_(rank), backend_(backend) {
  if (rank < 0 || rank >= program.ranks())
    throw std::invalid_argument(fmt::format("rank {} is outside the program's {} ranks", rank, program.ranks()));
  if (const auto unstated = core::unstated_waits(program, backend.waits(program)); !unstated.empty())
    throw std::invalid_argument(fmt::format("the backend waits where the Program states no dependency ({} such waits); "
                                            "the first: {}",
                                            unstated.size(), unstated.front()));
}

namespace {

// One step of one rank: the lanes, their workers and the state they share. One mutex guards that
// state; each lane's workers sleep on the lane's condition variable, woken only when the lane's next
// task becomes startable (or the step fails): waking every lane on every completion cost a context
// switch per lane per task, on cores the lanes share with compute.
class StepRun {
public:
  StepRun(const core::Program& program, int rank, TaskBackend& backend, core::PerTier& peak)
      : program_(program), rank_(rank), backend_(backend), peak_(peak), lanes_(core::kLaneCount),
        lane_cv_(core::kLaneCount), done_(program.tasks().size(), 0), live_(program.static_bytes(rank)),
        t0_(Clock::now()) {
    for (const auto& t : program_.tasks()) lanes_[static_cast<size_t>(t.lane)].ids.push_back(t.id);
    peak_ = live_;
    events_.reserve(program_.tasks().size());
  }

  // One worker per lane, or the lane's slots' worth (Program::lane_slots) where tasks may overlap.
  core::Timeline run() {
    std::vector<std::thread> threads;
    for (size_t l = 0; l < lanes_.size(); ++l) {
      if (lanes_[l].ids.empty()) continue;
      const auto slots = static_cast<size_t>(std::max(1, program_.lane_slots(static_cast<Lane>(l))));
      for (size_t k = 0; k < std::min(slots, lanes_[l].ids.size()); ++k) threads.emplace_back([this, l] { worker(l); });
    }
    for (auto& t : threads) t.join();
    if (failed_) {
      const Task& t = program_.task(failed_task_);
      throw ExecutionError(failed_task_, fmt::format("task {} ({}, lane {}) failed: {}", failed_task_, program_.label(t),
                                                     core::to_string(t.lane), failure_));
    }
    core::Timeline timeline;
    timeline.events = std::move(events_);
    return timeline;
  }

private:
  // A lane's tasks in id order, and how far its workers got: `claimed` tasks have a worker,
  // `started` of them have started. Tasks start in id order: a worker waits until the task before
  // its own has started and its dependencies have ended.
  struct LaneState {
    std::vector<int32_t> ids;
    size_t claimed = 0, started = 0;
  };

  double seconds(Clock::time_point t) const { return std::chrono::duration<double>(t - t0_).count(); }
  bool ready(const Task& task) const {
    for (int32_t d : program_.deps(task))
      if (!done_[static_cast<size_t>(d)]) return false;
    return true;
  }
  // The lane's next task to start has a worker waiting and its dependencies are done.
  bool startable(const LaneState& l) const { return l.started < l.claimed && ready(program_.task(l.ids[l.started])); }
  void wake_all() {
    for (auto& c : lane_cv_) c.notify_all();
  }
  // Under the lock: the first failure is the step's.
  void fail_locked(int32_t id, const std::string& what) {
    if (!failed_) {
      failed_ = true;
      failed_task_ = id;
      failure_ = what;
    }
    wake_all();
  }

  void worker(size_t lane) {
    name_this_thread(std::string("zinf ") + core::to_string(static_cast<Lane>(lane)));
    if (lane == static_cast<size_t>(Lane::NvmeRead) || lane == static_cast<size_t>(Lane::NvmeWrite)) raise_io_thread_priority();
    for (;;) {
      int32_t id;
      Task task;
      Clock::time_point start;
      if (!claim_and_start(lane, id, task, start)) return;
      if (program_.active(task, rank_)) {
        try {
          backend_.run(task);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu_);
          fail_locked(id, e.what());
          return;
        }
      }
      finish(id, task, start, Clock::now());
    }
  }

  // Claims the lane's next task, waits until it may start, books its allocations against the
  // budget and marks it started. False when the lane has nothing left or the step failed.
  bool claim_and_start(size_t lane, int32_t& id, Task& task, Clock::time_point& start) {
    LaneState& L = lanes_[lane];
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_ || L.claimed == L.ids.size()) return false;
    const size_t mine = L.claimed++;
    id = L.ids[mine];
    task = program_.task_for_rank(id, rank_);
    lane_cv_[lane].wait(lock, [&] { return failed_ || (L.started == mine && ready(task)); });
    if (failed_) return false;
    const core::PerTier& budget = program_.budget();
    for (const auto& e : program_.allocs(task, rank_)) {
      double& tier_live = core::at(live_, e.tier);
      tier_live += e.bytes;
      if (tier_live > core::at(budget, e.tier) * (1.0 + 1e-9)) {
        fail_locked(id, fmt::format("{} memory over budget: {:.0f} bytes live, budget {:.0f}", core::to_string(e.tier),
                                    tier_live, core::at(budget, e.tier)));
        return false;
      }
      core::at(peak_, e.tier) = std::max(core::at(peak_, e.tier), tier_live);
    }
    // Taken under the lock, so that the Timeline shows a lane's tasks starting in id order.
    start = Clock::now();
    ++L.started;
    if (startable(L)) lane_cv_[lane].notify_all();
    return true;
  }

  // Frees the task's memory, records it, and wakes each lane whose next task became startable.
  void finish(int32_t id, const Task& task, Clock::time_point start, Clock::time_point end) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : program_.frees(task, rank_)) core::at(live_, e.tier) -= e.bytes;
    done_[static_cast<size_t>(id)] = 1;
    if (program_.active(task, rank_))
      events_.push_back({rank_, task.lane, id, task.kind, program_.label(task), seconds(start), seconds(end), task.bytes,
                         task.flops});
    for (size_t l = 0; l < lanes_.size(); ++l)
      if (startable(lanes_[l])) lane_cv_[l].notify_all();
  }

  const core::Program& program_;
  const int rank_;
  TaskBackend& backend_;
  core::PerTier& peak_;
  std::vector<LaneState> lanes_;
  std::mutex mu_;
  std::vector<std::condition_variable> lane_cv_;
  std::vector<uint8_t> done_;
  bool failed_ = false;
  std::string failure_;
  int32_t failed_task_ = -1;
  core::PerTier live_;
  std::vector<core::TimelineEvent> events_;
  const Clock::time_point t0_;
};

}  // namespace

core::Timeline Executor::run_step() { return StepRun(program_, rank_, backend_, peak_).run(); }

}  // namespace zinf::engine
