#include "formats/hwprofile_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "formats/config_reader.hpp"
#include "core/errors.hpp"
#include "core/graph.hpp"
#include "core/units.hpp"

namespace zinf::core {

namespace {

// The slowest rate a profile may give (per second): below it a step's simulated time leaves the
// range SimGrid's clock resolves, and the simulation ends in a spurious deadlock.
constexpr double kMinRate = 1e3;

}  // namespace

namespace {

// The `nccl:` section: the release must be one core/nccl.hpp tables.
NcclSpec read_nccl(ConfigReader& nc) {
  NcclSpec s;
  s.release = nc.choice("release", {"2.7.8", "2.8.3", "2.18.3"});
  s.sm = static_cast<int>(nc.int_in("sm", 60, 200, 70));
  s.ll128 = nc.boolean("ll128", false);
  s.amd_cpu = nc.choice("cpu", {"intel", "amd"}, "intel") == "amd";
  nc.reject_unread();
  return s;
}

// The formats the GPU computes in at which rate: half_precisions, peak_flops_fp32.
void read_precisions(ConfigReader& g, GpuSpec& gpu) {
  if (g.has("half_precisions")) {
    gpu.bf16_native = gpu.fp16_native = false;
    for (const auto& w : g.list("half_precisions", {"bf16", "fp16"})) (w == "bf16" ? gpu.bf16_native : gpu.fp16_native) = true;
  } else {
    g.ignore("half_precisions");
  }
  gpu.peak_flops_fp32 = g.number_in("peak_flops_fp32", UnitKind::FlopsPerSecond, kMinRate, 1e21, 0.0);
}

// node.gpu.variability: the distribution of one GPU's kernel time over the median GPU's.
void read_variability(ConfigReader& v, GpuSpec& gpu) {
  using U = UnitKind;
  gpu.variability_spread = v.non_negative_number("spread", U::Count, 0.0);
  if (gpu.variability_spread > 1) v.fail("spread", "must be at most 1 (a whisker range of the median's size)");
  gpu.variability_outliers = v.fraction("outliers", 0.0);
  gpu.variability_slowest = v.positive_number("slowest", U::Count, 1.0);
  if (gpu.variability_slowest < 1 || gpu.variability_slowest > 10)
    v.fail("slowest", "must be from 1 to 10 (the slowest GPU's time over the median's)");
  if (gpu.variability_outliers > 0 && gpu.variability_slowest <= 1 + gpu.variability_spread / 2)
    v.fail("slowest", "outliers lie beyond the upper whisker, 1 + spread / 2 times the median: slowest must exceed it");
  v.str("source", "");
  v.reject_unread();
}

// fabric: the topology, its latency and a fat tree's shape.
void read_fabric(ConfigReader& f, FabricSpec& fabric) {
  using U = UnitKind;
  fabric.topology = f.choice("topology", {"full", "fat-tree"}, "full");
  fabric.latency = f.non_negative_number("latency", U::Seconds, 5e-6);
  if (auto t = f.maybe_child("tree")) {
    if (!fabric.is_tree()) f.fail("tree", "is read only with `topology: fat-tree`");
    auto levels = [&t](const char* key) {
      std::vector<int> out;
      for (int64_t v : t->int_list(key, 1, 4096)) out.push_back(static_cast<int>(v));
      return out;
    };
    fabric.tree_children = levels("children");
    fabric.tree_parents = levels("parents");
    if (fabric.tree_children.empty() || fabric.tree_children.size() != fabric.tree_parents.size())
      t->fail("parents", "needs one entry per level, as many as `children`");
    if (fabric.tree_parents.front() != 1) t->fail("parents", "the first entry is 1: each NIC port has one leaf switch");
    fabric.tree_link_bandwidth = t->non_negative_number("link_bandwidth", U::BytesPerSecond, 0.0);
    fabric.placement = t->choice("placement", {"packed", "scattered"}, "packed");
    t->reject_unread();
  } else if (fabric.is_tree()) {
    f.fail("topology", "a fat-tree fabric needs its shape (fabric.tree: children, parents); "
                        "`topology: full` is a non-blocking fabric");
  }
}

// The GPU's curves: efficiencies in (0, 1], and the cores a kernel keeps busy, at least one.
void read_curves(ConfigReader& g, GpuSpec& gpu) {
  auto curve = [&g](const char* key, Curve& into, bool threads) {
    if (!g.has(key)) return;
    into.points = g.curve(key);
    for (const auto& [x, y] : into.points) {
      if (threads && (y < 1 || y > 4096)) g.fail(key, "every thread count must be in [1, 4096] (cores a kernel keeps busy)");
      if (!threads && (y <= 0 || y > 1)) g.fail(key, "every efficiency must be in (0, 1]");
    }
  };
  curve("gemm_efficiency", gpu.gemm_efficiency, false);
  curve("gemm_forward_efficiency", gpu.gemm_forward_efficiency, false);
  curve("attention_forward_efficiency", gpu.attention_forward_efficiency, false);
  curve("attention_backward_efficiency", gpu.attention_backward_efficiency, false);
  curve("gemm_threads", gpu.gemm_threads, true);
  curve("attention_threads", gpu.attention_threads, true);
}

HwProfile read(ConfigReader& r) {
  using U = UnitKind;
  HwProfile hw;
  hw.name = r.str("name");
  hw.description = r.str("description", "");
  r.ignore("sources");
  if (auto m = r.maybe_child("measured_on")) {
    hw.measured_on.cpu = m->str("cpu");
    const std::string flags = m->str("cpu_flags", "");
    for (size_t i = 0; i < flags.size();) {
      const size_t j = std::min(flags.find(' ', i), flags.size());
      if (j > i) hw.measured_on.cpu_flags.push_back(flags.substr(i, j - i));
      i = j + 1;
    }
    std::sort(hw.measured_on.cpu_flags.begin(), hw.measured_on.cpu_flags.end());
    hw.measured_on.cores = static_cast<int>(m->positive_int("cores"));
    hw.measured_on.memory = m->positive_number("memory", U::Bytes);
    hw.measured_on.disk = m->str("disk", "");
    hw.measured_on.blas = m->str("blas", "");
    hw.measured_on.blas_threads = static_cast<int>(m->int_in("blas_threads", 0, 4096, 0));
    if (m->has("blas_threads_from"))
      hw.measured_on.blas_threads_from = m->choice("blas_threads_from", {"cores", "OPENBLAS_NUM_THREADS", "--threads"});
    if (auto t = m->maybe_child("round_trips")) {
      for (const auto& phase : round_trip_phases())
        if (t->has(phase)) hw.measured_on.round_trips.push_back({phase, t->number_in(phase, U::Seconds, 1e-10, 1)});
      t->reject_unread();
    }
    m->reject_unread();
  }
  auto n = r.child("node");
  hw.node.gpus = static_cast<int>(n.int_in("gpus", 1, 65536));
  auto g = n.child("gpu");
  hw.node.gpu.name = g.str("name");
  hw.node.gpu.memory = g.number_in("memory", U::Bytes, 1 << 20, 1e18);
  hw.node.gpu.peak_flops = g.number_in("peak_flops", U::FlopsPerSecond, kMinRate, 1e21);
  hw.node.gpu.memory_bandwidth = g.number_in("memory_bandwidth", U::BytesPerSecond, kMinRate, 1e18);
  hw.node.gpu.kernel_launch = g.non_negative_number("kernel_launch", U::Seconds, 5e-6);
  read_curves(g, hw.node.gpu);
  hw.node.gpu.elementwise_efficiency = g.fraction("elementwise_efficiency", 0.8);
  hw.node.gpu.vector_flops = g.non_negative_number("vector_flops", U::FlopsPerSecond, 0.0);
  hw.node.gpu.working_bytes = g.choice("working_precision", {"bf16", "fp32"}, "bf16") == "fp32" ? 4 : 2;
  read_precisions(g, hw.node.gpu);
  if (auto v = g.maybe_child("variability")) read_variability(*v, hw.node.gpu);
  if (auto s = g.maybe_child("in_step_slowdown")) {
    for (const auto& key : in_step_keys()) {
      if (!s->has(key)) continue;
      const double f = s->positive_number(key, U::Count);
      if (f < 0.1 || f > 20) s->fail(key, "must be between 0.1 and 20 (a factor on the kernel's time alone)");
      hw.node.gpu.in_step_slowdown[key] = f;
    }
    s->reject_unread();
  }

  auto h = n.child("host");
  hw.node.host_memory = h.number_in("memory", U::Bytes, 1 << 20, 1e18);
  hw.node.host_memory_bandwidth = h.number_in("memory_bandwidth", U::BytesPerSecond, kMinRate, 1e18);
  hw.node.cpu_sockets = static_cast<int>(h.int_in("sockets", 1, 1024, 1));
  hw.node.cpu_cores = static_cast<int>(h.int_in("cores", 1, 1 << 20));
  hw.node.cpu_adam_rate = h.number_in("adam_params_per_s", U::Count, 1, 1e18);
  hw.node.device_shares_host_cores = h.boolean("device_shares_cores", false);
  hw.node.background_threads = h.non_negative_number("background_threads", U::Count, 0);
  hw.node.parallel_throughput = h.non_negative_number("parallel_throughput", U::Count, 0);
  if (h.has("rank_skew")) {
    hw.node.rank_skew.points = h.curve("rank_skew");
    for (const auto& [ranks, wait] : hw.node.rank_skew.points)
      if (ranks < 1 || wait < 0 || wait > 10)
        h.fail("rank_skew", "expected [[ranks >= 1, seconds waited per second of compute in [0, 10]], ...]");
  }

  auto d = n.child("nvme");
  hw.node.nvme_capacity = d.number_in("capacity", U::Bytes, 1 << 20, 1e21);
  hw.node.nvme_drives = static_cast<int>(d.int_in("drives", 1, 4096, 1));
  hw.node.nvme_read_bandwidth = d.number_in("read_bandwidth", U::BytesPerSecond, kMinRate, 1e18);
  hw.node.nvme_write_bandwidth = d.number_in("write_bandwidth", U::BytesPerSecond, kMinRate, 1e18);
  hw.node.nvme_latency = d.non_negative_number("latency", U::Seconds, 20e-6);
  hw.node.nvme_serial_requests = d.boolean("serial_requests", false);
  if (auto s = d.maybe_child("in_step_slowdown")) {
    for (auto [key, into] : {std::pair{"read", &hw.node.nvme_read_in_step}, {"write", &hw.node.nvme_write_in_step}}) {
      *into = s->positive_number(key, U::Count, 1.0);
      if (*into < 0.1 || *into > 20) s->fail(key, "must be between 0.1 and 20 (a factor on the request's time alone)");
    }
    s->reject_unread();
  }

  auto p = n.child("pcie");
  hw.node.pcie_bandwidth = p.number_in("bandwidth_per_gpu", U::BytesPerSecond, kMinRate, 1e18);
  hw.node.gpus_per_pcie_switch = static_cast<int>(p.int_in("gpus_per_switch", 1, 65536, 1));
  hw.node.pcie_switch_uplink = p.non_negative_number("switch_uplink", U::BytesPerSecond, 0);
  hw.node.pcie_latency = p.non_negative_number("latency", U::Seconds, 2e-6);

  if (auto gds = n.maybe_child("gds")) {
    hw.node.gds_bandwidth = gds->number_in("bandwidth_per_switch", U::BytesPerSecond, kMinRate, 1e18);
    gds->reject_unread();
  }

  auto l = n.child("nvlink");
  hw.node.nvlink_bandwidth = l.number_in("bandwidth_per_gpu", U::BytesPerSecond, kMinRate, 1e18);
  hw.node.nvlink_latency = l.non_negative_number("latency", U::Seconds, 2e-6);

  auto c = n.child("nic");
  hw.node.nics = static_cast<int>(c.int_in("count", 1, 1024, 1));
  hw.node.nic_bandwidth = c.number_in("bandwidth", U::BytesPerSecond, kMinRate, 1e18);

  if (auto f = r.maybe_child("fabric")) read_fabric(*f, hw.fabric);
  if (auto nc = r.maybe_child("nccl")) hw.nccl = read_nccl(*nc);
  if (auto rs = r.maybe_child("reserve")) {
    hw.reserve.gpu = rs->fraction("gpu", 0.0);
    hw.reserve.host = rs->fraction("host", 0.0);
    hw.reserve.nvme = rs->fraction("nvme", 0.0);
  }
  r.reject_unread();
  return hw;
}

}  // namespace

HwProfile load_hwprofile(const std::string& path) {
  auto r = ConfigReader::from_file(path);
  return read(r);
}

HwProfile parse_hwprofile(const std::string& yaml_text, const std::string& name) {
  auto r = ConfigReader::from_string(yaml_text, name);
  return read(r);
}

}  // namespace zinf::core
