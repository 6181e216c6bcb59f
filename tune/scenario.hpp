// One simulated training step from its inputs: model spec, hwprofile, run config and node count go
// through the planner (core::make_plan) to a Program, which the simulator runs. Used by `zinf sim`,
// `zinf sweep` and the benchmarks, so that all three simulate exactly what the planner produced.
// `auto` knobs in the config are first decided by tune/auto_config.hpp, as `zinf plan` and
// `zinf train` decide them.
// Creates this process's SimGrid engine (see simulator.hpp): once per process.
#pragma once
#include <string>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "sim/simulator.hpp"

namespace zinf::sim {

struct Scenario {
  core::ModelSpec model;
  core::HwProfile hw;
  core::RunConfig config;
  int nodes = 1;
};

struct ScenarioResult {
  core::Plan plan;
  int64_t program_tasks = 0;
  double ideal_step_time = 0;    // core::estimate_step_time of the same Program
  double plan_seconds = 0;       // wall time of planning, `auto` resolved
  double auto_seconds = 0;       // ... of which resolving `auto` (its plan is the run's)
  double simulate_seconds = 0;   // wall time of the simulation
  std::string auto_summary;      // what `auto` chose ("" when nothing was auto)
  SimReport report;
};

// Plans and simulates. Throws core::PlanError when the model does not fit.
ScenarioResult run_scenario(const Scenario& s, const SimOptions& options);

}  // namespace zinf::sim
