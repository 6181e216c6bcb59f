#include "sim/cost_model.hpp"

#include <algorithm>

namespace zinf::sim {

double CostModel::gemm_efficiency(double dim) const {
  // A profile without a curve claims nothing about GEMM shape: the curve's `at` answers 1.
  return hw_.node.gpu.gemm_efficiency.at(dim);
}

double CostModel::kernel_seconds(const core::Program& program, const core::Task& task) const {
  return core::task_kernel_seconds(hw_.node.gpu, program, task);
}

double CostModel::kernel_threads(const core::Program& program, const core::Task& task) const {
  return core::task_kernel_threads(hw_.node.gpu, program, task);
}

double CostModel::cpu_adam_seconds(double params) const {
  return params / (hw_.node.cpu_adam_rate / hw_.node.cpu_sockets);
}

double CostModel::cpu_stream_seconds(double bytes) const {
  return bytes / (hw_.node.host_memory_bandwidth / hw_.node.cpu_sockets);
}

}  // namespace zinf::sim
