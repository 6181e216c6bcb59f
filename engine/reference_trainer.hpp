// The plain, non-offloaded training loop: every parameter resident as an fp32 master copy, a
// whole-model forward and backward per micro-batch, and AdamW written out in plain loops. It is the
// reference that offloaded, tiled and partitioned training is compared against step by step, so it
// favours clarity over speed. A ReferenceTrainer owns all its tensors; use it from one thread.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/graph.hpp"
#include "core/run_config.hpp"
#include "engine/data/token_data.hpp"
#include "engine/model/gpt2.hpp"
#include "engine/train/loss_scaler.hpp"

namespace zinf::engine {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // decoupled (AdamW), applied to every element alike
};

// One AdamW update of one tensor, as PyTorch's AdamW: p -= lr * wd * p, then
// p -= lr * m_hat / (sqrt(v_hat) + eps) with bias-corrected moments; `step` counts from 1.
void adamw_reference(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWConfig& cfg,
                     int64_t step);

struct ReferenceTrainerConfig {
  AdamWConfig adam;
  // The precision as the engine runs it. bf16 and fp16: the model computes on fp32 copies of 16-bit
  // parameters, and the step's gradient (the sum of each micro-batch's gradient times 1/n, in fp16
  // times the loss scale too) is stored in 16 bits after each addition, before the fp32 optimizer
  // reads it (unscaled). fp32: nothing is rounded.
  core::Precision precision = core::Precision::Bf16;
  // fp16's loss scale (engine/train/loss_scaler.hpp): an overflowing step is skipped, as the
  // engine's is.
  core::LossScaleConfig loss_scaling;
  KernelImpl kernels = KernelImpl::Fast;
  uint64_t init_seed = 1;
};

class ReferenceTrainer {
 public:
  ReferenceTrainer(core::ModelGraph graph, ReferenceTrainerConfig cfg);  // GPT-2 init from cfg.init_seed
  ReferenceTrainer(core::ModelGraph graph, ReferenceTrainerConfig cfg, Gpt2Params initial);

  // One optimizer step over these micro-batches (all ranks' and accumulation steps' together):
  // gradients are averaged over them. Returns their mean loss, measured before the update.
  double step(std::span<const Batch> micro_batches);
  // The rates of the next steps (a learning-rate schedule's, core/lr_schedule.hpp).
  void set_rates(double lr, double beta1, double beta2) {
    cfg_.adam.lr = lr;
    cfg_.adam.beta1 = beta1;
    cfg_.adam.beta2 = beta2;
  }
  // `steps` steps of `micro_batches` batches each from one loader; returns the per-step losses.
  std::vector<double> train(BatchLoader& loader, int64_t steps, int64_t micro_batches = 1);

  const Gpt2& model() const { return model_; }
  const Gpt2Params& master() const { return master_; }  // fp32 master weights
  const Gpt2Params& grads() const { return grads_; }    // the last step's averaged gradient
  int64_t steps() const { return step_; }  // updates made (fp16: steps not skipped)
  const LossScaler& scaler() const { return scaler_; }
  bool last_skipped() const { return last_skipped_; }

 private:
  Gpt2 model_;
  ReferenceTrainerConfig cfg_;
  Gpt2Params master_, working_, grads_, mb_grads_, m_, v_;
  Gpt2Activations acts_;
  int64_t step_ = 0;
  LossScaler scaler_;  // consulted in fp16 only
  bool last_skipped_ = false;
};

}  // namespace zinf::engine
