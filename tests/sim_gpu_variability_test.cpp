// GPU-to-GPU variability: the distribution a profile describes (its whisker range over the median
// is the spread, outliers beyond the upper whisker up to the slowest), per-rank draws that do not
// depend on how many ranks are drawn, the expected slowest of n GPUs against sampled maxima, and
// the simulator: a step waits at every collective for its slowest GPU, and a folded run's order
// statistic lies inside the band of unfolded runs over seeds. Simulations run in children.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/plan.hpp"
#include "models/gpt.hpp"
#include "sim/gpu_variability.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "tune/scenario.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;

namespace {

core::GpuSpec gpu(double spread, double outliers = 0, double slowest = 1) {
  core::GpuSpec g;
  g.variability_spread = spread;
  g.variability_outliers = outliers;
  g.variability_slowest = slowest;
  return g;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double x = p * double(v.size() - 1);
  const auto i = static_cast<size_t>(x);
  return i + 1 < v.size() ? v[i] + (x - double(i)) * (v[i + 1] - v[i]) : v[i];
}

// 4 nodes of 2 GPUs, compute-bound ZeRO-3 (everything on the device): a step of forward and
// backward kernels with a gather before and a reduce-scatter after each unit.
std::string profile(double spread) {
  return "name: var\nnode:\n  gpus: 2\n  gpu: {name: g, memory: 80 GB, peak_flops: 100 TFLOP/s, memory_bandwidth: 1000 GB/s,"
         " gemm_efficiency: [[64, 0.5], [4096, 0.8]], variability: {spread: " + std::to_string(spread) + "}}\n"
         "  host: {memory: 1 TB, memory_bandwidth: 400 GB/s, cores: 32, adam_params_per_s: 4e9}\n"
         "  nvme: {capacity: 10 TB, read_bandwidth: 20 GB/s, write_bandwidth: 20 GB/s}\n"
         "  pcie: {bandwidth_per_gpu: 16 GB/s}\n  nvlink: {bandwidth_per_gpu: 100 GB/s}\n"
         "  nic: {count: 2, bandwidth: 100 GB/s}\n";
}

core::PlanResult plan(const core::HwProfile& hw, int ranks) {
  auto spec = core::parse_model_spec("name: v\nlayers: 4\nhidden: 2048\nheads: 16\nseq: 1024\nvocab: 1024\nmicro_batch: 8\n", "v.yaml");
  auto config = core::parse_run_config("zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n", "v.yaml");
  return core::make_plan(models::build_gpt(spec), hw, config, ranks);
}

sim::SimReport run(const core::Program& p, const core::HwProfile& hw, uint64_t seed, bool fold) {
  sim::SimOptions o;
  o.seed = seed;
  o.fold_symmetric_nodes = fold;
  return sim::report_from_json(sim::run_isolated([&] { return sim::report_to_json(sim::simulate(p, hw, o)); }));
}

}  // namespace

TEST_CASE("the standard normal's quantiles") {
  CHECK(sim::normal_quantile(0.5) == Approx(0.0).margin(1e-15));
  CHECK(sim::normal_quantile(0.975) == Approx(1.959963984540054).epsilon(1e-13));
  CHECK(sim::normal_quantile(0.75) == Approx(0.6744897501960817).epsilon(1e-13));
  CHECK(sim::normal_quantile(1e-6) == Approx(-4.753424308822899).epsilon(1e-12));
  CHECK_THROWS(sim::normal_quantile(0));
}

TEST_CASE("a profile's spread is the whisker range over the median: four interquartile ranges") {
  const auto g = gpu(0.08);
  CHECK(sim::gpu_time_quantile(g, 0.5) == Approx(1.0).epsilon(1e-9));
  CHECK(sim::gpu_time_quantile(g, 0.75) - sim::gpu_time_quantile(g, 0.25) == Approx(0.02).epsilon(1e-6));
  // Drawn: 20000 GPUs of one seed show the same interquartile range and median.
  std::vector<double> draws;
  for (int r = 0; r < 20000; ++r) draws.push_back(sim::gpu_time_factor(g, 7, r));
  CHECK(percentile(draws, 0.5) == Approx(1.0).margin(0.001));
  CHECK(percentile(draws, 0.75) - percentile(draws, 0.25) == Approx(0.02).margin(0.001));
  // Outliers: a fraction beyond the upper whisker (1 + spread / 2), none past the slowest.
  const auto o = gpu(0.08, 0.01, 1.5);
  int beyond = 0;
  for (int r = 0; r < 20000; ++r) {
    const double f = sim::gpu_time_factor(o, 7, r);
    CHECK(f <= 1.5);
    beyond += f > 1.04;
  }
  CHECK(beyond / 20000.0 == Approx(0.01 + 0.99 * 0.0035).margin(0.003));
  CHECK(sim::gpu_time_factor(gpu(0), 7, 3) == 1.0);
}

TEST_CASE("a rank's draw depends on the seed and the rank only; the slowest of n is the largest draw") {
  const auto g = gpu(0.08);
  CHECK(sim::gpu_time_factor(g, 3, 11) == sim::gpu_time_factor(g, 3, 11));
  CHECK(sim::gpu_time_factor(g, 3, 11) != sim::gpu_time_factor(g, 4, 11));
  double worst = 0;
  for (int r = 0; r < 64; ++r) worst = std::max(worst, sim::gpu_time_factor(g, 3, r));
  CHECK(sim::slowest_gpu(g, 3, 64) == worst);
  CHECK(sim::slowest_gpu(g, 3, 512) >= worst);
}

TEST_CASE("the expected slowest of n GPUs is the mean of sampled maxima, and grows with n") {
  for (const auto& g : {gpu(0.08), gpu(0.22), gpu(0.08, 0.002, 1.5)}) {
    double prev = 1.0;
    for (int n : {1, 16, 64, 512}) {
      const int seeds = 2000;
      double mean = 0, square = 0;
      for (int s = 1; s <= seeds; ++s) {
        const double m = sim::slowest_gpu(g, uint64_t(s), n);
        mean += m / seeds;
        square += m * m / seeds;
      }
      const double standard_error = std::sqrt((square - mean * mean) / seeds);
      const double expected = sim::expected_slowest_gpu(g, n);
      INFO("spread " << g.variability_spread << " outliers " << g.variability_outliers << " n " << n);
      CHECK(expected == Approx(mean).margin(4 * standard_error));
      CHECK(expected >= prev - 1e-12);
      prev = expected;
    }
  }
  // The normal core alone: the slowest of 512 sits about 3.04 standard deviations above the median.
  CHECK(sim::expected_slowest_gpu(gpu(0.08), 512) == Approx(1 + 3.0439 * 0.08 / 4 / 1.3489795).epsilon(2e-4));
  CHECK(sim::expected_slowest_gpu(gpu(0), 512) == 1.0);
}

TEST_CASE("every collective waits for the slowest GPU: a folded run's order statistic lies in the unfolded band") {
  const auto hw = core::parse_hwprofile(profile(0.22), "var.yaml");
  const auto flat = core::parse_hwprofile(profile(0), "var.yaml");
  auto pr = plan(hw, 8);
  const double alike = run(pr.program, flat, 0, false).step_time;
  std::vector<double> unfolded;
  for (uint64_t s = 1; s <= 8; ++s) {
    const auto u = run(pr.program, hw, s, false);
    const auto f = run(pr.program, hw, s, true);
    CHECK_FALSE(u.folded);
    CHECK(f.folded);
    // The same seed: the folded run's ranks all at the slowest of the 8 draws, the unfolded run's
    // slowest rank holding the others back at every collective: the same step, near enough.
    CHECK(f.slowest_gpu == Approx(u.slowest_gpu).epsilon(1e-12));
    CHECK(f.step_time == Approx(u.step_time).epsilon(0.01));
    // Compute-bound: the step stretches by nearly the slowest factor.
    CHECK(u.step_time > alike);
    CHECK(u.step_time / alike == Approx(u.slowest_gpu).epsilon(0.03));
    unfolded.push_back(u.step_time);
  }
  const auto expected = run(pr.program, hw, 0, true);
  CHECK(expected.slowest_gpu == Approx(sim::expected_slowest_gpu(hw.node.gpu, 8)).epsilon(1e-12));
  CHECK(expected.step_time >= percentile(unfolded, 0.1));
  CHECK(expected.step_time <= percentile(unfolded, 0.9));
}

TEST_CASE("zinf sim --seeds K: each seed's step as a run of that seed, the band its percentiles, the median seed's report") {
  CHECK(tune::percentile({4, 1, 3, 2}, 0.5) == Approx(2.5));
  CHECK(tune::percentile({4, 1, 3, 2}, 0.1) == Approx(1.3));
  CHECK(tune::percentile({7}, 0.9) == 7);
  CHECK_THROWS(tune::percentile({}, 0.5));
  const auto hw = core::parse_hwprofile(profile(0.22), "var.yaml");
  const auto spec = core::parse_model_spec("name: v\nlayers: 4\nhidden: 2048\nheads: 16\nseq: 1024\nvocab: 1024\nmicro_batch: 8\n", "v.yaml");
  const auto config = core::parse_run_config("zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n", "v.yaml");
  const int seeds = 5;
  const auto res = tune::run_scenario({spec, hw, config, 4}, sim::SimOptions{}, seeds, 2);
  const auto& b = res.band;
  REQUIRE(b.seeds.size() == size_t(seeds));
  auto pr = plan(hw, 8);
  for (int i = 0; i < seeds; ++i) {
    CHECK(b.seeds[size_t(i)] == uint64_t(i + 1));
    const auto one = run(pr.program, hw, uint64_t(i + 1), true);
    CHECK(b.step_time[size_t(i)] == Approx(one.step_time).epsilon(1e-9));
    CHECK(b.slowest_gpu[size_t(i)] == Approx(one.slowest_gpu).epsilon(1e-12));
  }
  auto sorted = b.step_time;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted.front() < sorted.back());  // the seeds differ
  CHECK(b.step_median == sorted[2]);
  CHECK(b.step_p10 == Approx(sorted[0] + 0.4 * (sorted[1] - sorted[0])));
  CHECK(b.step_p90 == Approx(sorted[3] + 0.6 * (sorted[4] - sorted[3])));
  CHECK(res.report.step_time == b.step_median);
  CHECK(b.tflops_p10 <= b.tflops_median);
  CHECK(b.tflops_median <= b.tflops_p90);
}

TEST_CASE("a variability section with a bad field names it") {
  CHECK_THROWS_WITH(core::parse_hwprofile(
                        "name: v\nnode:\n  gpus: 1\n  gpu: {name: g, memory: 8 GB, peak_flops: 1 TFLOP/s, memory_bandwidth: 1 GB/s,"
                        " variability: {spread: 0.08, outliers: 0.01, slowest: 1.02}}\n"
                        "  host: {memory: 1 TB, memory_bandwidth: 1 GB/s, cores: 1, adam_params_per_s: 1e9}\n"
                        "  nvme: {capacity: 1 TB, read_bandwidth: 1 GB/s, write_bandwidth: 1 GB/s}\n"
                        "  pcie: {bandwidth_per_gpu: 1 GB/s}\n  nvlink: {bandwidth_per_gpu: 1 GB/s}\n"
                        "  nic: {count: 1, bandwidth: 1 GB/s}\n",
                        "v.yaml"),
                    Catch::Contains("node.gpu.variability.slowest"));
}
