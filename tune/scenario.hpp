// One simulated training step from its inputs: model spec, hwprofile, run config and node count go
// through the planner (core::make_plan) to a Program, which the simulator runs. Used by `zinf sim`,
// `zinf sweep` and the benchmarks, so that all three simulate exactly what the planner produced.
// `auto` knobs in the config are first decided by tune/auto_config.hpp, as `zinf plan` and
// `zinf train` decide them.
// Creates this process's SimGrid engine (see simulator.hpp): once per process.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "sim/simulator.hpp"

namespace zinf::tune {

struct Scenario {
  core::ModelSpec model;
  core::HwProfile hw;
  core::RunConfig config;
  int nodes = 1;
};

// The step over several seeds of GPU variability and node placement (SimOptions::seed): each seed
// simulated in a child process; percentiles interpolate linearly between the sorted values.
struct SeedBand {
  std::vector<uint64_t> seeds;
  std::vector<double> step_time, tflops_per_gpu, slowest_gpu;  // in seed order
  double step_p10 = 0, step_median = 0, step_p90 = 0;
  double tflops_p10 = 0, tflops_median = 0, tflops_p90 = 0;
};

struct ScenarioResult {
  core::Plan plan;
  int64_t program_tasks = 0;
  double ideal_step_time = 0;    // core::estimate_step_time of the same Program
  double plan_seconds = 0;       // wall time of planning, `auto` resolved
  double auto_seconds = 0;       // ... of which resolving `auto` (its plan is the run's)
  double simulate_seconds = 0;   // wall time of the simulation
  std::string auto_summary;      // what `auto` chose ("" when nothing was auto)
  sim::SimReport report;      // with seeds: the run of the seed whose step is the median (the lower one of two)
  SeedBand band;         // empty without seeds
};

// Plans and simulates. Throws core::PlanError when the model does not fit. With `seeds` > 0, plans
// once and simulates seeds 1 .. seeds (options.seed is ignored), `workers` children at a time, none
// in this process; the report is then the median seed's, without a Timeline.
ScenarioResult run_scenario(const Scenario& s, const sim::SimOptions& options, int seeds = 0, int workers = 1);

// The value below which a fraction p of `values` lie, interpolated between order statistics.
double percentile(std::vector<double> values, double p);

}  // namespace zinf::tune
