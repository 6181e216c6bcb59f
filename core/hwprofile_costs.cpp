// What a hardware profile's numbers give beside the profile itself: rates interpolated on its
// curves, links shared by the GPUs behind one switch, the kernel-time formula every executor and the
// planner use, and the profile for a precision the GPU does not run natively. Pure functions.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "core/errors.hpp"
#include "core/graph.hpp"
#include "core/hwprofile.hpp"
#include "core/units.hpp"

namespace zinf::core {

double Curve::at(double x) const {
  if (points.empty()) return 1.0;
  if (x <= points.front().first) return points.front().second;
  if (x >= points.back().first) return points.back().second;
  auto it = std::upper_bound(points.begin(), points.end(), x,
                             [](double v, const std::pair<double, double>& p) { return v < p.first; });
  const auto& [x1, y1] = *it;
  const auto& [x0, y0] = *(it - 1);
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

double NodeSpec::gds_bandwidth_all_active() const {
  const int per_switch = std::max(1, std::min(gpus_per_pcie_switch, gpus));
  return std::min(pcie_bandwidth, gds_bandwidth / per_switch);
}

double NodeSpec::pcie_bandwidth_all_active() const {
  int per_switch = std::min(gpus_per_pcie_switch, gpus);
  double share = pcie_switch_uplink > 0 ? pcie_switch_uplink / per_switch : pcie_bandwidth;
  return std::min(pcie_bandwidth, share);
}

double NodeSpec::profiled_core_share(double threads) const {
  if (!device_shares_host_cores) return 1.0;
  return std::min(1.0, core_capacity() / (threads + background_threads));
}

Precision native_precision(const GpuSpec& g) {
  if (g.working_bytes == 4) return Precision::Bf16;  // the CPU backend stores bf16 and computes in fp32
  return g.bf16_native || !g.fp16_native ? Precision::Bf16 : Precision::Fp16;
}

HwProfile for_precision(const HwProfile& hw, std::optional<Precision> wanted, std::vector<std::string>* notes) {
  HwProfile out = hw;
  GpuSpec& g = out.node.gpu;
  if (!wanted || g.working_bytes == 4) return out;
  const Precision p = *wanted;  // the CPU backend: peak_flops is its fp32 rate already
  const bool native = p == Precision::Bf16 ? g.bf16_native : p == Precision::Fp16 ? g.fp16_native : false;
  if (native) return out;
  if (g.peak_flops_fp32 <= 0)
    throw ConfigError(hw.name, "node.gpu.peak_flops_fp32",
                      fmt::format("a {} run on {} computes at the GPU's fp32 rate, and the profile does not give it",
                                  to_string(p), g.name));
  if (notes)
    notes->push_back(p == Precision::Fp32
                         ? fmt::format("{}: fp32 GEMMs at {} (node.gpu.peak_flops_fp32), not the {} tensor-core rate",
                                       g.name, format_flops(g.peak_flops_fp32), format_flops(g.peak_flops))
                         : fmt::format("{} has no {} units: PyTorch emulates {} at the fp32 rate, {} (DeepSpeed accepts "
                                       "it), not {}",
                                       g.name, to_string(p), to_string(p), format_flops(g.peak_flops_fp32),
                                       format_flops(g.peak_flops)));
  if (g.vector_flops <= 0) g.vector_flops = g.peak_flops;  // elementwise kernels keep their rate
  g.peak_flops = g.peak_flops_fp32;
  return out;
}

const std::vector<std::string>& round_trip_phases() {
  static const std::vector<std::string> phases = {"before_kernels", "after_kernels", "before_steps", "after_steps"};
  return phases;
}

std::vector<std::string> machine_differences(const MachineRecord& profiled, const MachineRecord& here) {
  std::vector<std::string> out;
  if (profiled.cpu != here.cpu) out.push_back("CPU: profiled on '" + profiled.cpu + "', this one is '" + here.cpu + "'");
  std::vector<std::string> missing, extra;
  std::set_difference(profiled.cpu_flags.begin(), profiled.cpu_flags.end(), here.cpu_flags.begin(), here.cpu_flags.end(),
                      std::back_inserter(missing));
  std::set_difference(here.cpu_flags.begin(), here.cpu_flags.end(), profiled.cpu_flags.begin(), profiled.cpu_flags.end(),
                      std::back_inserter(extra));
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& f : v) s += (s.empty() ? "" : " ") + f;
    return s;
  };
  if (!missing.empty()) out.push_back("CPU features the profiled machine had and this one lacks: " + join(missing));
  if (!extra.empty()) out.push_back("CPU features this machine has that the profiled one lacked: " + join(extra));
  if (profiled.cores != here.cores)
    out.push_back("cores: " + std::to_string(profiled.cores) + " profiled, " + std::to_string(here.cores) + " here");
  if (std::abs(profiled.memory - here.memory) > 0.05 * std::max(profiled.memory, here.memory))
    out.push_back("memory: " + format_bytes(profiled.memory) + " profiled, " + format_bytes(here.memory) + " here");
  if (!profiled.disk.empty() && !here.disk.empty() && profiled.disk != here.disk)
    out.push_back("disk: '" + profiled.disk + "' profiled, '" + here.disk + "' here");
  if (!profiled.blas.empty() && !here.blas.empty() && profiled.blas != here.blas)
    out.push_back("OpenBLAS kernels: '" + profiled.blas + "' profiled, '" + here.blas +
                  "' here (OPENBLAS_CORETYPE chooses them, and GEMM rates follow)");
  if (profiled.blas_threads > 0 && here.blas_threads > 0 && profiled.blas_threads != here.blas_threads)
    out.push_back("OpenBLAS threads: " + std::to_string(profiled.blas_threads) + " profiled, " +
                  std::to_string(here.blas_threads) + " here (by default each process takes the cores it may use, shared among the ranks on its node; "
                  "--threads or OPENBLAS_NUM_THREADS choose)");
  return out;
}

double GpuSpec::in_step(const std::string& key) const {
  auto it = in_step_slowdown.find(key);
  return it == in_step_slowdown.end() ? 1.0 : it->second;
}

const std::vector<std::string>& in_step_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (OpKind op : {OpKind::Embedding, OpKind::LayerNorm, OpKind::Linear, OpKind::Attention, OpKind::Gelu,
                      OpKind::Residual, OpKind::LmHead, OpKind::Loss})
      for (const char* dir : {"_forward", "_backward"}) k.push_back(std::string(to_string(op)) + dir);
    k.push_back("optimizer");
    return k;
  }();
  return keys;
}

double gemm_intensity_dim(double m, double n, double k) { return 3.0 / (1.0 / m + 1.0 / n + 1.0 / k); }

double kernel_seconds(const GpuSpec& g, Kernel kernel, double flops, double bytes, int64_t curve_dim, double slowdown) {
  const double x = double(curve_dim);
  double efficiency = 1.0;
  switch (kernel) {
    case Kernel::Elementwise: efficiency = g.vector_flops > 0 ? g.vector_flops / g.peak_flops : 1.0; break;
    case Kernel::GemmForward:
      efficiency = (g.gemm_forward_efficiency.points.empty() ? g.gemm_efficiency : g.gemm_forward_efficiency).at(x);
      break;
    case Kernel::GemmBackward: efficiency = g.gemm_efficiency.at(x); break;
    case Kernel::AttentionForward: efficiency = g.attention_forward_efficiency.at(x); break;
    case Kernel::AttentionBackward: efficiency = g.attention_backward_efficiency.at(x); break;
  }
  const double compute = flops / (g.peak_flops * std::max(1e-3, efficiency));
  const double memory = bytes / (g.memory_bandwidth * g.elementwise_efficiency);
  return g.kernel_launch + slowdown * std::max(compute, memory);
}

double kernel_threads(const GpuSpec& g, Kernel kernel, int64_t curve_dim) {
  const Curve* c = nullptr;
  switch (kernel) {
    case Kernel::GemmForward:
    case Kernel::GemmBackward: c = &g.gemm_threads; break;
    case Kernel::AttentionForward:
    case Kernel::AttentionBackward: c = &g.attention_threads; break;
    case Kernel::Elementwise: break;
  }
  return c && !c->points.empty() ? std::max(1.0, c->at(double(curve_dim))) : 1.0;
}

}  // namespace zinf::core
