// How fast the simulator runs one training step: a 1T-parameter GPT on 512 GPUs (32 DGX-2 nodes,
// ZeRO-Infinity with params and optimizer states on NVMe), folded (node 0 simulated) and with every
// rank simulated, and a 100B model on one DGX-2. Reports the wall time of the simulation, the child's
// CPU time (a shared machine inflates it less than the wall time), SimGrid activities per second and
// the simulating process's peak resident memory. Planning runs in the benchmark process; each
// simulation runs in a child (one SimGrid engine per process), whose CPU time and peak RSS are read
// from getrusage(RUSAGE_CHILDREN). experiments/sim/speed.py measures the published 512-GPU point the
// same way, against another binary in the same run.
//   build/experiments/bench_simulator
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "formats/config_paths.hpp"
#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "models/gpt.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace {

using namespace zinf;

void simulate_step(benchmark::State& state, const std::string& model, int nodes, const std::string& config,
                   bool fold = true) {
  const std::string root = core::zinf_root(ZINF_SOURCE_DIR);
  const auto hw = core::load_hwprofile(core::resolve_config("dgx2-v100", "hwprofiles", root));
  std::vector<std::string> warnings;
  const auto cfg = core::load_any_run_config(core::resolve_config(config, "configs", root), warnings);
  const auto spec = models::find_model(model, ZINF_SOURCE_DIR);
  const auto planned = core::make_plan(models::build_gpt(spec), hw, cfg, nodes * hw.node.gpus);

  double wall = 0, activities = 0, tasks = 0, step = 0, cpu = 0;
  for (auto _ : state) {
    rusage before{};
    getrusage(RUSAGE_CHILDREN, &before);
    auto t0 = std::chrono::steady_clock::now();
    auto out = sim::run_isolated([&] {
      sim::SimOptions o;
      o.fold_symmetric_nodes = fold;
      auto r = sim::simulate(planned.program, hw, o);
      return sim::report_to_json(r);
    });
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage after{};
    getrusage(RUSAGE_CHILDREN, &after);
    auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
    cpu = seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_stime);
    state.SetIterationTime(wall);
    auto r = sim::report_from_json(out);
    activities = double(r.activities);
    tasks = double(r.tasks_run);
    step = r.step_time;
  }
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  state.counters["events_per_s"] = activities / wall;
  state.counters["activities"] = activities;
  state.counters["tasks"] = tasks;
  state.counters["simulated_step_s"] = step;
  state.counters["child_cpu_s"] = cpu;
  state.counters["child_peak_rss_MiB"] = double(ru.ru_maxrss) / 1024.0;
}

void BM_Simulate1T_512Gpus(benchmark::State& state) { simulate_step(state, "gpt-1t", 32, "infinity-nvme"); }
void BM_Simulate100B_1Dgx2(benchmark::State& state) { simulate_step(state, "gpt-100b", 1, "infinity-nvme"); }
void BM_Simulate1T_512Gpus_EveryRank(benchmark::State& state) {
  simulate_step(state, "gpt-1t", 32, "infinity-nvme", false);
}

BENCHMARK(BM_Simulate100B_1Dgx2)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_Simulate1T_512Gpus)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);
BENCHMARK(BM_Simulate1T_512Gpus_EveryRank)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
