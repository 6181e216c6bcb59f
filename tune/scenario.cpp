#include "tune/scenario.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "sim/isolate.hpp"
#include "tune/auto_config.hpp"

namespace zinf::tune {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) throw std::invalid_argument("percentile of no values");
  std::sort(v.begin(), v.end());
  const double x = std::clamp(p, 0.0, 1.0) * double(v.size() - 1);
  const auto i = static_cast<size_t>(x);
  return i + 1 < v.size() ? v[i] + (x - double(i)) * (v[i + 1] - v[i]) : v[i];
}

namespace {

// Simulates seeds 1 .. n of `program` in children; fills the band and returns the median seed's report.
sim::SimReport simulate_seeds(const core::Program& program, const core::HwProfile& hw, const sim::SimOptions& options, int n,
                         int workers, SeedBand& band) {
  std::vector<sim::SimReport> reports(static_cast<size_t>(n));
  std::string failure;
  sim::run_isolated_parallel(
      static_cast<size_t>(n), std::max(1, workers),
      [&](size_t i) {
        sim::SimOptions o = options;
        o.seed = i + 1;
        o.timeline_ranks.clear();
        o.timeline_all_ranks = false;
        return sim::report_to_json(sim::simulate(program, hw, o));
      },
      [&](size_t i, bool ok, const std::string& text) {
        if (ok)
          reports[i] = sim::report_from_json(text);
        else if (failure.empty())
          failure = "seed " + std::to_string(i + 1) + ": " + text;
      });
  if (!failure.empty()) throw std::runtime_error(failure);
  for (int i = 0; i < n; ++i) {
    const auto& r = reports[static_cast<size_t>(i)];
    band.seeds.push_back(uint64_t(i) + 1);
    band.step_time.push_back(r.step_time);
    band.tflops_per_gpu.push_back(r.tflops_per_gpu);
    band.slowest_gpu.push_back(r.slowest_gpu);
  }
  band.step_p10 = percentile(band.step_time, 0.1);
  band.step_median = percentile(band.step_time, 0.5);
  band.step_p90 = percentile(band.step_time, 0.9);
  band.tflops_p10 = percentile(band.tflops_per_gpu, 0.1);
  band.tflops_median = percentile(band.tflops_per_gpu, 0.5);
  band.tflops_p90 = percentile(band.tflops_per_gpu, 0.9);
  std::vector<size_t> order(static_cast<size_t>(n));
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return band.step_time[a] < band.step_time[b]; });
  return reports[order[(order.size() - 1) / 2]];
}

}  // namespace

ScenarioResult run_scenario(const Scenario& asked, const sim::SimOptions& options, int seeds, int workers) {
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
  sim::SimOptions opts = options;
  // A tensor-parallel group trains one micro-batch together.
  opts.samples_per_step = double(ranks / std::max<int64_t>(1, s.config.tensor_parallel)) * double(graph.spec.micro_batch) *
                          planned.program.micro_batches();
  auto t2 = clock::now();
  out.report = seeds > 0 ? simulate_seeds(planned.program, s.hw, opts, seeds, workers, out.band)
                         : sim::simulate(planned.program, s.hw, opts);
  auto t3 = clock::now();
  out.plan_seconds = std::chrono::duration<double>(t1 - t0).count();
  out.auto_seconds = std::chrono::duration<double>(t_auto - t0).count();
  out.simulate_seconds = std::chrono::duration<double>(t3 - t2).count();
  return out;
}

}  // namespace zinf::tune
