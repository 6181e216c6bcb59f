#pragma once
// Fitting a profile's figures to measured training steps, by simulating the same Programs.
#include <vector>

#include "core/graph.hpp"
#include "core/hwprofile.hpp"
#include "core/run_config.hpp"

namespace zinf::sim {

// One calibration run: a model and config trained on N ranks, and its measured step.
struct SkewCase {
  const core::ModelGraph* graph = nullptr;
  core::RunConfig config;
  double measured = 0;  // seconds per step
};

struct RankSkewFit {
  int ranks = 0;
  double skew = 0;               // rank_skew at `ranks`: seconds per second of compute since the last collective
  std::vector<double> measured;  // each case's measured step, seconds
  std::vector<double> without;   // each case's simulated step without skew, seconds
  std::vector<double> fitted;    // each case's simulated step with the fitted skew, seconds
  int simulations = 0;
};

// The rank_skew value in [0, 10] for `ranks` ranks of `one_rank_hw` (colocated, as `zinf validate`
// does) at which the cases' simulated steps match their measured ones: the mean of their relative
// errors is zero (to 0.2 %). The simulated steps grow with the skew, though not strictly (a late
// collective can let other work go first), so the search is bracketed (Illinois regula falsi) and
// ends at a skew that matches, not necessarily the only one: 0 when the steps without skew are
// already as slow as measured, 10 when even that is too fast. Each simulation runs in a child process (run_isolated).
RankSkewFit fit_rank_skew(const core::HwProfile& one_rank_hw, const std::vector<SkewCase>& cases, int ranks);

}  // namespace zinf::sim
