#include "tune/scenario.hpp"

#include <chrono>

#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "tune/auto_config.hpp"

namespace zinf::sim {

ScenarioResult run_scenario(const Scenario& asked, const SimOptions& options) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const AutoResolution resolved = resolve_auto(asked.model, asked.hw, asked.nodes, asked.config);
  const auto t_auto = clock::now();
  const Scenario s{asked.model, asked.hw, resolved.config, asked.nodes};
  const int ranks = s.nodes * s.hw.node.gpus;

  // The plan `auto` made while deciding is this run's; else plan it.
  auto [graph, planned] = resolved.planned ? *resolved.planned : models::plan_gpt(s.model, s.hw, s.config, ranks);
  auto t1 = clock::now();

  ScenarioResult out;
  out.auto_summary = resolved.summary;
  out.plan = planned.plan;
  out.program_tasks = static_cast<int64_t>(planned.program.tasks().size());
  out.ideal_step_time = core::estimate_step_time(planned.program, s.hw);
  SimOptions opts = options;
  // A tensor-parallel group trains one micro-batch together.
  opts.samples_per_step = double(ranks / std::max<int64_t>(1, s.config.tensor_parallel)) * double(graph.spec.micro_batch) *
                          planned.program.micro_batches();
  auto t2 = clock::now();
  out.report = simulate(planned.program, s.hw, opts);
  auto t3 = clock::now();
  out.plan_seconds = std::chrono::duration<double>(t1 - t0).count();
  out.auto_seconds = std::chrono::duration<double>(t_auto - t0).count();
  out.simulate_seconds = std::chrono::duration<double>(t3 - t2).count();
  return out;
}

}  // namespace zinf::sim
