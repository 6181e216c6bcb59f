// How steadily a GEMM shared by several OpenBLAS threads keeps the cores busy, moment to moment,
// against one thread in the same moments. The linear fwd+bwd of a 512 x 256 x 256 GEMM runs in
// windows of 0.1 s, alternating OPENBLAS_NUM_THREADS threads with one thread (the probe behind
// `zinf profile-hw`'s "shared GEMM over time" line, engine/probe/machine_probe.hpp); each pair gives
// the cores the shared GEMM kept busy (its rate over the one-thread rate beside it).
//
//   OPENBLAS_NUM_THREADS=2 build/experiments/bench_blas_threads
//
// Counters: cores_p10 / cores_median / cores_p90 (the shared GEMM's cores over the windows),
// cores_moved (p90 over p10, minus one) and one_thread_moved (the same for the one-thread rate, the
// reference: the cores' own speed). A shared rate that moves while one thread holds is the machine's
// cores cooperating at two different costs, not a slower or busier core. On one BLAS thread the
// benchmark says so and measures nothing. The window series is printed after the table.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "engine/build_info.hpp"
#include "engine/probe/machine_probe.hpp"

namespace {

using namespace zinf::engine;

std::string g_series;

void BM_SharedGemmOverTime(benchmark::State& state) {
  const double seconds = double(state.range(0));
  probe::BlasSteadiness s;
  for (auto _ : state) s = probe::measure_blas_steadiness(seconds);
  if (s.threads <= 1) {
    state.SkipWithError("OpenBLAS runs one thread per process: set OPENBLAS_NUM_THREADS to 2 or more");
    return;
  }
  const probe::Spread kept = probe::spread(s.cores_kept), one = probe::spread(s.one_thread);
  state.counters["blas_threads"] = s.threads;
  state.counters["windows"] = double(s.cores_kept.size());
  state.counters["cores_p10"] = kept.p10;
  state.counters["cores_median"] = kept.median;
  state.counters["cores_p90"] = kept.p90;
  state.counters["cores_moved"] = kept.ratio() - 1.0;
  state.counters["one_thread_moved"] = one.ratio() - 1.0;
  g_series.clear();
  for (size_t i = 0; i < s.cores_kept.size(); ++i)
    g_series += fmt::format("{:.2f}{}", s.cores_kept[i], (i + 1) % 20 == 0 ? "\n" : " ");
}
BENCHMARK(BM_SharedGemmOverTime)->Arg(30)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

int main(int argc, char** argv) {
  pin_blas_threads(std::getenv("OPENBLAS_NUM_THREADS"));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!g_series.empty()) fmt::print("cores the shared GEMM kept, window by window (0.2 s each pair):\n{}\n", g_series);
  return 0;
}
