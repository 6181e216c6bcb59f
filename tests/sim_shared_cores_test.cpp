// The shared core pool of a profile whose device is the host's own cores (the CPU backend):
// compute of every rank on the node draws on `cores` cores, so two compute-bound ranks on one core
// take twice as long as one rank, and on two cores as long; other processes' measured load
// (background_threads) slows N ranks by the ratio of the shares a thread gets, and leaves one rank
// at the rate the profile measured; a GPU profile is untouched by both fields. Each simulation
// runs in a child process (one SimGrid engine per process).
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/plan_state.hpp"  // ProgramBuilder, for a Program of two collectives
#include "core/timeline.hpp"
#include "core/validation.hpp"
#include "models/gpt.hpp"
#include "measure/calibration.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;

namespace {

// Compute-bound by construction: every transfer path is far faster than the kernels.
core::HwProfile profile(bool shared, int cores, double background, double throughput = 0, const std::string& skew = "") {
  const std::string yaml =
      "name: shared-test\nnode:\n  gpus: 1\n  gpu: {name: cpu-arena, memory: 32 GB, peak_flops: 100 GFLOP/s, memory_bandwidth: "
      "1000 TB/s, kernel_launch: 0 us, elementwise_efficiency: 1.0}\n  host: {memory: 1 TB, memory_bandwidth: 1000 TB/s, "
      "cores: " + std::to_string(cores) + ", adam_params_per_s: 1e15, device_shares_cores: " + (shared ? "true" : "false") +
      ", background_threads: " + std::to_string(background) + ", parallel_throughput: " + std::to_string(throughput) +
      (skew.empty() ? std::string() : ", rank_skew: " + skew) + "}\n  nvme: {capacity: 10 TB, read_bandwidth: 1000 TB/s, write_bandwidth: 1000 TB/s, latency: 0 us}\n"
      "  pcie: {bandwidth_per_gpu: 1000 TB/s, latency: 0 us}\n  nvlink: {bandwidth_per_gpu: 1000 TB/s, latency: 0 us}\n"
      "  nic: {count: 1, bandwidth: 1000 TB/s}\nfabric: {topology: full, latency: 0 us}\n";
  return core::parse_hwprofile(yaml, "shared-test.yaml");
}

struct Step {
  double seconds = 0;
  core::LaneSeconds lanes{};  // rank 0's busy time per lane
};

Step run(const core::HwProfile& one_rank_hw, int ranks) {
  const auto hw = core::colocate(one_rank_hw, ranks);
  const auto spec = core::parse_model_spec("name: t\nlayers: 2\nhidden: 256\nheads: 4\nseq: 128\nvocab: 256\nmicro_batch: 2\n",
                                           "t.yaml");
  const auto cfg = core::parse_run_config("zero_stage: 3\noffload: {params: none, optimizer: none}\n"
                                          "activation_checkpoint: {interval: 1, tier: device}\n",
                                          "c.yaml");
  const auto pr = core::make_plan(models::build_gpt(spec), hw, cfg, ranks);
  sim::SimOptions o;
  o.fold_symmetric_nodes = false;
  const auto text = sim::run_isolated([&] {
    const auto r = sim::simulate(pr.program, hw, o);
    std::ostringstream out;
    out.precision(17);
    out << r.step_time;
    for (double b : core::lane_busy(r.timeline)) out << ' ' << b;
    return out.str();
  });
  Step s;
  std::istringstream in(text);
  in >> s.seconds;
  for (auto& b : s.lanes) in >> b;
  return s;
}

double step(const core::HwProfile& one_rank_hw, int ranks) { return run(one_rank_hw, ranks).seconds; }

// One rank's parameter all-gather of `gather_bytes` (bf16-counted) and then its gradient
// reduce-scatter of `reduce_bytes`: nothing else in the step.
core::Program two_collectives(double gather_bytes, double reduce_bytes) {
  core::Program p;
  core::ProgramBuilder b(p);
  core::Task g;
  g.kind = core::TaskKind::AllGather;
  g.lane = core::Lane::Comm;
  g.data = core::Data::Param;
  g.bytes = gather_bytes;
  const int32_t first = b.add(g, {});
  core::Task r = g;
  r.kind = core::TaskKind::ReduceScatter;
  r.data = core::Data::Grad;
  r.bytes = reduce_bytes;
  b.add(r, {first});
  b.static_bytes() = {core::PerTier{}};
  b.budget() = {1e12, 1e12, 1e12};
  return p;
}

double simulated(const core::Program& p, const core::HwProfile& hw) {
  return std::stod(sim::run_isolated([&] {
    std::ostringstream out;
    out.precision(17);
    out << sim::simulate(p, hw).step_time;
    return out.str();
  }));
}

}  // namespace

TEST_CASE("the profile field says whether the device shares the host's cores; GPU profiles do not") {
  CHECK(profile(true, 2, 0.5).node.device_shares_host_cores);
  CHECK(profile(true, 2, 0.5).node.profiled_core_share() == 1.0);  // a core each: 1 + 0.5 threads on 2 cores
  CHECK(profile(true, 1, 1.0).node.profiled_core_share() == Approx(0.5));
  CHECK(profile(false, 1, 1.0).node.profiled_core_share() == 1.0);
  for (const char* name : {"dgx2-v100", "dgx-a100", "h200-node"}) {
    auto hw = core::load_hwprofile(std::string(ZINF_SOURCE_DIR) + "/hwprofiles/" + name + ".yaml");
    CHECK_FALSE(hw.node.device_shares_host_cores);
    CHECK(hw.node.background_threads == 0);
  }
}

TEST_CASE("two compute-bound ranks on one shared core take twice as long as one; on two cores as long") {
  const double one = step(profile(true, 1, 0), 1);
  REQUIRE(one > 0);
  CHECK(step(profile(true, 1, 0), 2) == Approx(2 * one).epsilon(0.02));
  CHECK(step(profile(true, 2, 0), 2) == Approx(one).epsilon(0.02));
  // Without the shared pool the same one-core profile runs each rank on a device of its own
  // (colocate scales each rank's rate by cores / ranks instead).
  CHECK(step(profile(false, 2, 0), 2) == Approx(one).epsilon(0.02));
}

TEST_CASE("other processes' load: one rank runs at the profiled rate, N ranks at the ratio of shares") {
  const double idle = step(profile(true, 1, 0), 1);
  // The profile's rates were measured while one other thread held half the core: one rank sees
  // the same competition, so the step is the profiled one.
  CHECK(step(profile(true, 1, 1.0), 1) == Approx(idle).epsilon(0.02));
  // Two ranks and the other thread: a third of the core each, against the half measured.
  CHECK(step(profile(true, 1, 1.0), 2) == Approx(idle * 1.5).epsilon(0.03));
  // Flag off: background_threads is not read into the model at all.
  CHECK(step(profile(false, 1, 3.0), 1) == Approx(idle).epsilon(1e-6));
}

TEST_CASE("cores that deliver less together than apart slow every busy rank by the measured ratio") {
  const double one = step(profile(true, 2, 0), 1);
  REQUIRE(one > 0);
  // Two virtual cores that give 1.2 one-thread rates together (SMT siblings): one rank alone still
  // runs at the profiled rate, two ranks at 0.6 of it each.
  CHECK(step(profile(true, 2, 0, 1.2), 1) == Approx(one).epsilon(0.02));
  CHECK(step(profile(true, 2, 0, 1.2), 2) == Approx(one / 0.6).epsilon(0.03));
  // The full throughput is the same as leaving the field out.
  CHECK(step(profile(true, 2, 0, 2.0), 2) == Approx(one).epsilon(0.02));
}

TEST_CASE("a kernel on several BLAS threads runs alone at its profiled time and shares the pool as that many threads") {
  // One BLAS thread: the GEMMs and attention at 100 GFLOP/s, the other kernels at the vector rate.
  auto pinned = profile(true, 2, 0.0);
  pinned.node.gpu.vector_flops = 100e9;
  // Two BLAS threads per process that scale perfectly: twice the GEMM and attention rate, each kernel
  // keeping two cores busy; the single-threaded kernels as before.
  auto two_threads = [&](double background) {
    auto hw = profile(true, 2, background);
    hw.node.gpu.vector_flops = 100e9;
    hw.node.gpu.peak_flops = 200e9;
    hw.node.gpu.gemm_threads.points = {{1, 2.0}, {1e6, 2.0}};
    hw.node.gpu.attention_threads.points = {{1, 2.0}, {1e6, 2.0}};
    return hw;
  };
  const double pinned_one = step(pinned, 1), pinned_two = step(pinned, 2);
  const double threaded_one = step(two_threads(0.0), 1), threaded_two = step(two_threads(0.0), 2);
  REQUIRE(pinned_one > 0);
  // One rank alone: its GEMMs take two cores and half the time.
  CHECK(threaded_one < 0.8 * pinned_one);
  // Without the curves a kernel is one thread: the same rank alone, at the same profiled time.
  auto one_core_each = two_threads(0.0);
  one_core_each.node.gpu.gemm_threads.points.clear();
  one_core_each.node.gpu.attention_threads.points.clear();
  CHECK(step(one_core_each, 1) == Approx(threaded_one).epsilon(1e-6));
  // Two ranks on two cores: each rank's GEMMs get one core of the two, as on one BLAS thread. Counted
  // as one thread each they would run as if alone.
  CHECK(pinned_two == Approx(pinned_one).epsilon(0.02));
  CHECK(threaded_two == Approx(pinned_two).epsilon(0.03));
  CHECK(step(one_core_each, 2) == Approx(threaded_one).epsilon(0.02));
  // Profiled beside another process's thread (two GEMM threads and it on two cores: two thirds of a
  // core each), one rank still runs at the profiled time: the other thread is there in the simulation too.
  CHECK(two_threads(1.0).node.profiled_core_share(2) == Approx(2.0 / 3.0));
  CHECK(step(two_threads(1.0), 1) == Approx(threaded_one).epsilon(0.02));
}

TEST_CASE("a profile taken on zinf's default threads gives each colocated rank its share of the cores; a chosen count stays") {
  auto measured = [](const std::string& from) {
    auto hw = profile(true, 2, 0.0);
    hw.node.gpu.vector_flops = 100e9;
    hw.node.gpu.peak_flops = 200e9;
    hw.node.gpu.gemm_threads.points = {{1, 2.0}, {1e6, 2.0}};
    hw.node.gpu.attention_threads.points = {{1, 2.0}, {1e6, 2.0}};
    hw.measured_on.cpu = "X";
    hw.measured_on.cores = 2;
    hw.measured_on.blas_threads = 2;
    hw.measured_on.blas_threads_from = from;
    return hw;
  };
  CHECK(core::colocate(measured("cores"), 1).node.rank_blas_threads == 0);
  CHECK(core::colocate(measured("cores"), 2).node.rank_blas_threads == 1);
  CHECK(core::colocate(measured("cores"), 3).node.rank_blas_threads == 1);
  CHECK(core::colocate(measured("OPENBLAS_NUM_THREADS"), 2).node.rank_blas_threads == 0);
  CHECK(core::colocate(measured("--threads"), 2).node.rank_blas_threads == 0);
  // A rank held to one thread does its two-thread kernels' work on one core: as long as one thread's rate.
  auto pinned = profile(true, 2, 0.0);
  pinned.node.gpu.vector_flops = 100e9;
  auto capped = measured("cores");
  const double free_one = step(capped, 1);
  capped.node.rank_blas_threads = 1;
  CHECK(free_one < 0.8 * step(pinned, 1));
  CHECK(step(capped, 1) == Approx(step(pinned, 1)).epsilon(0.02));
}

TEST_CASE("the threads curves are read, written back and refused below one core") {
  const std::string base = "name: t\nnode:\n  gpus: 1\n  gpu: {name: g, memory: 32 GB, peak_flops: 100 GFLOP/s, memory_bandwidth: 1 TB/s";
  const std::string rest = "}\n  host: {memory: 1 TB, memory_bandwidth: 1 TB/s, cores: 2, adam_params_per_s: 1e9}\n"
                           "  nvme: {capacity: 10 TB, read_bandwidth: 1 GB/s, write_bandwidth: 1 GB/s}\n"
                           "  pcie: {bandwidth_per_gpu: 10 GB/s}\n  nvlink: {bandwidth_per_gpu: 10 GB/s}\n"
                           "  nic: {count: 1, bandwidth: 1 GB/s}\nfabric: {topology: full}\n";
  const auto hw = core::parse_hwprofile(base + ", gemm_threads: [[16, 1], [512, 1.9]], attention_threads: [[32, 1.4]]" + rest, "t.yaml");
  CHECK(hw.node.gpu.gemm_threads.at(512) == Approx(1.9));
  CHECK(hw.node.gpu.attention_threads.at(32) == Approx(1.4));
  CHECK_THROWS_WITH(core::parse_hwprofile(base + ", gemm_threads: [[16, 0.5]]" + rest, "t.yaml"),
                    Catch::Contains("t.yaml") && Catch::Contains("gemm_threads"));
}

TEST_CASE("ranks on shared cores drift apart: each collective waits the profile's share of the compute before it") {
  // rank_skew 0.5 at 2 ranks: the comm lane gains half the compute seconds of the step, and the
  // step grows; one rank, and a GPU profile, are untouched.
  const auto plain = run(profile(true, 2, 0.0), 2);
  const auto skewed = run(profile(true, 2, 0.0, 0, "[[2, 0.5], [4, 1.0]]"), 2);
  const auto compute = static_cast<size_t>(core::Lane::Compute), comm = static_cast<size_t>(core::Lane::Comm);
  REQUIRE(plain.lanes[compute] > 0);
  CHECK(skewed.lanes[compute] == Approx(plain.lanes[compute]).epsilon(1e-6));
  CHECK(skewed.lanes[comm] - plain.lanes[comm] == Approx(0.5 * plain.lanes[compute]).epsilon(0.05));
  CHECK(skewed.seconds > plain.seconds * 1.05);
  CHECK(run(profile(true, 2, 0.0, 0, "[[2, 0.5]]"), 1).seconds == Approx(run(profile(true, 2, 0.0), 1).seconds));
  CHECK(step(profile(false, 2, 0.0, 0, "[[2, 0.5]]"), 2) == Approx(step(profile(false, 2, 0.0), 2)));
  CHECK(profile(true, 2, 0.0, 0, "[[2, 0.5], [4, 1.0]]").node.rank_skew.at(3) == Approx(0.75));
  CHECK_THROWS_WITH(profile(true, 2, 0.0, 0, "[[2, -0.5]]"), Catch::Contains("rank_skew"));
}

TEST_CASE("the rank skew fitted to measured steps recovers the skew that produced them; out of range it stops at the ends") {
  const auto cfg = core::parse_run_config("zero_stage: 3\noffload: {params: none, optimizer: none}\n"
                                          "activation_checkpoint: {interval: 1, tier: device}\n",
                                          "c.yaml");
  // Little compute per collective, and much.
  const auto small = models::build_gpt(core::parse_model_spec(
      "name: s\nlayers: 2\nhidden: 64\nheads: 4\nseq: 64\nvocab: 256\nmicro_batch: 1\n", "s.yaml"));
  const auto large = models::build_gpt(core::parse_model_spec(
      "name: l\nlayers: 2\nhidden: 256\nheads: 4\nseq: 128\nvocab: 256\nmicro_batch: 2\n", "l.yaml"));
  const auto hw = profile(true, 2, 0.0);
  auto truth = [&](const core::ModelGraph& g, double skew) {
    auto h = hw;
    h.node.rank_skew.points = {{2, skew}};
    h = core::colocate(h, 2);
    const auto pr = core::make_plan(g, h, cfg, 2);
    sim::SimOptions o;
    o.fold_symmetric_nodes = false;
    return std::stod(sim::run_isolated([&] {
      std::ostringstream out;
      out.precision(17);
      out << sim::simulate(pr.program, h, o).step_time;
      return out.str();
    }));
  };
  const double plain_small = truth(small, 0), plain_large = truth(large, 0);
  REQUIRE(truth(large, 0.4) > plain_large * 1.05);
  // Both models stepped with a skew of 0.4: both steps matched, by a skew near it. (The simulated
  // step is not strictly monotone in the skew: a late collective can let other work go first, so
  // a skew near 0.4 gives its steps within about 1 %, the small model's a little over on some machines,
  // whose floating point differs in the last places.)
  const auto both = sim::fit_rank_skew(hw, {{&small, cfg, truth(small, 0.4)}, {&large, cfg, truth(large, 0.4)}}, 2);
  CHECK(both.ranks == 2);
  CHECK(both.skew > 0.25);
  CHECK(both.skew < 0.5);
  CHECK(both.without[0] == Approx(plain_small));
  CHECK(both.without[1] == Approx(plain_large));
  CHECK(both.fitted[0] == Approx(both.measured[0]).epsilon(0.02));
  CHECK(both.fitted[1] == Approx(both.measured[1]).epsilon(0.02));
  CHECK(both.simulations <= 2 * 12);
  // Steps made with 0.2 and 0.6: a skew between them.
  const auto mixed = sim::fit_rank_skew(hw, {{&small, cfg, truth(small, 0.2)}, {&large, cfg, truth(large, 0.6)}}, 2);
  CHECK(mixed.skew > 0.2);
  CHECK(mixed.skew < 0.6);
  // Already slower without skew than measured: none. More than 10 would take: 10.
  CHECK(sim::fit_rank_skew(hw, {{&large, cfg, plain_large * 0.9}}, 2).skew == 0.0);
  CHECK(sim::fit_rank_skew(hw, {{&large, cfg, plain_large * 1000}}, 2).skew == 10.0);
  CHECK_THROWS(sim::fit_rank_skew(hw, {}, 2));
}

TEST_CASE("a CPU-backend collective's host work: the fp32 widening of a gathered parameter and the scaling of a reduced gradient") {
  // memory_bandwidth 10 GB/s (bytes read + written). A gather of 2e8 bf16-counted bytes (1e8
  // elements) widened to fp32 straight from the one rank's shard moves 1e8 x (2 + 4): 0.06 s. A
  // reduce of 1e8 bytes (5e7 elements) with one rank and one micro-batch: the gradient is kept as it
  // is, nothing copied or scaled (0 s); with two micro-batches it is scaled, 2 x 4 x 5e7: 0.04 s.
  auto with = [](bool shared, const char* precision) {
    auto hw = profile(shared, 1, 0.0);
    hw.node.gpu.memory_bandwidth = 10e9;
    hw.node.gpu.working_bytes = std::string(precision) == "fp32" ? 4 : 2;
    return hw;
  };
  const auto p = two_collectives(2e8, 1e8);
  const auto fp32 = with(true, "fp32");
  CHECK(core::collective_host_seconds(p, p.task(0), 0, fp32) == Approx(0.06));
  CHECK(core::collective_host_seconds(p, p.task(1), 0, fp32) == 0);
  CHECK(simulated(p, fp32) == Approx(0.06).epsilon(0.01));
  CHECK(core::estimate_step_time(p, fp32) == Approx(0.06).epsilon(0.01));
  auto accumulated = two_collectives(2e8, 1e8);
  core::ProgramBuilder(accumulated).micro_batches() = 2;
  CHECK(core::collective_host_seconds(accumulated, accumulated.task(1), 0, fp32) == Approx(0.04));
  CHECK(simulated(accumulated, fp32) == Approx(0.1).epsilon(0.01));
  // Working in bf16 nothing is widened: the gather's one-rank copy alone, 0.04 s.
  const auto bf16 = with(true, "bf16");
  CHECK(simulated(p, bf16) == Approx(0.04).epsilon(0.01));
  CHECK(core::estimate_step_time(p, bf16) == Approx(0.04).epsilon(0.01));
  // A GPU profile: a one-rank collective costs nothing, as before.
  const auto gpu = with(false, "fp32");
  CHECK(core::collective_host_seconds(p, p.task(0), 0, gpu) == 0);
  CHECK(simulated(p, gpu) == Approx(0.0).margin(1e-9));
  // Two ranks: the transfer is MPI's; a gather still widens (0.06 s), a reduce-scatter scales its
  // half (0.02 s), a reduce to rank 1 scales the whole unit there (0.04 s) and nothing on rank 0.
  core::Program two;
  core::ProgramBuilder b2(two);
  b2.ranks() = 2;
  core::Task t2 = p.task(0);
  t2.participants = 2;
  CHECK(core::collective_host_seconds(two, t2, 0, fp32) == Approx(0.06));
  t2 = p.task(1);
  t2.participants = 2;
  CHECK(core::collective_host_seconds(two, t2, 0, fp32) == Approx(0.02));
  t2.kind = core::TaskKind::Reduce;
  t2.root = 1;
  CHECK(core::collective_host_seconds(two, t2, 1, fp32) == Approx(0.04));
  CHECK(core::collective_host_seconds(two, t2, 0, fp32) == 0);
  // Other data (a checkpoint's gather) is not a parameter's: no widening, no copy counted.
  auto q = two_collectives(2e8, 1e8);
  core::Task t = q.task(0);
  t.data = core::Data::Checkpoint;
  CHECK(core::collective_host_seconds(q, t, 0, fp32) == 0);
}
