#include "measure/calibration.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/plan.hpp"
#include "core/validation.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"

namespace zinf::sim {

RankSkewFit fit_rank_skew(const core::HwProfile& one_rank_hw, const std::vector<SkewCase>& cases, int ranks) {
  if (cases.empty()) throw std::invalid_argument("fit_rank_skew: no calibration cases");
  RankSkewFit fit;
  fit.ranks = ranks;
  for (const auto& c : cases) fit.measured.push_back(c.measured);
  // The cases' simulated steps at skew k, and the mean of their relative errors.
  auto steps = [&](double k) {
    core::HwProfile h = one_rank_hw;
    h.node.rank_skew.points = {{double(ranks), k}};
    h = core::colocate(h, ranks);
    std::vector<double> out;
    for (const auto& c : cases) {
      const auto planned = core::make_plan(*c.graph, h, c.config, ranks);
      SimOptions so;
      so.fold_symmetric_nodes = false;
      ++fit.simulations;
      out.push_back(std::stod(run_isolated([&] { return fmt::format("{:.17g}", simulate(planned.program, h, so).step_time); })));
    }
    return out;
  };
  auto error = [&](const std::vector<double>& s) {
    double e = 0;
    for (size_t c = 0; c < cases.size(); ++c) e += (s[c] - cases[c].measured) / cases[c].measured;
    return e / double(cases.size());
  };
  fit.without = fit.fitted = steps(0);
  double lo = 0, hi = 10, e_lo = error(fit.without);
  if (e_lo >= 0) return fit;
  auto at_hi = steps(hi);
  double e_hi = error(at_hi);
  if (e_hi <= 0) {
    fit.skew = hi;
    fit.fitted = at_hi;
    return fit;
  }
  int side = 0;  // which end moved last; the other end's error is halved when the same end moves twice
  for (int i = 0; i < 30; ++i) {
    const double k = (lo * e_hi - hi * e_lo) / (e_hi - e_lo);
    const auto s = steps(k);
    const double e = error(s);
    fit.skew = k;
    fit.fitted = s;
    if (std::abs(e) <= 0.002 || hi - lo < 1e-4) break;
    if (e < 0) {
      lo = k, e_lo = e;
      if (side == -1) e_hi /= 2;
      side = -1;
    } else {
      hi = k, e_hi = e;
      if (side == 1) e_lo /= 2;
      side = 1;
    }
  }
  return fit;
}

}  // namespace zinf::sim
