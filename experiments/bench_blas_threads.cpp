// How steadily a GEMM shared by several OpenBLAS threads keeps the cores busy, moment to moment,
// against one thread in the same moments. The linear fwd+bwd of a 512 x W x W GEMM (W 256, then 128) runs in
// windows of 0.1 s, alternating OPENBLAS_NUM_THREADS threads with one thread (the probe behind
// `zinf profile-hw`'s "shared GEMM over time" line, engine/probe/machine_probe.hpp); each pair gives
// the cores the shared GEMM kept busy (its rate over the one-thread rate beside it).
//
//   OPENBLAS_NUM_THREADS=2 build/experiments/bench_blas_threads
//   build/experiments/bench_blas_threads --benchmark_filter=RoundTrip     (the round trip alone, milliseconds; at most 1 s)
//
// Counters: cores_p10 / cores_median / cores_p90 (the shared GEMM's cores over the windows),
// cores_moved (p90 over p10, minus one) and one_thread_moved (the same for the one-thread rate, the
// reference: the cores' own speed). A shared rate that moves while one thread holds is the machine's
// cores cooperating at two different costs, not a slower or busier core. On one BLAS thread the
// benchmark says so and measures nothing. After each pair a cache line's round trip between two
// threads (round_trip_p10_ns / _p90_ns) says how cheaply the cores shared data in that moment; where
// it moved by more than 1.5x, cores_near / cores_far are the shared GEMM's cores in the windows of
// the short and the long round trip (near_ns / far_ns). The window series is printed after the table.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "engine/build_info.hpp"
#include "engine/machine_info.hpp"
#include "engine/probe/machine_probe.hpp"

namespace {

using namespace zinf::engine;

std::string g_series;

void BM_SharedGemmOverTime(benchmark::State& state) {
  const double seconds = double(state.range(0));
  const int64_t width = state.range(1);
  probe::BlasSteadiness s;
  for (auto _ : state) s = probe::measure_blas_steadiness(seconds, 0.1, width);
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
  if (!s.round_trip.empty()) {
    const probe::Spread trip = probe::spread(s.round_trip);
    state.counters["round_trip_p10_ns"] = 1e9 * trip.p10;
    state.counters["round_trip_p90_ns"] = 1e9 * trip.p90;
  }
  if (const auto split = probe::cores_by_round_trip(s)) {
    state.counters["cores_near"] = split->near_cores;
    state.counters["cores_far"] = split->far_cores;
    state.counters["near_ns"] = 1e9 * split->near_round_trip;
    state.counters["far_ns"] = 1e9 * split->far_round_trip;
  }
  if (!g_series.empty() && g_series.back() != '\n') g_series += '\n';
  g_series += fmt::format("512 x {0} x {0}:\n", width);
  for (size_t i = 0; i < s.cores_kept.size(); ++i)
    g_series += fmt::format("{:.2f}{}{}", s.cores_kept[i],
                            i < s.round_trip.size() ? fmt::format("/{:.0f}", 1e9 * s.round_trip[i]) : std::string(),
                            (i + 1) % 12 == 0 ? "\n" : " ");
}
// 30 s each: profile-hw's shape (width 256), then gpt-mini's (hidden 128: its attention projection
// and MLP are 512 tokens x 128 x 128..512), so the figure can be set beside the validation steps.
BENCHMARK(BM_SharedGemmOverTime)->Args({30, 256})->Args({30, 128})->Iterations(1)->Unit(benchmark::kSecond);

// A cache line's round trip between two threads alone (the probe's, the fastest of 21 batches of 200):
// run it just before and after another measurement to know which state the cores were in.
void BM_CacheLineRoundTrip(benchmark::State& state) {
  if (usable_cores() < 2) {
    state.SkipWithError("one usable core: each round trip would wait for a time slice");
    return;
  }
  std::optional<double> t;
  for (auto _ : state) t = probe::cache_line_round_trip();
  if (!t) {
    state.SkipWithError("no round trip came back within the probe's deadline (1 s)");
    return;
  }
  state.counters["round_trip_ns"] = 1e9 * *t;
}
BENCHMARK(BM_CacheLineRoundTrip)->Iterations(1)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  pin_blas_threads(std::getenv("OPENBLAS_NUM_THREADS"));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!g_series.empty())
    fmt::print("cores the shared GEMM kept / a cache line's round trip between two cores in ns, window by window "
               "(0.2 s each pair):\n{}\n", g_series);
  return 0;
}
