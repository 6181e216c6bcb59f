#include "engine/train/divergence.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace zinf::engine {
namespace {

double median(const std::deque<double>& values) {
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

DivergenceRule::DivergenceRule(int64_t vocab) : uniform_loss_(std::log(double(std::max<int64_t>(vocab, 2)))) {}

std::string DivergenceRule::check(double loss, double grad_norm, int64_t nonfinite_weights) {
  if (!std::isfinite(loss) || !std::isfinite(grad_norm) || nonfinite_weights > 0)
    return fmt::format("loss {}, gradient norm {}, {} master weights not finite after the update", loss, grad_norm,
                       nonfinite_weights);
  if (losses_.empty()) {
    if (loss > kFirstLossFactor * uniform_loss_)
      return fmt::format("loss {:.6g} is more than {:g} times the loss of a uniform guess over the vocabulary ({:.4g})",
                         loss, kFirstLossFactor, uniform_loss_);
  } else {
    const double ref = median(losses_), bound = std::max(kLossFactor * ref, uniform_loss_);
    if (loss > bound)
      return fmt::format("loss {:.6g} is above {:.4g} = max({:g} x {:.4g} (the median loss of the last {} step{}), "
                         "{:.4g} (the loss of a uniform guess))",
                         loss, bound, kLossFactor, ref, losses_.size(), losses_.size() == 1 ? "" : "s", uniform_loss_);
    const double gref = median(grad_norms_);
    if (gref > 0 && grad_norm > kGradNormFactor * gref)
      return fmt::format("gradient norm {:.6g} is more than {:g} times {:.4g}, the median gradient norm of the last {} "
                         "steps",
                         grad_norm, kGradNormFactor, gref, grad_norms_.size());
  }
  losses_.push_back(loss);
  grad_norms_.push_back(grad_norm);
  if (losses_.size() > size_t(kWindow)) {
    losses_.pop_front();
    grad_norms_.pop_front();
  }
  return "";
}

std::string DivergenceRule::check_skipped(double loss) {
  if (!std::isfinite(loss)) return fmt::format("loss {} not finite (a step skipped for an fp16 overflow)", loss);
  const double bound = losses_.empty() ? kFirstLossFactor * uniform_loss_ : std::max(kLossFactor * median(losses_), uniform_loss_);
  if (loss > bound)
    return fmt::format("loss {:.6g} is above {:.4g} (a step skipped for an fp16 overflow: its loss is judged alone)",
                       loss, bound);
  return "";
}

nlohmann::json DivergenceRule::to_json() const {
  return {{"losses", std::vector<double>(losses_.begin(), losses_.end())},
          {"grad_norms", std::vector<double>(grad_norms_.begin(), grad_norms_.end())}};
}

void DivergenceRule::from_json(const nlohmann::json& j, const std::string& file) {
  const auto bad = [&] {
    return std::runtime_error(fmt::format("checkpoint {}: field 'divergence' must hold two lists 'losses' and "
                                          "'grad_norms' of at most {} finite non-negative numbers, of equal length",
                                          file, kWindow));
  };
  if (!j.is_object() || !j.contains("losses") || !j.contains("grad_norms")) throw bad();
  const auto& l = j["losses"];
  const auto& g = j["grad_norms"];
  if (!l.is_array() || !g.is_array() || l.size() != g.size() || l.size() > size_t(kWindow)) throw bad();
  std::deque<double> losses, norms;
  for (size_t i = 0; i < l.size(); ++i) {
    if (!l[i].is_number() || !g[i].is_number()) throw bad();
    const double a = l[i].get<double>(), b = g[i].get<double>();
    if (!std::isfinite(a) || !std::isfinite(b) || a < 0 || b < 0) throw bad();
    losses.push_back(a);
    norms.push_back(b);
  }
  losses_ = std::move(losses);
  grad_norms_ = std::move(norms);
}

}  // namespace zinf::engine
