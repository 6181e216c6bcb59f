// TrainingBackend is what the trainer needs of a backend that trains a GPT through a Program: the
// tasks (TaskBackend::run, called by the Executor), and between steps the step's inputs, its loss
// and gradient norm, the device arena's peak, and the optimizer state in and out. GptBackendBase
// (engine/backend/gpt_backend_base.hpp) implements it once for every device: the CPU one
// (engine/backend/cpu/gpt_cpu_backend.hpp) and the CUDA one (engine/backend/cuda/gpt_cuda_backend.hpp, loaded from the
// CUDA plugin: engine/backend/cuda_plugin.hpp); the trainer holds one through this interface and never
// names either. run() may be called concurrently from the Executor's lanes;
// the other methods are called between steps from one thread.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/lr_schedule.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/model/gpt2.hpp"

namespace zinf::engine {

class TrainingBackend : public TaskBackend {
public:
  // The optimizer state of the whole model, one fp32 tensor per parameter group (the layout of
  // Gpt2Params): master weights and Adam moments. The parameters (bf16, fp16 or fp32) are the
  // master weights rounded, as every optimizer step writes them.
  struct FullState {
    Gpt2Params master, m, v;
  };
  // Supplies one parameter group's full fp32 tensor; called once per group, in group order.
  using GroupReader = std::function<void(int32_t group, std::vector<float>& out)>;
  enum class StateTensor { Master, AdamM, AdamV };
  // This rank's part of the squared global gradient norm, and how many of its master weights the
  // last update left NaN or infinite; the trainer sums both over ranks to stop a diverging run.
  struct LocalGradCheck {
    double sumsq = 0;
    int64_t nonfinite = 0;
  };

  // Scatters full fp32 parameters (one tensor per group) into this rank's homes, zero moments.
  void initialize(const Gpt2Params& params) { load_state(FullState{params, {}, {}}); }

  // Before each step: the step number (1-based, for Adam's bias correction) and this rank's
  // micro-batches, one per micro-batch of the Program.
  virtual void begin_step(int64_t step, std::vector<Batch> batches) = 0;
  // Before a forward pass instead of a step: the Executor then runs `forward`, a forward-only Program
  // (core::make_forward_plan) over the same units as the backend's own, on this rank's micro-batches,
  // one per micro-batch of `forward`; until the next begin_step. After it, loss() is their mean loss,
  // and when keep_logits_of >= 0, kept_logits() holds the logits of that token of micro-batch 0 (its
  // index among the micro-batch's micro_batch x seq tokens), one per vocabulary entry.
  virtual void begin_forward(const core::Program& forward, std::vector<Batch> batches, int64_t keep_logits_of = -1) = 0;
  virtual const std::vector<float>& kept_logits() const = 0;
  // The optimizer's learning rate and betas for the steps from the next begin_step on (the run's
  // schedule, core/lr_schedule.hpp); until called, the run config's.
  virtual void set_step_rates(const core::StepRates& rates) = 0;
  // Mean loss of this rank's micro-batches in the last step (or forward pass).
  virtual double loss() const = 0;
  // Global gradient norm before clipping, when the Program computed one (grad_clip > 0).
  virtual double grad_norm() const = 0;
  // The last step's LocalGradCheck, for a backend that computes it (otherwise the trainer uses
  // grad_norm() and cannot count non-finite weights).
  virtual std::optional<LocalGradCheck> local_grad_check() const { return std::nullopt; }
  // fp16 mixed precision: the loss scale of the next steps (the trainer's LossScaler), by which the
  // stored gradients are scaled; a backend that runs bf16 alone refuses any scale but 1.
  virtual void set_loss_scale(double scale) {
    if (scale != 1.0) throw std::logic_error("this backend trains without a loss scale (bf16)");
  }
  // Whether the last step's gradients were not finite on some rank under a loss scale, so that its
  // optimizer step left every state unchanged (DeepSpeed's skipped fp16 step).
  virtual bool step_skipped() const { return false; }
  // Bytes of the device arena at their peak since the last reset_device_peak().
  virtual int64_t device_peak_bytes() const = 0;
  virtual void reset_device_peak() = 0;

  // Assembles the full state from every rank's shards (a collective: every rank calls it).
  virtual FullState gather_state() = 0;
  // Takes this rank's shards of a full state (any rank count wrote it: this is how a checkpoint is
  // re-sharded). `m` and `v` may be empty for a fresh start.
  virtual void load_state(const FullState& s) = 0;

  // Whether the state also moves a parameter group at a time (gather_group and the streamed
  // load_state), so that host memory never holds the whole model. A backend without it gets the
  // whole-state calls above from the trainer instead, and these two throw.
  virtual bool streams_state() const { return false; }
  // Group `group`'s full fp32 tensor of one state, put together from every rank's shards (a
  // collective: every rank makes the same calls in the same order).
  virtual void gather_group(int32_t group, StateTensor which, std::vector<float>& out);
  // load_state a group at a time; the readers are called per group in the order master, m, v (a
  // checkpoint's order); `m` and `v` may be empty (zero moments).
  virtual void load_state(const GroupReader& master, const GroupReader& m, const GroupReader& v);
  void initialize(const GroupReader& params) { load_state(params, {}, {}); }
};

}  // namespace zinf::engine
