// core::kernel_seconds: the one device-kernel cost that the simulator and the idealized scheduler share.
#include <catch2/catch.hpp>

#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using core::Kernel;

namespace {
core::GpuSpec gpu() {
  core::GpuSpec g;
  g.peak_flops = 100e9;
  g.memory_bandwidth = 10e9;
  g.kernel_launch = 1e-6;
  g.elementwise_efficiency = 0.5;
  g.gemm_efficiency.points = {{16, 0.25}, {256, 1.0}};
  return g;
}
}  // namespace

TEST_CASE("a kernel costs its launch plus the larger of its arithmetic and its memory time", "[cost]") {
  core::GpuSpec g = gpu();
  // GEMMs: at the curve's efficiency for their intensity dimension; forward like backward without a
  // forward curve.
  CHECK(core::kernel_seconds(g, Kernel::GemmBackward, 100e9, 0, 256) == Approx(1.0 + 1e-6));
  CHECK(core::kernel_seconds(g, Kernel::GemmBackward, 100e9, 0, 16) == Approx(4.0 + 1e-6));
  CHECK(core::kernel_seconds(g, Kernel::GemmForward, 100e9, 0, 16) == Approx(4.0 + 1e-6));
  g.gemm_forward_efficiency.points = {{16, 0.5}, {256, 0.5}};
  CHECK(core::kernel_seconds(g, Kernel::GemmForward, 100e9, 0, 16) == Approx(2.0 + 1e-6));
  CHECK(core::kernel_seconds(g, Kernel::GemmBackward, 100e9, 0, 16) == Approx(4.0 + 1e-6));
  // Elementwise with no vector rate given: the peak; memory at half the bandwidth.
  CHECK(core::kernel_seconds(g, Kernel::Elementwise, 1e9, 10e9, 0) == Approx(2.0 + 1e-6));
  CHECK(core::kernel_seconds(g, Kernel::Elementwise, 1e9, 0, 0) == Approx(0.01 + 1e-6));
  g.vector_flops = 1e9;
  CHECK(core::kernel_seconds(g, Kernel::Elementwise, 1e9, 0, 0) == Approx(1.0 + 1e-6));
  CHECK(core::kernel_seconds(g, Kernel::Elementwise, 1e9, 30e9, 0) == Approx(6.0 + 1e-6));  // memory-bound still
  // Attention: its own curves by head size, not the vector rate; no curve means the peak.
  CHECK(core::kernel_seconds(g, Kernel::AttentionForward, 100e9, 0, 64) == Approx(1.0 + 1e-6));
  g.attention_forward_efficiency.points = {{32, 0.25}, {64, 0.5}};
  g.attention_backward_efficiency.points = {{32, 0.5}, {64, 1.0}};
  CHECK(core::kernel_seconds(g, Kernel::AttentionForward, 100e9, 0, 64) == Approx(2.0 + 1e-6));
  CHECK(core::kernel_seconds(g, Kernel::AttentionForward, 100e9, 0, 32) == Approx(4.0 + 1e-6));
  CHECK(core::kernel_seconds(g, Kernel::AttentionBackward, 100e9, 0, 32) == Approx(2.0 + 1e-6));
}

TEST_CASE("a Program's tasks pick their kernel class: attention by head size, GEMMs by pass", "[cost]") {
  core::GpuSpec g = gpu();
  g.gemm_forward_efficiency.points = {{1, 0.5}, {4096, 0.5}};
  g.attention_forward_efficiency.points = {{32, 0.2}, {64, 0.4}};
  g.attention_backward_efficiency.points = {{32, 0.3}, {64, 0.6}};
  const auto spec = core::parse_model_spec("name: t\nlayers: 1\nhidden: 128\nheads: 4\nseq: 64\nvocab: 256\nmicro_batch: 1\n",
                                           "t.yaml");
  const auto hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  const auto pr = core::make_plan(models::build_gpt(spec), hw, core::parse_run_config("zero_stage: 3\n", "c"), 1);
  int seen = 0;
  for (const auto& t : pr.program.tasks()) {
    if (!core::is_compute(t.kind) || t.op < 0) continue;
    const auto& op = pr.program.ops()[size_t(t.op)];
    const bool bwd = t.kind == core::TaskKind::Backward;
    const double got = core::task_kernel_seconds(g, pr.program, t);
    if (op.kind == "attention") {
      CHECK(t.gemm_dim == 32);  // head size 128 / 4
      CHECK(got == Approx(core::kernel_seconds(g, bwd ? Kernel::AttentionBackward : Kernel::AttentionForward, t.flops, t.bytes, 32)));
      ++seen;
    } else if (op.kind == "linear") {
      CHECK(got == Approx(core::kernel_seconds(g, bwd ? Kernel::GemmBackward : Kernel::GemmForward, t.flops, t.bytes, t.gemm_dim)));
      ++seen;
    }
  }
  CHECK(seen > 4);
}

TEST_CASE("a kernel keeps the cores its threads curve gives: GEMMs by intensity, attention by head size, the rest one", "[cost]") {
  core::GpuSpec g = gpu();
  // No curves (one BLAS thread, or a GPU): one core for every kernel.
  for (Kernel k : {Kernel::Elementwise, Kernel::GemmForward, Kernel::GemmBackward, Kernel::AttentionForward, Kernel::AttentionBackward})
    CHECK(core::kernel_threads(g, k, 256) == 1.0);
  g.gemm_threads.points = {{32, 1.0}, {256, 1.9}};
  g.attention_threads.points = {{16, 1.2}, {64, 1.6}};
  CHECK(core::kernel_threads(g, Kernel::GemmForward, 256) == Approx(1.9));
  CHECK(core::kernel_threads(g, Kernel::GemmBackward, 32) == Approx(1.0));
  CHECK(core::kernel_threads(g, Kernel::AttentionForward, 64) == Approx(1.6));
  CHECK(core::kernel_threads(g, Kernel::AttentionBackward, 16) == Approx(1.2));
  CHECK(core::kernel_threads(g, Kernel::Elementwise, 256) == 1.0);
  // A Program's tasks: linears and attention by their curves, layernorm, GELU and the rest one.
  const auto spec = core::parse_model_spec("name: t\nlayers: 1\nhidden: 128\nheads: 4\nseq: 64\nvocab: 256\nmicro_batch: 1\n",
                                           "t.yaml");
  const auto hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  const auto pr = core::make_plan(models::build_gpt(spec), hw, core::parse_run_config("zero_stage: 3\n", "c"), 1);
  int linears = 0, others = 0;
  for (const auto& t : pr.program.tasks()) {
    if (!core::is_compute(t.kind) || t.op < 0) continue;
    const auto& op = pr.program.ops()[size_t(t.op)];
    const double threads = core::task_kernel_threads(g, pr.program, t);
    if (op.kind == "attention") {
      CHECK(threads == Approx(g.attention_threads.at(32)));
    } else if (op.kind == "linear") {
      CHECK(threads == Approx(g.gemm_threads.at(double(t.gemm_dim))));
      CHECK(threads > 1.0);
      ++linears;
    } else if (op.kind == "layernorm" || op.kind == "gelu" || op.kind == "residual") {
      CHECK(threads == 1.0);
      ++others;
    }
  }
  CHECK(linears > 2);
  CHECK(others > 2);
}

TEST_CASE("a GEMM's curve argument is the side of the square GEMM of the same intensity; a tile keeps most of it", "[cost]") {
  CHECK(core::gemm_intensity_dim(256, 256, 256) == Approx(256));
  CHECK(core::gemm_intensity_dim(512, 32, 128) == Approx(3.0 / (1.0 / 512 + 1.0 / 32 + 1.0 / 128)));
  // Symmetric in m, n, k, and never below the smallest dimension or above the largest.
  CHECK(core::gemm_intensity_dim(32, 512, 128) == Approx(core::gemm_intensity_dim(128, 32, 512)));
  CHECK(core::gemm_intensity_dim(512, 32, 128) > 32);
  CHECK(core::gemm_intensity_dim(512, 32, 128) < 512);

  // gpt with 512 tokens per micro-batch and hidden 128: mlp.c_proj is 512 x 128 x 512 whole, and
  // 512 x 32 x 512 per tile at tiling factor 4. The tile's argument is its own intensity (about 85),
  // not its 32 outputs, and the whole layer's is larger still.
  const auto spec = core::parse_model_spec("name: t\nlayers: 1\nhidden: 128\nheads: 4\nseq: 128\nvocab: 256\nmicro_batch: 4\n",
                                           "t.yaml");
  const auto hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  auto dim_of = [&](const std::string& config) {
    const auto pr = core::make_plan(models::build_gpt(spec), hw, core::parse_run_config(config, "c"), 1);
    for (const auto& t : pr.program.tasks())
      if (t.kind == core::TaskKind::Forward && t.op >= 0 && pr.program.ops()[size_t(t.op)].name == "h.0.mlp.c_proj")
        return t.gemm_dim;
    return int64_t(-1);
  };
  const int64_t whole = dim_of("zero_stage: 3\n"), tile = dim_of("zero_stage: 3\ntiling_factor: 4\n");
  CHECK(whole == std::lround(core::gemm_intensity_dim(512, 128, 512)));
  CHECK(tile == std::lround(core::gemm_intensity_dim(512, 32, 512)));
  CHECK(tile > 32);
  CHECK(tile < whole);
}

TEST_CASE("a kernel's in-step slowdown scales its time but not its launch, by op kind and pass", "[cost]") {
  const auto spec = core::parse_model_spec("name: t\nlayers: 1\nhidden: 128\nheads: 4\nseq: 64\nvocab: 256\nmicro_batch: 1\n",
                                           "t.yaml");
  const auto hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  const auto pr = core::make_plan(models::build_gpt(spec), hw, core::parse_run_config("zero_stage: 3\n", "c"), 1);
  core::GpuSpec plain = gpu(), slowed = gpu();
  slowed.in_step_slowdown = {{"linear_backward", 3.0}, {"gelu_forward", 0.5}};
  int linear_bwd = 0, gelu_fwd = 0;
  for (const auto& t : pr.program.tasks()) {
    if (!core::is_compute(t.kind)) continue;
    const std::string key = core::in_step_key(pr.program, t);
    const double a = core::task_kernel_seconds(plain, pr.program, t), b = core::task_kernel_seconds(slowed, pr.program, t);
    const double f = key == "linear_backward" ? 3.0 : key == "gelu_forward" ? 0.5 : 1.0;
    CHECK(b - slowed.kernel_launch == Approx(f * (a - plain.kernel_launch)));
    linear_bwd += key == "linear_backward";
    gelu_fwd += key == "gelu_forward";
    if (t.kind == core::TaskKind::Recompute) CHECK(key.ends_with("_forward"));
  }
  CHECK(linear_bwd == 4);  // c_attn, attn.c_proj, c_fc, mlp.c_proj
  CHECK(gelu_fwd >= 1);
}

TEST_CASE("in_step_slowdown in a profile: known keys only, each a factor in [0.1, 20]", "[cost]") {
  auto yaml = [](const std::string& in_step) {
    return "name: t\nnode:\n  gpus: 1\n  gpu: {name: g, memory: 1 GiB, peak_flops: 1e12, memory_bandwidth: 1e11, "
           "in_step_slowdown: " + in_step + "}\n"
           "  host: {memory: 8 GiB, memory_bandwidth: 1e10, cores: 2, adam_params_per_s: 1e8}\n"
           "  nvme: {capacity: 1 TB, read_bandwidth: 1e9, write_bandwidth: 1e9}\n"
           "  pcie: {bandwidth_per_gpu: 1e10}\n  nvlink: {bandwidth_per_gpu: 1e10}\n  nic: {count: 1, bandwidth: 1e10}\n";
  };
  const auto hw = core::parse_hwprofile(yaml("{linear_forward: 1.25, optimizer: 0.6}"), "t.yaml");
  CHECK(hw.node.gpu.in_step("linear_forward") == 1.25);
  CHECK(hw.node.gpu.in_step("optimizer") == 0.6);
  CHECK(hw.node.gpu.in_step("gelu_backward") == 1.0);
  for (const std::string bad : {"{linear_sideways: 1.2}", "{gelu_forward: 40}"}) {
    try {
      core::parse_hwprofile(yaml(bad), "t.yaml");
      FAIL("accepted " << bad);
    } catch (const std::exception& e) {
      CHECK(std::string(e.what()).find("in_step_slowdown") != std::string::npos);
      CHECK(std::string(e.what()).find("t.yaml") != std::string::npos);
    }
  }
}

TEST_CASE("GPU profiles without the CPU-backend fields keep elementwise and attention at the peak", "[cost]") {
  for (const char* name : {"dgx2-v100", "dgx-a100", "h200-node"}) {
    const auto hw = core::load_hwprofile(test::source(std::string("hwprofiles/") + name + ".yaml"));
    const auto& g = hw.node.gpu;
    CHECK(g.vector_flops == 0);
    CHECK(g.attention_forward_efficiency.points.empty());
    CHECK(g.gemm_forward_efficiency.points.empty());
    CHECK(core::kernel_seconds(g, Kernel::AttentionForward, 1e12, 0, 128) == Approx(g.kernel_launch + 1e12 / g.peak_flops));
  }
}

TEST_CASE("an efficiency curve with a point outside (0, 1] is refused, naming the key", "[cost]") {
  const std::string yaml =
      "name: t\nnode:\n  gpus: 1\n  gpu: {name: g, memory: 1 GiB, peak_flops: 1e12, memory_bandwidth: 1e11, "
      "attention_forward_efficiency: [[32, 0.5], [64, 0]]}\n"
      "  host: {memory: 8 GiB, memory_bandwidth: 1e10, cores: 2, adam_params_per_s: 1e8}\n"
      "  nvme: {capacity: 1 TB, read_bandwidth: 1e9, write_bandwidth: 1e9}\n"
      "  pcie: {bandwidth_per_gpu: 1e10}\n";
  try {
    core::parse_hwprofile(yaml, "t.yaml");
    FAIL("accepted");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("attention_forward_efficiency") != std::string::npos);
  }
}
