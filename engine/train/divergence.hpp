// DivergenceRule decides whether a training step's figures say the run has diverged, against a
// running reference of the steps before it. The rule, stated once here and in the README:
//
//   A step diverges when its loss or global gradient norm is not finite, or any master weight is
//   not finite after its update; or when its loss exceeds max(10 x the median loss of the last 16
//   accepted steps, ln(vocab)), or 10 x ln(vocab) when no step has been accepted yet (ln(vocab)
//   is the loss of a uniform guess); or when its gradient norm exceeds 1000 x the median gradient
//   norm of the last 16 accepted steps.
//
// A loss that explodes while finite (lr 1e6: 5.5, then 1.4e13) is caught at the first step whose
// forward pass sees the exploded weights; gradient-norm spikes of 10-100x, common in healthy runs,
// pass. An fp16 step skipped for an overflowing loss scale is no divergence (check_skipped). The window travels with the checkpoint, so a resumed run judges its first step as the
// uninterrupted run would have. One object per Trainer; not thread-safe.
#pragma once
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>

namespace zinf::engine {

class DivergenceRule {
public:
  static constexpr int kWindow = 16;
  static constexpr double kLossFactor = 10;
  static constexpr double kFirstLossFactor = 10;  // x ln(vocab), before any step is accepted
  static constexpr double kGradNormFactor = 1000;

  explicit DivergenceRule(int64_t vocab);

  // "" when the step passes (its figures then join the window), else what broke the rule, with
  // the figures and the reference it was held to.
  std::string check(double loss, double grad_norm, int64_t nonfinite_weights);
  // The same for a step fp16 skipped because its scaled gradients overflowed: its loss (computed
  // from the weights before it, in fp32) is held to the rule; its gradient norm, not finite by
  // design, is not, and nothing joins the window, as the weights did not change.
  std::string check_skipped(double loss);

  // The window, for a checkpoint's meta.json, and back; from_json refuses (std::runtime_error
  // naming `file`) anything but two lists of at most kWindow finite non-negative numbers.
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j, const std::string& file);

private:
  double uniform_loss_;  // ln(vocab)
  std::deque<double> losses_, grad_norms_;
};

}  // namespace zinf::engine
