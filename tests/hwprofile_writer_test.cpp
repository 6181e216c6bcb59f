// core::hwprofile_to_yaml against core's reader: every field written reads back as the same value,
// for the shipped profiles and for one with every field set away from its default; notes become
// comments on their lines; rounding when asked.
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/hwprofile.hpp"
#include "formats/hwprofile_writer.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;

namespace {

void check_same(const HwProfile& a, const HwProfile& b) {
  CHECK(a.name == b.name);
  CHECK(a.description == b.description);
  CHECK(a.measured_on.cpu == b.measured_on.cpu);
  CHECK(a.measured_on.cpu_flags == b.measured_on.cpu_flags);
  CHECK(a.measured_on.cores == b.measured_on.cores);
  CHECK(a.measured_on.memory == b.measured_on.memory);
  CHECK(a.measured_on.disk == b.measured_on.disk);
  CHECK(a.measured_on.blas_threads == b.measured_on.blas_threads);
  CHECK(a.measured_on.blas_threads_from == b.measured_on.blas_threads_from);
  const GpuSpec &g = a.node.gpu, &h = b.node.gpu;
  CHECK(a.node.gpus == b.node.gpus);
  CHECK(g.name == h.name);
  CHECK(g.memory == h.memory);
  CHECK(g.working_bytes == h.working_bytes);
  CHECK(g.peak_flops == h.peak_flops);
  CHECK(g.memory_bandwidth == h.memory_bandwidth);
  CHECK(g.kernel_launch == h.kernel_launch);
  CHECK(g.gemm_efficiency.points == h.gemm_efficiency.points);
  CHECK(g.gemm_forward_efficiency.points == h.gemm_forward_efficiency.points);
  CHECK(g.elementwise_efficiency == h.elementwise_efficiency);
  CHECK(g.vector_flops == h.vector_flops);
  CHECK(g.attention_forward_efficiency.points == h.attention_forward_efficiency.points);
  CHECK(g.attention_backward_efficiency.points == h.attention_backward_efficiency.points);
  CHECK(g.gemm_threads.points == h.gemm_threads.points);
  CHECK(g.attention_threads.points == h.attention_threads.points);
  CHECK(g.in_step_slowdown == h.in_step_slowdown);
  const NodeSpec &n = a.node, &m = b.node;
  CHECK(n.host_memory == m.host_memory);
  CHECK(n.host_memory_bandwidth == m.host_memory_bandwidth);
  CHECK(n.cpu_sockets == m.cpu_sockets);
  CHECK(n.cpu_cores == m.cpu_cores);
  CHECK(n.cpu_adam_rate == m.cpu_adam_rate);
  CHECK(n.device_shares_host_cores == m.device_shares_host_cores);
  CHECK(n.background_threads == m.background_threads);
  CHECK(n.parallel_throughput == m.parallel_throughput);
  CHECK(n.rank_skew.points == m.rank_skew.points);
  CHECK(n.nvme_capacity == m.nvme_capacity);
  CHECK(n.nvme_drives == m.nvme_drives);
  CHECK(n.nvme_read_bandwidth == m.nvme_read_bandwidth);
  CHECK(n.nvme_write_bandwidth == m.nvme_write_bandwidth);
  CHECK(n.nvme_latency == m.nvme_latency);
  CHECK(n.nvme_serial_requests == m.nvme_serial_requests);
  CHECK(n.nvme_read_in_step == m.nvme_read_in_step);
  CHECK(n.nvme_write_in_step == m.nvme_write_in_step);
  CHECK(n.pcie_bandwidth == m.pcie_bandwidth);
  CHECK(n.gpus_per_pcie_switch == m.gpus_per_pcie_switch);
  CHECK(n.pcie_switch_uplink == m.pcie_switch_uplink);
  CHECK(n.pcie_latency == m.pcie_latency);
  CHECK(n.nvlink_bandwidth == m.nvlink_bandwidth);
  CHECK(n.nvlink_latency == m.nvlink_latency);
  CHECK(n.nics == m.nics);
  CHECK(n.nic_bandwidth == m.nic_bandwidth);
  CHECK(n.gds_bandwidth == m.gds_bandwidth);
  CHECK(a.fabric.topology == b.fabric.topology);
  CHECK(a.fabric.latency == b.fabric.latency);
  CHECK(a.reserve.gpu == b.reserve.gpu);
  CHECK(a.reserve.host == b.reserve.host);
  CHECK(a.reserve.nvme == b.reserve.nvme);
}

}  // namespace

TEST_CASE("every shipped hwprofile written and read back is the same profile", "[hwprofile][writer]") {
  int profiles = 0;
  for (const auto& f : std::filesystem::directory_iterator(zinf::test::source("hwprofiles"))) {
    if (f.path().extension() != ".yaml") continue;
    INFO(f.path().string());
    const HwProfile hw = load_hwprofile(f.path().string());
    const std::string yaml = hwprofile_to_yaml(hw);
    check_same(hw, parse_hwprofile(yaml, "written"));
    CHECK(hwprofile_to_yaml(parse_hwprofile(yaml, "written")) == yaml);  // a fixed point
    ++profiles;
  }
  CHECK(profiles >= 5);
}

TEST_CASE("a profile with every field away from its default reads back field by field", "[hwprofile][writer]") {
  HwProfile hw = load_hwprofile(zinf::test::source("hwprofiles/dgx2-v100.yaml"));
  hw.description = "with \"quotes\" and a \\ backslash";
  hw.measured_on = {"Some CPU @ 2.80GHz", {"avx2", "avx512f", "sse4_2"}, 7, 25.5e9, "vda1 ext4"};
  hw.measured_on.blas_threads = 3;
  hw.measured_on.blas_threads_from = "--threads";
  auto& g = hw.node.gpu;
  g.kernel_launch = 3.25e-6;
  g.gemm_forward_efficiency.points = {{64, 0.125}, {4096, 0.8125}};
  g.attention_forward_efficiency.points = {{64, 0.3}, {128, 0.45}};
  g.attention_backward_efficiency.points = {{64, 0.2}, {128, 0.35}};
  g.gemm_threads.points = {{12, 1.0}, {512, 1.875}};
  g.attention_threads.points = {{16, 1.25}, {128, 1.5}};
  g.vector_flops = 1.234567891e12;
  g.in_step_slowdown = {{"linear_forward", 1.0411}, {"optimizer", 2.5}, {"gelu_backward", 4.947}};
  auto& n = hw.node;
  n.cpu_sockets = 2;
  n.device_shares_host_cores = true;
  n.background_threads = 0.37;
  n.parallel_throughput = 1.83;
  n.rank_skew.points = {{2, 0.05}, {4, 0.125}};
  n.nvme_drives = 3;
  n.nvme_serial_requests = true;
  n.nvme_read_in_step = 1.5;
  n.nvme_write_in_step = 2.25;
  n.gpus_per_pcie_switch = 2;
  n.pcie_switch_uplink = 1.6e10;
  n.nics = 8;
  n.gds_bandwidth = 2.4e10;
  hw.fabric.topology = "full";
  hw.fabric.latency = 1.7e-6;
  hw.reserve = {0.02, 0.06, 0.05};
  hw.node.gpu.working_bytes = 4;
  check_same(hw, parse_hwprofile(hwprofile_to_yaml(hw), "written"));
}

TEST_CASE("notes are comments on their fields' lines, the header on top, rounding when asked", "[hwprofile][writer]") {
  HwProfile hw = load_hwprofile(zinf::test::source("hwprofiles/cpu-dev.yaml"));
  hw.node.gpu.peak_flops = 123456789.0;
  HwProfileNotes notes;
  notes.header = {"measured by a test"};
  notes.sources = {"zinf profile-hw"};
  notes.fields["node.gpu.peak_flops"] = "best GEMM rate";
  notes.fields["node.nvme"] = "the store";
  notes.significant_digits = 4;
  const std::string y = hwprofile_to_yaml(hw, notes);
  CHECK(y.rfind("# measured by a test\n", 0) == 0);
  CHECK_THAT(y, Contains("sources:\n  - \"zinf profile-hw\"\n"));
  CHECK_THAT(y, Contains("    peak_flops: 1.235e+08"));
  CHECK_THAT(y, Contains("# best GEMM rate\n"));
  CHECK_THAT(y, Contains("  nvme:") && Contains("# the store\n"));
  const HwProfile back = parse_hwprofile(y, "written");
  CHECK(back.node.gpu.peak_flops == 1.235e8);
}
