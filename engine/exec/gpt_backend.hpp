// GptCpuBackend is what each task of a core::Program means when it trains a GPT-2 on the CPU
// backend: parameter shards read from NVMe and copied to the "device" (a budgeted host arena on this
// backend), all-gathered into fp32 working copies, operators run forward / recomputed / backward,
// gradients reduce-scattered, accumulated over micro-batches as bf16 shards on their tier,
// activation checkpoints moved to host or NVMe and back, and optimizer sub-groups updated by CPU
// Adam with their fp32 master weights and moments read from and written back to their tier.
//
// It decides nothing (docs/DESIGN.md): which shard, tier, tile, buffer and order come from the Program;
// the backend only keeps the data each task names. One backend per rank; run() is called
// concurrently from the Executor's lane threads and is thread-safe; the other methods are called
// between steps from one thread. ZeRO stage 3 only: stages 0-2 keep whole parameters on every
// device, which this backend does not implement (the planner and the simulator do).
#pragma once
#include <functional>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "engine/bf16.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/model/gpt2.hpp"
#include "engine/optim/cpu_adam.hpp"

namespace zinf::engine {

struct GptBackendOptions {
  std::string nvme_dir;          // this rank's directory for NVMe tiers; required when a state lives on NVMe
  unsigned adam_threads = 1;
  core::RunConfig config;        // optimizer hyper-parameters, aio settings, clipping
};

class GptCpuBackend final : public TaskBackend {
public:
  GptCpuBackend(const core::Program& program, const core::Plan& plan, const Gpt2& model, int rank, Collectives& comm,
                GptBackendOptions options);
  ~GptCpuBackend() override;

  // Scatters full fp32 parameters (one tensor per parameter group) into this rank's homes: bf16
  // shards on the params tier, fp32 master weights on the optimizer tier, zero moments.
  void initialize(const Gpt2Params& params) { load_state({params, {}, {}}); }

  // Supplies one parameter group's full fp32 tensor; called once per group, in group order.
  using GroupReader = std::function<void(int32_t group, std::vector<float>& out)>;
  // initialize and load_state a group and a state at a time: host memory holds one group's tensor
  // and one unit's shard of it, never the model (a model larger than RAM starts from NVMe this
  // way). The readers are called per group in the order master, m, v: a checkpoint's order.
  void initialize(const GroupReader& params) { load_state(params, {}, {}); }

  // Before each step: the step number (1-based, for Adam's bias correction) and this rank's
  // micro-batches, one per micro-batch of the Program.
  void begin_step(int64_t step, std::vector<Batch> batches);
  void run(const core::Task& task) override;
  // Mean loss of this rank's micro-batches in the last step.
  double loss() const;
  // Global gradient norm before clipping, when the Program computed one (grad_clip > 0).
  double grad_norm() const { return grad_norm_; }
  // This rank's part of the squared global gradient norm (after the last micro-batch), computed
  // with or without clipping; and how many of this rank's master weights the last step's updates
  // left NaN or infinite. The trainer sums both over ranks to stop a diverging run.
  double local_grad_sumsq() const;
  int64_t nonfinite_weights() const;
  // Bytes of the device arena (homes on the device, fetched and gathered parameters, gradients,
  // activations) at their peak since the last reset; the budget is the Program's device budget.
  int64_t device_peak_bytes() const;
  void reset_device_peak();

  // The optimizer state of the whole model, one fp32 tensor per parameter group (the layout of
  // Gpt2Params): master weights and Adam moments. The bf16 parameters are the master weights
  // rounded, as every optimizer step writes them.
  struct FullState {
    Gpt2Params master, m, v;
  };
  // Assembles the full state from every rank's shards (a collective: every rank calls it).
  FullState gather_state();

  // The same a group at a time (a checkpoint of a model larger than RAM is written this way).
  // Collective: every rank makes the same calls in the same order, and every rank gets the tensor.
  // Group `group`'s full fp32 tensor of one state is put together in `out` from every rank's
  // shards, read unit by unit from their tier: host memory holds that tensor and one unit's shard,
  // never the model.
  enum class StateTensor { Master, AdamM, AdamV };
  void gather_group(int32_t group, StateTensor which, std::vector<float>& out);
  // Takes this rank's shards of a full state (any rank count wrote it: this is how a checkpoint
  // is re-sharded). `m` and `v` may be empty for a fresh start.
  void load_state(const FullState& s);
  // The same, streamed: `m` and `v` may be empty (zero moments).
  void load_state(const GroupReader& master, const GroupReader& m, const GroupReader& v);

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
  double grad_norm_ = 0;
};

}  // namespace zinf::engine
