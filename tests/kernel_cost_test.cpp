// core::kernel_seconds: the one device-kernel cost that the simulator and the idealized scheduler share.
#include <catch2/catch.hpp>

#include "core/errors.hpp"
#include "core/hwprofile.hpp"
#include "test_paths.hpp"

using namespace zinf;

TEST_CASE("a kernel costs its launch plus the larger of its arithmetic and its memory time", "[cost]") {
  core::GpuSpec g;
  g.peak_flops = 100e9;
  g.memory_bandwidth = 10e9;
  g.kernel_launch = 1e-6;
  g.elementwise_efficiency = 0.5;
  g.gemm_efficiency.points = {{16, 0.25}, {256, 1.0}};
  // GEMM: at the curve's efficiency for its smallest dimension.
  CHECK(core::kernel_seconds(g, 100e9, 0, 256) == Approx(1.0 + 1e-6));
  CHECK(core::kernel_seconds(g, 100e9, 0, 16) == Approx(4.0 + 1e-6));
  // Elementwise with no vector rate given: the peak; memory at half the bandwidth.
  CHECK(core::kernel_seconds(g, 1e9, 10e9, 0) == Approx(2.0 + 1e-6));
  CHECK(core::kernel_seconds(g, 1e9, 0, 0) == Approx(0.01 + 1e-6));
  g.vector_flops = 1e9;
  CHECK(core::kernel_seconds(g, 1e9, 0, 0) == Approx(1.0 + 1e-6));
  CHECK(core::kernel_seconds(g, 1e9, 30e9, 0) == Approx(6.0 + 1e-6));  // memory-bound still
  // Attention: at attention_efficiency of the peak, not at the vector rate.
  g.attention_efficiency = 0.5;
  CHECK(core::kernel_seconds(g, 100e9, 0, 0, true) == Approx(2.0 + 1e-6));
}

TEST_CASE("GPU profiles without the CPU-backend fields keep elementwise and attention at the peak", "[cost]") {
  for (const char* name : {"dgx2-v100", "dgx-a100", "h200-node"}) {
    const auto hw = core::load_hwprofile(test::source(std::string("hwprofiles/") + name + ".yaml"));
    CHECK(hw.node.gpu.vector_flops == 0);
    CHECK(hw.node.gpu.attention_efficiency == 1.0);
    const auto& g = hw.node.gpu;
    CHECK(core::kernel_seconds(g, 1e12, 0, 0, true) == Approx(g.kernel_launch + 1e12 / g.peak_flops));
  }
}

TEST_CASE("an attention efficiency of zero is refused, naming the key", "[cost]") {
  const std::string yaml =
      "name: t\nnode:\n  gpus: 1\n  gpu: {name: g, memory: 1 GiB, peak_flops: 1e12, memory_bandwidth: 1e11, attention_efficiency: 0}\n"
      "  host: {memory: 8 GiB, memory_bandwidth: 1e10, cores: 2, adam_params_per_s: 1e8}\n"
      "  nvme: {capacity: 1 TB, read_bandwidth: 1e9, write_bandwidth: 1e9}\n"
      "  pcie: {bandwidth_per_gpu: 1e10}\n";
  try {
    core::parse_hwprofile(yaml, "t.yaml");
    FAIL("accepted");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("attention_efficiency") != std::string::npos);
  }
}
