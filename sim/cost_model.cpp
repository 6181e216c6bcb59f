#include "sim/cost_model.hpp"

#include <algorithm>

namespace zinf::sim {

double CostModel::gemm_efficiency(double min_dim) const {
  // A profile without a curve claims nothing about GEMM shape: the curve's `at` answers 1.
  return hw_.node.gpu.gemm_efficiency.at(min_dim);
}

double CostModel::kernel_seconds(double flops, double bytes, int64_t gemm_min_dim) const {
  const auto& g = hw_.node.gpu;
  const double eff = gemm_min_dim > 0 ? gemm_efficiency(static_cast<double>(gemm_min_dim)) : 1.0;
  const double compute = flops / (g.peak_flops * eff);
  const double memory = bytes / (g.memory_bandwidth * g.elementwise_efficiency);
  return g.kernel_launch + std::max(compute, memory);
}

double CostModel::cpu_adam_seconds(double params) const {
  return params / (hw_.node.cpu_adam_rate / hw_.node.cpu_sockets);
}

double CostModel::cpu_stream_seconds(double bytes) const {
  return bytes / (hw_.node.host_memory_bandwidth / hw_.node.cpu_sockets);
}

}  // namespace zinf::sim
