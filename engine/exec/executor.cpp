#include "engine/exec/executor.hpp"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

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

  std::vector<std::vector<int32_t>> lanes(core::kLaneCount);
  for (const auto& t : tasks) lanes[static_cast<size_t>(t.lane)].push_back(t.id);

  // One mutex guards the step's state; each lane sleeps on its own condition variable and is woken
  // only when the task it waits for becomes ready (or the step fails): waking every lane on every
  // completion cost a context switch per lane per task, on cores the lanes share with compute.
  std::mutex mu;
  std::vector<std::condition_variable> lane_cv(core::kLaneCount);
  std::vector<int32_t> waiting_for(core::kLaneCount, -1);
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

  auto worker = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
      const Task task = program_.task_for_rank(id, rank_);
      const size_t lane = static_cast<size_t>(task.lane);
      {
        std::unique_lock<std::mutex> lock(mu);
        waiting_for[lane] = id;
        lane_cv[lane].wait(lock, [&] { return failed || ready(task); });
        waiting_for[lane] = -1;
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
      }
      const auto start = Clock::now();
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
        for (size_t l = 0; l < lane_cv.size(); ++l)
          if (waiting_for[l] >= 0 && ready(program_.task(waiting_for[l]))) lane_cv[l].notify_one();
      }
    }
  };

  std::vector<std::thread> threads;
  for (const auto& ids : lanes)
    if (!ids.empty()) threads.emplace_back(worker, std::cref(ids));
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
