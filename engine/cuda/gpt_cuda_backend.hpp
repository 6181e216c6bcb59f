// GptCudaBackend is what each task of a core::Program means when it trains a GPT-2 on a GPU: the
// CUDA twin of GptCpuBackend (engine/exec/gpt_backend.hpp), task by task. It is built into the CUDA
// plugin (engine/cuda/plugin.cpp), which zinf loads only when the CUDA backend is asked for.
// Parameter shards are read from NVMe into pinned host buffers (the same io_uring NvmeStore), copied
// to the device with cudaMemcpyAsync, all-gathered (NCCL) into bf16 device buffers that the
// operators read directly; operators run forward / recomputed / backward with the CUDA kernels and
// cuBLAS (GptCudaModel); fp32 gradients are reduce-scattered and accumulated as bf16 shards on their
// tier; activation checkpoints go to pinned host memory or NVMe and back; optimizer sub-groups are
// updated by CPU Adam (states on host or NVMe) or by the device Adam kernel (states on the device).
//
// Device memory is one DeviceArena of a fixed budget; host tiers are pinned (cudaHostAlloc).
// It decides nothing (docs/DESIGN.md): which shard, tier, tile, buffer and order come from the Program.
// Threading: run() is called concurrently from the Executor's lane threads; each lane has its own
// CUDA stream and cuBLAS handle, a task enqueues its work on its lane's stream and synchronizes that
// stream before returning, so the Executor's dependencies order the lanes. (Events between streams
// instead of the per-task synchronization are a later optimization.) The other methods are called
// between steps from one thread. ZeRO stage 3 only, like the CPU backend. `comm` must accept device
// buffers: cuda::make_device_collectives (NCCL, or device copies for one rank).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/exec/gpt_backend.hpp"
#include "engine/exec/training_backend.hpp"
#include "engine/model/gpt2.hpp"

namespace zinf::engine::cuda {

struct GptCudaBackendOptions {
  GptBackendOptions base;       // NVMe directory, CPU Adam threads, run config
  int device = 0;               // CUDA device of this rank
  uint64_t device_memory = 0;   // bytes of the device arena; 0: the free memory less a reserve
};

class GptCudaBackend final : public TrainingBackend {
public:
  GptCudaBackend(const core::Program& program, const core::Plan& plan, const Gpt2& model, int rank, Collectives& comm,
                 GptCudaBackendOptions options);
  ~GptCudaBackend() override;

  void begin_step(int64_t step, std::vector<Batch> batches) override;
  void run(const core::Task& task) override;
  std::vector<core::TaskWait> waits() const override;
  double loss() const override;
  double grad_norm() const override { return grad_norm_; }
  // The state moves whole (streams_state() is false): the trainer gathers and loads it at once.
  FullState gather_state() override;
  void load_state(const FullState& s) override;
  using TrainingBackend::load_state;

  // Device arena: its budget and the most it has held since the last reset.
  uint64_t device_budget() const;
  int64_t device_peak_bytes() const override;
  void reset_device_peak() override;

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
  double grad_norm_ = 0;
};

}  // namespace zinf::engine::cuda
