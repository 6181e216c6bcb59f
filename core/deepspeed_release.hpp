// What a DeepSpeed release's ZeRO-3 engine did around each parameter fetch and gradient reduction,
// beyond what its JSON config says, read from its runtime/zero/stage3.py and partition_parameters.py
// (and PyTorch's ProcessGroupNCCL of the time). A run config names a release
// (`deepspeed_release: 0.3.13`) to take all of that release's behaviours, or switches them one by
// one (`deepspeed_behaviour:`); zinf's own engine has none of them (the defaults). The planner turns
// the switches into the Program: dependencies for the synchronizations, the step each NVMe read is
// issued at, the prefetch rule, and the device passes each collective makes (Program::
// gather_device_passes). Plain value type.
#pragma once
#include <string>
#include <vector>

namespace zinf::core {

struct DeepSpeedBehaviour {
  // The release the switches came from ("" when none was named).
  std::string release;
  // The device synchronizes at each fetch (v0.3.12 - v0.5.4): partition_parameters.py
  // `_allgather_param` calls torch.cuda.synchronize() before every parameter's all-gather, and
  // stage3.py `fetch_sub_module` waits for the gathers and the whole device before the module runs.
  // A parameter all-gather then waits for every device task issued before it, and the compute that
  // uses a fetched unit for them too (gradient reductions and copies included): nothing the device
  // was doing overlaps the next module.
  bool fetch_syncs_device = false;
  // NVMe parameter partitions are read ahead in backward as in forward. false (v0.3.15 on):
  // `pre_sub_module_backward_function` calls `prefetch_next_sub_modules` without `nvme=`, so a
  // partition is swapped in by `_ensure_availability_of_partitioned_params` (async_op=False) when its
  // all-gather is issued, and the thread issues the module's compute only after the read.
  bool backward_nvme_prefetch = true;
  // Passes over a gathered parameter's bytes the device makes beside the NCCL call: PyTorch 1.8's
  // list all_gather copies its flat output into the list (ProcessGroupNCCL::allgather: read + write,
  // 2; DeepSpeed PR 1188: "torch.distributed.all_gather will do implicit memcpy"), and v0.3's
  // `_allgather_param` zero-fills the buffer first (torch.zeros: 1).
  int gather_device_passes = 0;
  // The same for a gradient's reduce-scatter: ProcessGroupNCCL::reduce_scatter copies its input
  // list into a flat buffer (read + write, 2).
  int reduce_device_passes = 0;
  // Prefetch while the gathered parameters live on the device are under max_live, whatever the
  // size of what is prefetched (stage3.py `prefetch_next_sub_modules`: `total_available_parameter_numel
  // < max_available_parameters_in_numel`); zinf holds a prefetch back while live + its bytes exceed it.
  bool prefetch_while_under_live = false;
  // The module trace is misaligned by one step, so no parameter is prefetched (from NVMe or by
  // all-gather) and none is kept for reuse (v0.3.14 - v0.5.10: commit 7b46d11fa registers the step
  // reset after the top module's pre-forward hook; github.com/microsoft/DeepSpeed/issues/1069; fixed in v0.6.0).
  bool trace_misaligned = false;
};

}  // namespace zinf::core
