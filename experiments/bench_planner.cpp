// Time and peak memory (RSS) of planning one training step of a 32T-parameter GPT
// (models/gpt-32t.yaml) on 512 ranks (64 DGX H200 nodes; on 32 DGX-2 nodes it does not fit: its checkpoints
// overflow host memory and its model states plus a saved checkpoint overflow NVMe) with ZeRO-Infinity's
// NVMe offload (configs/infinity-nvme.yaml). Argument: the tiling factor (0 = auto, which picks 1
// on H200; 16 is a stress case with ten times the tasks). Goal: under 5 s and under 4 GiB.
//   build-plan/experiments/bench_planner
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <string>

#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "models/gpt.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace {

using namespace zinf::core;

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;  // Linux reports KiB
}

void BM_Plan32TOn512Ranks(benchmark::State& state) {
  const std::string root = ZINF_SOURCE_DIR;
  const ModelSpec spec = load_model_spec(root + "/models/gpt-32t.yaml");
  const HwProfile hw = load_hwprofile(root + "/hwprofiles/h200-node.yaml");
  RunConfig config = load_run_config(root + "/configs/infinity-nvme.yaml");
  config.tiling_factor = state.range(0);
  const ModelGraph graph = zinf::models::build_gpt(spec);
  size_t tasks = 0;
  int64_t tiles = 0;
  for (auto _ : state) {
    PlanResult r = make_plan(graph, hw, config, 512);
    tasks = r.program.tasks().size();
    tiles = r.plan.tiling_factor;
    benchmark::DoNotOptimize(r);
  }
  state.counters["tasks"] = double(tasks);
  state.counters["tiling"] = double(tiles);
  state.counters["peak_rss_GiB"] = peak_rss_bytes() / double(1 << 30);
}
BENCHMARK(BM_Plan32TOn512Ranks)->Arg(0)->Arg(16)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
