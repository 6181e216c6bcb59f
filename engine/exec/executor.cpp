#include "engine/exec/executor.hpp"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/io/io_priority.hpp"

namespace zinf::engine {

using core::Lane;
using core::Task;
using Clock = std::chrono::steady_clock;

Executor::Executor(const core::Program& program, int rank, TaskBackend& backend)
    : program_(program), rank_(rank), backend_(backend) {
  if (rank < 0 || rank >= program.ranks())
    throw std::invalid_argument(fmt::format("rank {} is outside the program's {} ranks", rank, program.ranks()));
  if (const auto unstated = core::unstated_waits(program, backend.waits()); !unstated.empty())
    throw std::invalid_argument(fmt::format("the backend waits where the Program states no dependency ({} such waits); "
                                            "the first: {}",
                                            unstated.size(), unstated.front()));
}

core::Timeline Executor::run_step() {
  const auto& tasks = program_.tasks();
  const size_t n = tasks.size();

  // A lane's tasks in id order, and how far its workers got: `claimed` tasks have a worker,
  // `started` of them have started. Tasks start in id order: a worker waits until the task before
  // its own has started and its dependencies have ended.
  struct LaneState {
    std::vector<int32_t> ids;
    size_t claimed = 0, started = 0;
  };
  std::vector<LaneState> lanes(core::kLaneCount);
  for (const auto& t : tasks) lanes[static_cast<size_t>(t.lane)].ids.push_back(t.id);

  // One mutex guards the step's state; each lane's workers sleep on the lane's condition variable,
  // woken only when the lane's next task becomes startable (or the step fails): waking every lane
  // on every completion cost a context switch per lane per task, on cores the lanes share with compute.
  std::mutex mu;
  std::vector<std::condition_variable> lane_cv(core::kLaneCount);
  std::vector<uint8_t> done(n, 0);
  bool failed = false;
  std::string failure;
  int32_t failed_task = -1;

  core::PerTier live = program_.static_bytes(rank_);
  peak_ = live;
  const core::PerTier& budget = program_.budget();

  std::vector<core::TimelineEvent> events;
  events.reserve(n);
  const auto t0 = Clock::now();
  auto seconds = [&](Clock::time_point t) { return std::chrono::duration<double>(t - t0).count(); };

  auto ready = [&](const Task& task) {
    for (int32_t d : program_.deps(task))
      if (!done[static_cast<size_t>(d)]) return false;
    return true;
  };
  // The lane's next task to start has a worker waiting and its dependencies are done.
  auto startable = [&](const LaneState& l) {
    return l.started < l.claimed && ready(program_.task(l.ids[l.started]));
  };
  auto wake_all = [&] {
    for (auto& c : lane_cv) c.notify_all();
  };
  auto fail = [&](int32_t id, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed) {
      failed = true;
      failed_task = id;
      failure = what;
    }
    wake_all();
  };

  auto worker = [&](size_t lane) {
    if (lane == static_cast<size_t>(Lane::NvmeRead) || lane == static_cast<size_t>(Lane::NvmeWrite)) raise_io_thread_priority();
    LaneState& L = lanes[lane];
    for (;;) {
      int32_t id;
      Task task;
      Clock::time_point start;
      {
        std::unique_lock<std::mutex> lock(mu);
        if (failed || L.claimed == L.ids.size()) return;
        const size_t mine = L.claimed++;
        id = L.ids[mine];
        task = program_.task_for_rank(id, rank_);
        lane_cv[lane].wait(lock, [&] { return failed || (L.started == mine && ready(task)); });
        if (failed) return;
        for (const auto& e : program_.allocs(task, rank_)) {
          double& tier_live = core::at(live, e.tier);
          tier_live += e.bytes;
          if (tier_live > core::at(budget, e.tier) * (1.0 + 1e-9)) {
            failed = true;
            failed_task = id;
            failure = fmt::format("{} memory over budget: {:.0f} bytes live, budget {:.0f}", core::to_string(e.tier),
                                  tier_live, core::at(budget, e.tier));
            wake_all();
            return;
          }
          core::at(peak_, e.tier) = std::max(core::at(peak_, e.tier), tier_live);
        }
        // Taken under the lock, so that the Timeline shows a lane's tasks starting in id order.
        start = Clock::now();
        ++L.started;
        if (startable(L)) lane_cv[lane].notify_all();
      }
      if (program_.active(task, rank_)) {
        try {
          backend_.run(task);
        } catch (const std::exception& e) {
          fail(id, e.what());
          return;
        }
      }
      const auto end = Clock::now();
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& e : program_.frees(task, rank_)) core::at(live, e.tier) -= e.bytes;
        done[static_cast<size_t>(id)] = 1;
        if (program_.active(task, rank_))
          events.push_back({rank_, task.lane, id, task.kind, program_.label(task), seconds(start), seconds(end),
                            task.bytes, task.flops});
        for (size_t l = 0; l < lanes.size(); ++l)
          if (startable(lanes[l])) lane_cv[l].notify_all();
      }
    }
  };

  // One worker per lane, or the lane's slots' worth (Program::lane_slots) where tasks may overlap.
  std::vector<std::thread> threads;
  for (size_t l = 0; l < lanes.size(); ++l) {
    if (lanes[l].ids.empty()) continue;
    const auto slots = static_cast<size_t>(std::max(1, program_.lane_slots(static_cast<Lane>(l))));
    for (size_t k = 0; k < std::min(slots, lanes[l].ids.size()); ++k) threads.emplace_back(worker, l);
  }
  for (auto& t : threads) t.join();

  if (failed) {
    const Task& t = program_.task(failed_task);
    throw ExecutionError(failed_task, fmt::format("task {} ({}, lane {}) failed: {}", failed_task, program_.label(t),
                                                  core::to_string(t.lane), failure));
  }
  core::Timeline timeline;
  timeline.events = std::move(events);
  return timeline;
}

}  // namespace zinf::engine
