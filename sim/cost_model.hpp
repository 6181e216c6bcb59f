// How long a task occupies the resource it runs on, from the hwprofile alone: kernels by
// core::kernel_seconds (FLOPs at the GEMM efficiency curve, the attention efficiency or the vector
// rate; memory traffic at the elementwise efficiency; whichever is longer, plus one launch); CPU Adam from the node's Adam rate; per-transfer latencies by path. Transfer
// and disk times are not here: the platform's links and disks produce them under contention.
// Every number comes from the profile. Plain value type; thread-safe.
#pragma once
#include <cstdint>

#include "core/hwprofile.hpp"
#include "core/timeline.hpp"

namespace zinf::sim {

class CostModel {
public:
  explicit CostModel(const core::HwProfile& hw) : hw_(hw) {}

  // Fraction of peak a GEMM reaches at `dim` (core::gemm_intensity_dim of its shape).
  double gemm_efficiency(double dim) const;
  // A compute task, or an optimizer step on the device, as one GPU kernel (core::task_kernel_seconds).
  double kernel_seconds(const core::Program& program, const core::Task& task) const;
  // The cores that kernel keeps busy on a shared core pool (core::task_kernel_threads).
  double kernel_threads(const core::Program& program, const core::Task& task) const;
  // Adam over `params` parameters on one CPU socket when it runs alone (sockets time-share).
  double cpu_adam_seconds(double params) const;
  // A pass over `bytes` of host memory on one socket (gradient norm of host-resident shards).
  double cpu_stream_seconds(double bytes) const;
  // A GPU kernel that streams `bytes` (optimizer step or norm on device-resident shards).
  double device_stream_seconds(double bytes) const {
    return core::kernel_seconds(hw_.node.gpu, core::Kernel::Elementwise, 0, bytes, 0);
  }

  double pcie_latency() const { return hw_.node.pcie_latency; }
  double nvme_latency() const { return hw_.node.nvme_latency; }
  // Seconds a collective over `ranks` ranks of one node waits per second of compute since the
  // previous one (CPU backend profiles only).
  double rank_skew(int ranks) const {
    const auto& c = hw_.node.rank_skew;
    return hw_.node.device_shares_host_cores && ranks > 1 && !c.points.empty() ? c.at(double(ranks)) : 0.0;
  }
  bool nvme_serial_requests() const { return hw_.node.nvme_serial_requests; }
  double nvme_in_step(bool read) const { return read ? hw_.node.nvme_read_in_step : hw_.node.nvme_write_in_step; }
  double nvlink_latency() const { return hw_.node.nvlink_latency; }
  double fabric_latency() const { return hw_.fabric.latency; }

private:
  core::HwProfile hw_;
};

}  // namespace zinf::sim
