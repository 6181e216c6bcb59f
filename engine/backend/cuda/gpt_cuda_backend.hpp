// GptCudaBackend is the CUDA device of GptBackendBase (engine/backend/gpt_backend_base.hpp), which holds
// the task logic every device shares; this class implements only the device interface. It is built
// into the CUDA plugin (engine/backend/cuda/plugin.cpp), which zinf loads only when the CUDA backend is
// asked for. Parameter shards are read from NVMe into pinned host buffers (the same io_uring
// NvmeStore), copied to the device with cudaMemcpyAsync, all-gathered (NCCL) into bf16 device
// buffers that the operators read directly; operators run forward / recomputed / backward with the
// CUDA kernels and cuBLAS (GptCudaModel); fp32 gradients are reduce-scattered and accumulated as
// bf16 shards on their tier; activation checkpoints go to pinned host memory or NVMe and back, and
// so do offloaded activation tensors (the base's ActivationOffloader; this class supplies the copies
// on the task's lane stream through pinned host memory, the device memory freed once a save is
// copied and allocated from the arena at the restore; a GPUDirect Storage transfer takes the same
// pinned bounce buffer, as there is no cuFile path, said once on stderr);
// optimizer sub-groups are updated by CPU Adam (states on host or NVMe) or by the device Adam kernel
// (states on the device).
//
// Device memory is one CudaDeviceArena of the Program's device budget (the hwprofile's GPU memory less its
// reserve, or --device-memory's: device_arena_bytes); host tiers are pinned (cudaHostAlloc).
// Threading: each lane has its own CUDA stream and cuBLAS handle, a task enqueues its work on its
// lane's stream and synchronizes that stream before returning, so the Executor's dependencies order
// the lanes. (Events between streams instead of the per-task synchronization are a later
// optimization.) `comm` must accept device buffers: cuda::make_device_collectives (NCCL, or device
// copies for one rank).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/backend/cuda/cuda_home.hpp"
#include "engine/backend/cuda/cuda_device_arena.hpp"
#include "engine/backend/cuda/gpt_cuda_model.hpp"
#include "engine/backend/cuda/kernels.hpp"
#include "engine/backend/cuda/pinned_host.hpp"
#include "engine/backend/gpt_backend_base.hpp"
#include "engine/optim/cpu_adam.hpp"

namespace zinf::engine::cuda {

struct GptCudaBackendOptions {
  GptBackendOptions base;       // NVMe directory, CPU Adam threads, run config
  int device = 0;               // CUDA device of this rank
};

class GptCudaBackend final : public GptBackendBase {
public:
  GptCudaBackend(const core::Program& program, const core::Plan& plan, const Gpt2& model, int rank, Collectives& comm,
                 GptCudaBackendOptions options);
  ~GptCudaBackend() override;

  // The device Adam does not count non-finite master weights: the trainer uses grad_norm().
  std::optional<LocalGradCheck> local_grad_check() const override { return std::nullopt; }
  // Device arena: its budget and the most it has held since the last reset.
  uint64_t device_budget() const;
  int64_t device_peak_bytes() const override;
  void reset_device_peak() override;

private:
  using Key = std::pair<int32_t, int32_t>;

  // The device interface (GptBackendBase): the thread's device, the state's homes, a step's inputs,
  // then the task handlers.
  void bind_thread() override;
  void read_state(StateTensor which, int64_t off, int64_t n, float* dst) override;
  void write_state(int64_t off, int64_t n, StateTensor which, const float* src, bool params_too) override;
  void start_step(std::vector<Batch>& batches) override;
  void fetch(const core::Task& t) override;
  void drop_gathered(int64_t buffer) override;
  void compute(const core::Task& t) override;
  void gradient(const core::Task& t) override;
  void checkpoint(const core::Task& t) override;
  // ActivationDevice: fp32 tensors in the arena, copied on the task's lane stream to and from pinned memory.
  size_t activation_elements(int32_t mb, ActivationRef r) override { return size_t(tensor(mb, r).n); }
  HostFloats activation_host(size_t n) override;
  void save_activations(const core::Task& t, std::span<const ActivationRef> refs, std::span<const size_t> sizes,
                        float* host) override;
  void restore_activations(const core::Task& t, std::span<const ActivationRef> refs, std::span<const size_t> sizes,
                           const float* host) override;
  void release_activation(int32_t mb, ActivationRef r) override { tensor(mb, r).release(); }
  DeviceTensor& tensor(int32_t mb, ActivationRef r) { return saved_tensor(acts_[size_t(mb)].blocks.at(size_t(r.block)), r.tensor); }
  void optimizer(const core::Task& t) override;

  const CudaContext& lane(const core::Task& t) const { return lanes_[size_t(t.lane)]; }
  void sync(const CudaContext& ctx) const;
  CudaHome<float>& state_home(StateTensor which) {
    return which == StateTensor::Master ? master_ : which == StateTensor::AdamM ? m_ : v_;
  }
  const bf16* gathered_for(const core::Task& t, int32_t u);
  DeviceBlock staged_shard(const core::Task& t, const core::ParamUnit& u);
  float* grad_buffer(int32_t u, int32_t mb, const CudaContext& ctx);
  void drop_run(int32_t c, CudaActivations& a);
  void reduce_task(const core::Task& t, const Key& key, int64_t off, int64_t n);
  void accumulate_device(bf16* home, const float* add, int64_t n, bool first, bool last, const CudaContext& ctx);
  PinnedLoan shard_to_host(const core::Task& t, const Key& key, int64_t n, const CudaContext& ctx);
  void adam_host(const core::Task& t);
  void adam_device(const core::Task& t);
  AdamCoeffs coeffs() const;

  int device_;
  std::array<CudaContext, core::kLaneCount> lanes_{};
  CudaContext main_ctx_{};  // between steps, from the calling thread
  std::unique_ptr<CudaDeviceArena> arena_;
  std::unique_ptr<GptCudaModel> model_;
  PinnedCache pinned_;
  CpuAdam adam_;
  CudaHome<bf16> params_, grads_;
  CudaHome<float> master_, m_, v_;

  // Transient data, keyed by what the Program names; the maps are guarded by mu.
  std::map<int64_t, PinnedLoan> host_param_;   // by buffer (Task::buffer, Task::source): NVMe read -> host
  std::map<int64_t, DeviceBlock> dev_param_;   // by buffer: host -> device
  std::map<int64_t, DeviceBlock> gathered_;    // by buffer id: the gathered bf16 unit
  std::map<Key, DeviceBlock> grad_full_;       // (unit, mb): fp32, padded to ranks x shard
  std::map<Key, DeviceBlock> grad_shard_;      // (unit, mb): reduced fp32 shard, on the device
  std::map<Key, PinnedLoan> grad_shard_host_;  // (unit, mb): reduced fp32 shard, on the host
  std::map<Key, PinnedLoan> grad_partial_;     // (unit, mb): earlier micro-batches' bf16 sum from NVMe
  std::map<Key, PinnedLoan> ckpt_host_;        // (checkpoint, mb): fp32
  std::map<int32_t, PinnedLoan> sg_master_, sg_m_, sg_v_;  // by sub-group, on the host
  // The optimizer's gradients and updated parameters on their way, by the buffer the Program says a
  // stage fills (Task::buffer) and the next one takes (Task::source), on the host or the device.
  std::map<int64_t, PinnedLoan> opt_host_;
  std::map<int64_t, DeviceBlock> opt_dev_;

  std::vector<CudaActivations> acts_;
};

}  // namespace zinf::engine::cuda
