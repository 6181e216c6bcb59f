// The Executor runs one rank's share of a core::Program for real: one worker thread per lane slot
// (Program::lane_slots: one per lane, several on the NVMe lanes), a lane's tasks starting in
// program order, each once its dependencies have finished and the task before it has started. What a task *does* is the TaskBackend's business; the Executor makes no decision of its
// own (docs/DESIGN.md): it only orders, times and accounts. It records a core::Timeline and tracks the
// bytes each task allocates and frees per tier against the Program's budget; going over a budget is
// reported with the task id as an ExecutionError. One Executor per rank; run_step() is not
// reentrant, but the backend's run() is called from several lane threads at once.
#pragma once
#include <chrono>
#include <stdexcept>
#include <string>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"

namespace zinf::engine {

// What running a task means on some hardware. run() is called on the task's lane thread after all
// its dependencies finished; it must be safe to call concurrently for tasks of different lanes, and
// for tasks of one lane where the Program gives that lane several slots.
// It throws (any std::exception) to fail the step.
class TaskBackend {
public:
  virtual ~TaskBackend() = default;
  virtual void run(const core::Task& task) = 0;
  // Every wait run() makes beyond the Executor's own ordering (a task relying on another having
  // finished) when it runs `program`. The Executor refuses a Program that does not state each as a
  // dependency (core::unstated_waits), so that the simulator, which sees only the Program, waits too.
  virtual std::vector<core::TaskWait> waits(const core::Program& /*program*/) const { return {}; }
};

class ExecutionError : public std::runtime_error {
public:
  ExecutionError(int32_t task, const std::string& message) : std::runtime_error(message), task_(task) {}
  int32_t task() const { return task_; }

private:
  int32_t task_;
};

class Executor {
public:
  // Throws std::invalid_argument when a wait the backend declares is not a Program dependency.
  Executor(const core::Program& program, int rank, TaskBackend& backend);

  // Runs every task of this rank once; returns when all lanes are done. Throws ExecutionError for
  // the first task that failed (the other lanes stop at their next task) or that went over a tier's
  // budget. Timeline times are seconds from the start of this step.
  core::Timeline run_step();

  // Peak bytes per tier (static + live) seen in the last step, as the Program's memory events count them.
  const core::PerTier& peak_bytes() const { return peak_; }

private:
  const core::Program& program_;
  int rank_;
  TaskBackend& backend_;
  core::PerTier peak_{};
};

}  // namespace zinf::engine
