// GptBackendBase is the device-independent half of a GPT training backend: what a task of a
// core::Program means, written once for every device. It dispatches each task to its kind's
// handler, keeps the shard layout (where this rank's part of a unit lies in its shard space), the
// bookkeeping of a step (losses, activation checkpoints saved and restored, the gradient norm and
// the clipping scale), the reduced-gradient accumulation on the host, and the optimizer state's
// flows in and out (load_state, gather_group, gather_state: a parameter group at a time, so host
// memory never holds the whole model). Built for a training step's Program, it runs forward-only
// Programs over the same units too (begin_forward: a held-out loss between steps); built for a
// forward-only Program, it keeps the parameters alone and runs forward passes only (sampling).
//
// A device derives from it and implements the device interface below (the pure virtual methods):
// where its memory lives (the device arena and the homes of the states), how the bytes of a task
// move (host <-> device copies, NVMe, collectives on its buffers) and the kernels it runs (the GPT
// operators, Adam). GptCpuBackend (engine/backend/cpu/gpt_cpu_backend.cpp) is the CPU device, GptCudaBackend
// (engine/backend/cuda/gpt_cuda_backend.cpp, in the CUDA plugin) the CUDA one; the plugin carries its own
// copy of this base (it links zinf_engine), so the plugin boundary stays a C function table.
//
// Threading: run() is called concurrently from the Executor's lane threads; every handler it calls
// runs on the task's lane thread, and the base's shared state is guarded by `mu` (which a device may
// take for its own maps too). The other methods are called between steps from one thread.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "engine/storage.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/backend/activation_offload.hpp"
#include "engine/backend/gpt_program_index.hpp"
#include "engine/backend/training_backend.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/model/gpt2.hpp"
#include "engine/optim/cpu_adam.hpp"

namespace zinf::engine {

struct GptBackendOptions {
  std::string nvme_dir;          // this rank's directory for NVMe tiers; required when a state lives on NVMe
  unsigned adam_threads = 1;
  core::RunConfig config;        // optimizer hyper-parameters, aio settings, clipping
  // The gradient norm's all-reduce: every rank that holds a part of the gradients, data- and
  // tensor-parallel (the job's world). Null: the backend's own (data-parallel) collectives.
  Collectives* norm_comm = nullptr;
};

// The bytes of a device's arena: the Program's device budget (the hwprofile's device memory less its
// reserve, or --device-memory's), refused, naming both and the fix, when `device` (for the message)
// has less than that free.
uint64_t device_arena_bytes(const core::Program& program, uint64_t device_free, const std::string& device);

class GptBackendBase : public TrainingBackend, protected ActivationDevice {
public:
  // `device_name` names the backend in error messages ("CPU", "CUDA"). The plan is read here, and in
  // a device's constructor, only to set up the homes (which tier each state lives on); the backend
  // keeps no reference to it: every task it runs is read off the Program.
  GptBackendBase(const core::Program& program, const core::Plan& plan, const core::ModelGraph& graph, int rank,
                 Collectives& comm, GptBackendOptions options, const char* device_name);
  ~GptBackendBase() override;

  // ---- TrainingBackend, once for every device ------------------------------------------------
  void begin_step(int64_t step, std::vector<Batch> batches) final;
  void begin_forward(const core::Program& forward, std::vector<Batch> batches, int64_t keep_logits_of) final;
  const std::vector<float>& kept_logits() const final { return kept_logits_; }
  void set_step_rates(const core::StepRates& rates) final;
  void run(const core::Task& task) final;
  std::vector<core::TaskWait> waits(const core::Program& program) const final;
  double loss() const final;
  double grad_norm() const final { return global_norm_; }
  std::optional<LocalGradCheck> local_grad_check() const override;
  void set_loss_scale(double scale) final;
  bool step_skipped() const final { return overflow_; }
  FullState gather_state() final;
  void load_state(const FullState& s) final;
  bool streams_state() const final { return true; }
  void gather_group(int32_t group, StateTensor which, std::vector<float>& out) final;
  void load_state(const GroupReader& master, const GroupReader& m, const GroupReader& v) final;

protected:
  // ---- the device interface -------------------------------------------------------------------
  // Called first on a thread that is about to call the device (a lane's task, a step's start, the
  // state's flows): a device bound per thread (CUDA's current device) binds it here.
  virtual void bind_thread() {}
  // A step's micro-batches, after the base checked their count and reset its own bookkeeping.
  virtual void start_step(std::vector<Batch>& batches) = 0;
  // The handlers, one per kind of data a task moves; each reads only the Program's task.
  virtual void compute(const core::Task& t) = 0;           // Forward, Recompute, Backward
  // An all-reduce over the tensor-parallel group on the compute lane (Data::Activation); a backend
  // that trains tensor_parallel 1 only is never given one.
  virtual void tensor_parallel_all_reduce(const core::Task&) {
    throw std::logic_error("this backend trains with tensor_parallel 1 only, but the Program holds a tensor-parallel "
                           "all-reduce");
  }
  virtual void fetch(const core::Task& t) = 0;             // a parameter fetch stage (Data::Param, not optimizer)
  virtual void checkpoint(const core::Task& t) = 0;        // Data::Checkpoint
  virtual void gradient(const core::Task& t) = 0;          // Data::Grad outside the optimizer phase
  virtual void optimizer(const core::Task& t) = 0;         // the optimizer phase's tasks
  // Drops the gathered parameters of Program buffer `buffer` (a Program free).
  virtual void drop_gathered(int64_t buffer) = 0;
  // This rank's home of one optimizer state: n elements at `off` of its shard space to host memory
  // `dst` and back. The host buffers hold core::shard_aligned(n) elements (a home on NVMe moves the
  // padded span); with `params_too` (the master weights) the parameters' home gets them too,
  // rounded to the run's precision.
  virtual void read_state(StateTensor which, int64_t off, int64_t n, float* dst) = 0;
  virtual void write_state(int64_t off, int64_t n, StateTensor which, const float* src, bool params_too) = 0;
  // Data::Activation tasks (an offloaded segment) and the tensors recomputed per tensor are the
  // base's ActivationOffloader: the device implements ActivationDevice (its tensors and copies).

  // ---- what the handlers share ------------------------------------------------------------------
  const core::ParamUnit& unit(int32_t u) const { return P->units()[size_t(u)]; }
  // Where this rank's part of unit u lies in its shard space, and how many elements it holds.
  int64_t mine_offset(const core::ParamUnit& u) const { return owner_based ? u.owner_offset : u.shard_offset; }
  int64_t mine_count(const core::ParamUnit& u) const { return owner_based ? u.numel : u.shard_numel; }
  bool holds(const core::ParamUnit& u) const { return !owner_based || u.owner == rank; }
  // Elements of a unit's whole gradient buffer: the unit (owner-based, reduced to its owner), or
  // padded to `ranks` equal shards, as the reduce-scatter takes it.
  int64_t grad_buffer_count(const core::ParamUnit& u) const {
    return owner_based ? u.numel : u.shard_numel * int64_t(P->data_parallel());
  }
  // Whether the plan puts any state this backend keeps (or an activation segment) on NVMe: set-up
  // (the NVMe store the homes need).
  bool uses_nvme(const core::Plan& plan) const;
  // Refuses a task that reads or writes a state's home (no staged buffer: Task::source or
  // Task::buffer -1) where that home is not on the tier the task states it moves from or to: the
  // Program would have the device move data no task states.
  void require_home(const core::Task& t, core::Tier home, core::Tier stated, const char* what) const;
  // Whether the backend keeps gradients and optimizer states (built for a training step's Program),
  // or the parameters alone (built for a forward-only one).
  bool trains() const { return !built_for_.forward_only(); }

  // The units a compute task's operator reads, one per parameter group: the group's unit, or the
  // tile the task runs (the Program's Task::tile, of unit t.unit).
  std::vector<int32_t> compute_units(const core::Task& t) const;
  // The tile a compute task runs, or -1.
  int32_t tiled_unit(const core::Task& t) const { return t.tile >= 0 ? t.unit : -1; }
  // Whether `t` is its micro-batch's first backward, or the last forward of a checkpointed run.
  bool first_backward(const core::Task& t) const;
  bool ends_run_forward(const core::Task& t) const { return index.last_forward_of_run.count(t.id) > 0; }
  // The Program buffers that may hold the gathered unit u that compute task t reads: those of the
  // all-gathers and broadcasts of u it depends on, in dependency order.
  std::vector<int64_t> gathered_buffers(const core::Task& t, int32_t u) const;
  // Drops every gathered buffer the Program frees at task t.
  void release(const core::Task& t);
  // Before a micro-batch's backward with offloaded checkpoints: fails unless every checkpoint copy
  // of the micro-batch is done (the Program makes this task depend on them), and calls `drop` with
  // the first block of each checkpoint that may leave the device (those not brought back already).
  // `drop` runs under the backend's lock, as checkpoint_restored's `write` does: a restore on the
  // host-to-device lane cannot land between the choice and the drop (and be dropped).
  void drop_checkpoints(const core::Task& t, const std::function<void(int block)>& drop);
  // A checkpoint copy off the device is done; a checkpoint brought back to the device.
  void checkpoint_saved(int32_t mb) {
    std::lock_guard<std::mutex> lock(mu);
    ++ckpt_saved_[size_t(mb)];
  }
  // Brings checkpoint (c, mb) back: `write` (the copy onto the device) and the record run under the
  // backend's lock (see drop_checkpoints).
  void checkpoint_restored(int32_t c, int32_t mb, const std::function<void()>& write) {
    std::lock_guard<std::mutex> lock(mu);
    write();
    ckpt_restored_.insert({c, mb});
  }
  // After backward task t, what the Program frees of micro-batch activations `a`: after a block's
  // last backward its intermediates and their gradients, its input, its output and the output's
  // gradient (the next use of each is the next step, which allocates them zeroed); after ln_f's
  // backward (the last of its run) the head's tensors; after the embedding's the first block's
  // input and its gradient (after its last vocabulary tile's). So backward holds one run's
  // activations, not every block's. `Acts` is
  // a device's activations (Gpt2Activations, cuda::CudaActivations: the same members); `release`
  // frees one tensor.
  template <class Acts, class Release>
  void drop_after_backward(const core::Task& t, Acts& a, Release release) const {
    const core::Operator& op = graph.ops[size_t(t.op)];
    if (auto it = index.last_backward_of_block.find(t.id); it != index.last_backward_of_block.end()) {
      const size_t b = size_t(it->second);
      a.drop_block(int(b));
      for (auto* v : {&a.x[b], &a.x[b + 1], &a.dx[b + 1]}) release(*v);
    }
    if (op.block >= 0 || !index.last_backward_outside_blocks.count(t.id)) return;  // a tile before the last
    if (op.kind == core::OpKind::LayerNorm)
      for (auto* v : {&a.lnf, &a.lnf_mean, &a.lnf_rstd, &a.d_lnf, &a.logits, &a.losses}) release(*v);
    if (op.kind == core::OpKind::Embedding)
      for (auto* v : {&a.x[0], &a.dx[0]}) release(*v);
  }
  // In a forward-only Program, after task t: the intermediates and the input of the block whose
  // forward t ends go (its output is the next block's input). `Acts` and `release` as above.
  template <class Acts, class Release>
  void drop_after_forward(const core::Task& t, Acts& a, Release release) const {
    if (!P->forward_only()) return;
    if (auto it = index.last_forward_of_block.find(t.id); it != index.last_forward_of_block.end()) {
      a.drop_block(it->second);
      release(a.x[size_t(it->second)]);
    }
  }
  // In a forward-only Program, once the loss is final (after the loss's forward, or under tensor
  // parallelism its all-reduce): everything the micro-batch still holds goes, the last block's
  // output and the head's tensors.
  template <class Acts, class Release>
  void drop_head(Acts& a, Release release) const {
    for (auto* v : {&a.x[a.x.size() - 1], &a.lnf, &a.lnf_mean, &a.lnf_rstd, &a.logits, &a.losses}) release(*v);
  }
  // The token of micro-batch 0 whose logits begin_forward asked to keep (-1: none), and the keeping:
  // a device hands over the row (the whole vocabulary) from its logits before drop_head.
  int64_t keep_logits_of() const { return keep_logits_of_; }
  std::vector<float>& kept_logits_row() { return kept_logits_; }
  int checkpoint_first_block(int32_t c) const { return index.ckpt_first_block[size_t(c)]; }
  const std::vector<int>& checkpoint_blocks(int32_t c) const { return index.ckpt_blocks[size_t(c)]; }
  // Elements of one activation checkpoint (a block's input).
  int64_t checkpoint_numel() const { return graph.tokens * graph.spec.hidden; }
  // The NVMe store tensor of checkpoint (c, mb): created of `bytes` the first time, or (bytes 0)
  // one that must exist already.
  NvmeStore::TensorId checkpoint_tensor(int32_t c, int32_t mb, size_t bytes);

  // Drops the offloaded activations' host copies: a device whose host memory they borrow calls it
  // in its destructor (the base, and its offloader, outlive the device's members).
  void drop_activation_copies() { offloader_->clear(); }

  // Gradients are the mean over all ranks' micro-batches: scaled once, at the reduction, times fp16's
  // loss scale (set_loss_scale). Scaling the reduced fp32 gradient by the (power-of-two) loss scale
  // gives the values scaling the loss before backward would, as backward is linear in the loss and
  // computes in fp32; what the scale protects is the fp16 storage that follows.
  float grad_scale() const { return float(loss_scale_ / double(P->data_parallel() * P->micro_batches())); }
  // Whether this step's gradients overflowed their fp16 storage on some rank (known after the norm
  // task): the optimizer tasks then leave every state as it was.
  bool overflowed() const { return overflow_; }
  // Whether a gradient task's contribution is the step's first to its unit (it overwrites the home)
  // or its last (the gradient is complete): the Program's (Task::grad_first, grad_last), one per
  // micro-batch and operator that uses the unit.
  bool first_micro_batch(const core::Task& t) const { return t.grad_first; }
  bool last_micro_batch(const core::Task& t) const { return t.grad_last; }
  // Adds a reduced micro-batch gradient of this rank's part of unit u into the stored bf16 shard on
  // the host (the same rounding on every tier); after the last micro-batch its squares join the
  // gradient norm, those of elements every tensor-parallel rank holds (replicated_in_mine) 1/t each.
  template <class S>
  void accumulate_host(const core::ParamUnit& u, S* home, const S* partial, const float* add, int64_t n, bool first,
                       bool last);
  // The elements of this rank's part of unit u that the tensor-parallel group holds whole
  // (core::ParamGroup::tp_replicated), relative to the part's start; empty for tensor_parallel 1.
  std::pair<int64_t, int64_t> replicated_in_mine(const core::ParamUnit& u) const;
  void add_sumsq(double s) {
    std::lock_guard<std::mutex> lock(mu);
    sumsq_ += s;
  }
  // Master weights an update left NaN or infinite (a diverging run, a poisoned state): counted so
  // that the trainer stops before such weights reach a checkpoint.
  void count_nonfinite(const float* w, int64_t n);
  // The clipping scale of this step's gradients (1 until the norm task, or without clipping).
  double clip_scale() const { return clip_scale_; }
  // Gradients scaled by clip_scale() on the host, or `g` itself when there is nothing to scale.
  const bf16* clipped_host(const bf16* g, int64_t n, std::vector<bf16>& scratch) const;
  // Stored gradients as the optimizer reads them, in fp32: unscaled (fp16's loss scale divided out,
  // in fp32, where an unscaled gradient cannot underflow as it would in fp16) and clipped; `g`
  // itself when it is fp32 with nothing to scale.
  template <class S>
  const float* unscaled_host(const S* g, int64_t n, std::vector<float>& scratch) const;
  int64_t step() const { return step_; }
  // Adam's options for this step: the run config's, with the schedule's rates (set_step_rates).
  const AdamOptions& adam_options() const { return adam_options_; }
  void set_loss(int32_t mb, double l) { losses_[size_t(mb)] = l; }

  // Takes (moves out and erases) map[key], or throws naming what was not staged.
  template <class M, class K>
  typename M::mapped_type take(M& map, const K& key, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = map.find(key);
    if (it == map.end()) throw std::logic_error(what + " is not staged");
    auto out = std::move(it->second);
    map.erase(it);
    return out;
  }
  // The same, or an empty buffer when nothing is staged under `key`.
  template <class M, class K>
  typename M::mapped_type take_if(M& map, const K& key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = map.find(key);
    if (it == map.end()) return {};
    auto out = std::move(it->second);
    map.erase(it);
    return out;
  }
  // Puts `value` under `key`, replacing what was there.
  template <class M, class K, class V>
  void stage(M& map, const K& key, V&& value) {
    std::lock_guard<std::mutex> lock(mu);
    map.insert_or_assign(key, std::forward<V>(value));
  }

  // The Program the Executor runs now: the one the backend was built for, or between begin_forward
  // and the next begin_step a forward-only one over the same units; `index` is read off it.
  const core::Program* P;
  const core::ModelGraph& graph;
  const int rank;
  Collectives& comm;
  const GptBackendOptions opt;
  const bool owner_based;
  const int64_t space;  // elements of this rank's shard space
  GptProgramIndex index;
  std::mutex mu;
  // The NVMe store of this rank's tiers, when the plan puts anything on NVMe (uses_nvme()): made
  // before a device's homes and destroyed after them.
  std::unique_ptr<NvmeStore> store;

private:
  void norm_task(const core::Task& t);
  // Makes `program` the one the Executor runs (the built-for one, or a forward-only one).
  void use_program(const core::Program& program);
  // The bookkeeping a step or a forward pass starts from, then the device's start_step.
  void start(std::vector<Batch>& batches);

  const core::Program& built_for_;
  int64_t keep_logits_of_ = -1;
  std::vector<float> kept_logits_;
  void check_state(const Gpt2Params& p, const char* what, bool optional) const;

  std::unique_ptr<ActivationOffloader> offloader_;  // the Program's Data::Activation transfers

  std::vector<double> losses_;
  std::vector<int> ckpt_saved_;                          // per micro-batch: its checkpoint copies done
  std::set<std::pair<int32_t, int32_t>> ckpt_restored_;  // (checkpoint, mb) back on the device
  std::map<std::pair<int32_t, int32_t>, NvmeStore::TensorId> ckpt_nvme_;  // (checkpoint, mb) on NVMe
  int64_t step_ = 0;
  AdamOptions adam_options_;
  double sumsq_ = 0;  // this rank's part of the squared gradient norm
  std::atomic<int64_t> nonfinite_{0};
  double clip_scale_ = 1.0;
  double global_norm_ = 0;
  double loss_scale_ = 1.0;  // fp16's, for this step (set_loss_scale); 1 otherwise
  bool overflow_ = false;    // this step's gradients are not finite on some rank (fp16: skip it)
};

}  // namespace zinf::engine
