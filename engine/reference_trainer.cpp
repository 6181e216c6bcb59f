#include "engine/reference_trainer.hpp"

#include <cmath>
#include <stdexcept>

#include "engine/backend/cpu/convert.hpp"
#include "engine/storage.hpp"

namespace zinf::engine {

void adamw_reference(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWConfig& cfg,
                     int64_t step) {
  const double c1 = 1.0 - std::pow(cfg.beta1, double(step));
  const double c2 = 1.0 - std::pow(cfg.beta2, double(step));
  for (int64_t i = 0; i < n; ++i) {
    const double g = grad[i];
    m[i] = float(cfg.beta1 * m[i] + (1.0 - cfg.beta1) * g);
    v[i] = float(cfg.beta2 * v[i] + (1.0 - cfg.beta2) * g * g);
    double p = double(param[i]) * (1.0 - cfg.lr * cfg.weight_decay);
    p -= cfg.lr * (double(m[i]) / c1) / (std::sqrt(double(v[i]) / c2) + cfg.eps);
    param[i] = float(p);
  }
}

ReferenceTrainer::ReferenceTrainer(core::ModelGraph graph, ReferenceTrainerConfig cfg)
    : ReferenceTrainer(graph, cfg, Gpt2(graph).init_params(cfg.init_seed)) {}

ReferenceTrainer::ReferenceTrainer(core::ModelGraph graph, ReferenceTrainerConfig cfg, Gpt2Params initial)
    : model_(std::move(graph), cfg.kernels), cfg_(cfg), master_(std::move(initial)), scaler_(cfg.loss_scaling) {
  const Gpt2Params z = model_.zeros();
  if (master_.size() != z.size()) throw std::invalid_argument("reference trainer: wrong number of parameter groups");
  for (size_t g = 0; g < z.size(); ++g)
    if (master_[g].size() != z[g].size())
      throw std::invalid_argument("reference trainer: parameter group " + model_.graph().params[g].name +
                                  " has the wrong size");
  working_ = master_;
  grads_ = mb_grads_ = m_ = v_ = z;
  acts_ = model_.make_activations();
}

double ReferenceTrainer::step(std::span<const Batch> micro_batches) {
  if (micro_batches.empty()) throw std::invalid_argument("reference trainer: a step needs at least one micro-batch");
  using core::Precision;
  const Precision precision = cfg_.precision;
  // The stored form's rounding of n floats in place: bf16, fp16 or none.
  const auto store = [precision](float* x, size_t n) {
    if (precision == Precision::Bf16) cpu::round_to<bf16>(x, int64_t(n));
    if (precision == Precision::Fp16) cpu::round_to<fp16>(x, int64_t(n));
  };
  const double scale = precision == Precision::Fp16 ? scaler_.scale() : 1.0;
  working_ = master_;
  for (auto& w : working_) store(w.data(), w.size());
  for (auto& g : grads_) std::fill(g.begin(), g.end(), 0.0f);

  // Each micro-batch's gradient is scaled by 1/n and added to the step's gradient, which (in bf16
  // mode) is stored as bf16 after every addition: the arithmetic of the engine's accumulation. A
  // group two operators read (the tied embedding and LM head) adds one contribution per operator, in
  // the order their backward runs (the head's, then the embedding's), as the engine reduces them.
  double loss = 0;
  const float inv = float(scale / double(micro_batches.size()));
  const auto& ops = model_.graph().ops;
  for (const Batch& b : micro_batches) {
    model_.set_batch(acts_, b.inputs, b.targets);
    loss += model_.forward(working_, acts_);
    acts_.zero_grads();
    for (auto it = ops.rbegin(); it != ops.rend(); ++it) {
      if (!it->backward) continue;
      std::vector<ParamBuf> p;
      std::vector<GradBuf> g;
      for (int gi : it->param_groups) {
        auto& mg = mb_grads_[size_t(gi)];
        std::fill(mg.begin(), mg.end(), 0.0f);
        p.push_back({working_[size_t(gi)].data(), int64_t(working_[size_t(gi)].size())});
        g.push_back({mg.data(), int64_t(mg.size())});
      }
      model_.backward(it->id, p, g, acts_);
      for (int gi : it->param_groups) {
        float* acc = grads_[size_t(gi)].data();
        const float* add = mb_grads_[size_t(gi)].data();
        const size_t n = grads_[size_t(gi)].size();
        for (size_t j = 0; j < n; ++j) acc[j] += add[j] * inv;
        store(acc, n);
      }
    }
  }

  loss /= double(micro_batches.size());
  last_skipped_ = false;
  if (precision == Precision::Fp16) {
    // An overflow of the stored (scaled) gradient skips the update; otherwise it is unscaled in fp32.
    for (const auto& g : grads_)
      for (float x : g) last_skipped_ = last_skipped_ || !std::isfinite(x);
    scaler_.update(last_skipped_);
    if (last_skipped_) return loss;
    const float unscale = float(1.0 / scale);
    for (auto& g : grads_)
      for (float& x : g) x *= unscale;
  }
  ++step_;
  for (size_t i = 0; i < master_.size(); ++i)
    adamw_reference(master_[i].data(), grads_[i].data(), m_[i].data(), v_[i].data(), int64_t(master_[i].size()),
                    cfg_.adam, step_);
  return loss;
}

std::vector<double> ReferenceTrainer::train(BatchLoader& loader, int64_t steps, int64_t micro_batches) {
  std::vector<double> losses;
  std::vector<Batch> batches(static_cast<size_t>(micro_batches));
  for (int64_t s = 0; s < steps; ++s) {
    for (auto& b : batches) b = loader.next();
    losses.push_back(step(batches));
  }
  return losses;
}

}  // namespace zinf::engine
