// GptCpuBackend is what each task of a core::Program means when it trains a GPT-2 on the CPU
// backend: parameter shards read from NVMe and copied to the "device" (a budgeted host arena on this
// backend), all-gathered into fp32 working copies, operators run forward / recomputed / backward,
// gradients reduce-scattered, accumulated over micro-batches as shards on their tier in the run's
// storage type S (bf16, fp16 or fp32: engine/storage.hpp; fp16 gradients carry the loss scale),
// activation checkpoints moved to host or NVMe and back, and optimizer sub-groups updated by CPU
// Adam with their fp32 master weights and moments read from and written back to their tier.
//
// It decides nothing (docs/DESIGN.md): which shard, tier, tile, buffer and order come from the Program;
// the backend only keeps the data each task names. It is the CPU device of GptBackendBase
// (engine/backend/gpt_backend_base.hpp), which holds the task logic every device shares; this class
// implements only the device interface: memory, copies, collectives on its buffers and kernels.
// One backend per rank; run() is called concurrently from the Executor's lane threads and is
// thread-safe; the other methods are called between steps from one thread. ZeRO stage 3 only:
// stages 0-2 keep whole parameters on every device, which this backend does not implement (the
// planner and the simulator do). make_gpt_cpu_backend picks S from the run config's precision.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "engine/backend/gpt_backend_base.hpp"
#include "engine/backend/cpu/cpu_home.hpp"
#include "engine/memory/cpu_device_arena.hpp"
#include "engine/optim/cpu_adam.hpp"

namespace zinf::engine {

template <class S>
class GptCpuBackendOf final : public GptBackendBase {
public:
  GptCpuBackendOf(const core::Program& program, const core::Plan& plan, const Gpt2& model, int rank, Collectives& comm,
                GptBackendOptions options);
  ~GptCpuBackendOf() override;

  // Bytes of the device arena (homes on the device, fetched and gathered parameters, gradients,
  // activations) at their peak since the last reset; the budget is the Program's device budget.
  int64_t device_peak_bytes() const override { return arena_.peak(); }
  void reset_device_peak() override { arena_.reset_peak(); }

private:
  using Key = std::pair<int32_t, int32_t>;

  void start_step(std::vector<Batch>& batches) override;
  void compute(const core::Task& t) override;
  void tensor_parallel_all_reduce(const core::Task& t) override;
  // Elements of a checkpoint this rank keeps off the device: all of them, or its slice when they
  // are partitioned over the tensor-parallel group.
  int64_t checkpoint_slice() const;
  void fetch(const core::Task& t) override;
  void checkpoint(const core::Task& t) override;
  void gradient(const core::Task& t) override;
  void optimizer(const core::Task& t) override;
  void drop_gathered(int64_t buffer) override;
  void read_state(StateTensor which, int64_t off, int64_t n, float* dst) override;
  void write_state(int64_t off, int64_t n, StateTensor which, const float* src, bool params_too) override;
  // ActivationDevice: the tensors are host arena vectors, the copies plain copies into staging memory.
  size_t activation_elements(int32_t mb, ActivationRef r) override { return tensor(mb, r).size(); }
  HostFloats activation_host(size_t n) override;
  void save_activations(const core::Task& t, std::span<const ActivationRef> refs, std::span<const size_t> sizes,
                        float* host) override;
  void restore_activations(const core::Task& t, std::span<const ActivationRef> refs, std::span<const size_t> sizes,
                           const float* host) override;
  void release_activation(int32_t mb, ActivationRef r) override { Gpt2Activations::release(tensor(mb, r)); }
  Activation& tensor(int32_t mb, ActivationRef r) { return saved_tensor(acts_[size_t(mb)].blocks.at(size_t(r.block)), r.tensor); }

  template <typename T>
  DeviceAllocator<T> device() {
    return DeviceAllocator<T>(&arena_);
  }
  Home<float>& state_home(StateTensor which) {
    return which == StateTensor::Master ? master_ : which == StateTensor::AdamM ? m_ : v_;
  }
  float* gathered_data(const core::Task& t);
  const DeviceVector<float>& gathered_for(const core::Task& t, int32_t u);
  DeviceVector<float>& grad_buffer(int32_t u, int32_t mb);
  void drop_run(int32_t c, int32_t mb, Gpt2Activations& a);
  void begin_backward(const core::Task& t);
  void reduce_task(const core::Task& t, const Key& key, int64_t off, int64_t n);
  void adam_step(const core::Task& t);
  void put(core::Tier tier, int64_t buffer, const S* src, int64_t n);
  // Adam over n elements from their stored gradients (or, on a skipped fp16 step, no update): the
  // parameters, the master weights rounded, into `out`.
  void update(const S* g, int64_t n, float* master, float* m, float* v, S* out);

  const Gpt2& model_;
  CpuAdam adam_;
  // Every device buffer below is drawn from (or, for homes, charged to) this rank's device arena,
  // whose budget is the Program's: it is declared first so that it outlives them.
  CpuDeviceArena arena_;
  Home<S> params_, grads_;
  Home<float> master_, m_, v_;

  // Transient data, keyed by what the Program names; the maps are guarded by mu, the vectors
  // touched only by the task that the Program orders after their producer. Fetch stages are keyed
  // by the buffer the Program says they fill (Task::buffer), and the next stage takes its Task::source
  // (two fetches of one unit may be in flight together: its forward and backward fetches when
  // gathered copies are not kept between them).
  std::map<int64_t, Staging<S>> host_param_;           // by buffer: the NVMe read's, on the host
  std::map<int64_t, DeviceVector<S>> dev_param_;       // by buffer: the host-to-device copy's, on the device
  std::map<int64_t, DeviceVector<float>> gathered_;       // by buffer id of the gathered unit
  std::map<Key, DeviceVector<float>> grad_full_;          // (unit, mb)
  std::map<Key, DeviceVector<float>> grad_shard_;         // (unit, mb): reduced, on the device
  std::map<Key, Staging<float>> grad_host_;               // (unit, mb): copied to the host for NVMe
  std::map<Key, Staging<S>> grad_partial_;             // (unit, mb): earlier mbs' sum from NVMe
  std::map<Key, Staging<float>> ckpt_host_;               // (checkpoint, mb)
  std::map<int32_t, Staging<float>> sg_master_, sg_m_, sg_v_;  // by sub-group
  // The optimizer's gradients and updated parameters on their way, by the buffer the Program says
  // a stage fills (Task::buffer) and the next one takes (Task::source), on the host or the device.
  std::map<int64_t, Staging<S>> opt_host_;
  std::map<int64_t, DeviceVector<S>> opt_dev_;
  // (checkpoint, mb) copied off the device, and whose run's forward is done: an offloaded
  // checkpoint leaves the device when both are (the Program frees it after its copy; its run's
  // forward, which reads it too, counts it among that run's activations).
  std::set<Key> ckpt_copied_, ckpt_forward_done_;

  std::vector<Gpt2Activations> acts_;
};

// bf16, the precision every GPU backend trains in and the tests' default.
using GptCpuBackend = GptCpuBackendOf<bf16>;
extern template class GptCpuBackendOf<bf16>;
extern template class GptCpuBackendOf<fp16>;
extern template class GptCpuBackendOf<float>;

// The CPU backend for the run config's precision (options.config.precision; unset: bf16).
std::unique_ptr<GptBackendBase> make_gpt_cpu_backend(const core::Program& program, const core::Plan& plan,
                                                     const Gpt2& model, int rank, Collectives& comm,
                                                     GptBackendOptions options);

}  // namespace zinf::engine
