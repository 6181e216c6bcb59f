// The arithmetic of `zinf validate`: what a measured run and a predicted one are compared on.
// Step times are summarized over steps after a warm-up (median and spread); lane busy time is the
// sum of a lane's task durations in one step, averaged over the ranks a Timeline holds; the error
// of a prediction is (predicted - measured) / measured. `colocate` describes N ranks that share
// one profiled machine. Pure functions on value types; thread-safe.
#pragma once
#include <array>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"

namespace zinf::core {

struct StepSummary {
  double median = 0;
  double min = 0;
  double max = 0;
  int steps = 0;  // steps summarized (after the skipped ones)
};

// Median, min and max of `seconds` after dropping the first `skip` entries (warm-up); with no
// entries left, of all of them. Throws std::invalid_argument when `seconds` is empty.
StepSummary summarize_steps(const std::vector<double>& seconds, int skip = 1);

// Seconds each lane was busy in the Timeline (sum of its events' durations), averaged over the
// distinct ranks that appear in it; indexed by Lane.
using LaneSeconds = std::array<double, kLaneCount>;
LaneSeconds lane_busy(const Timeline& timeline);

// Element-wise median of per-step lane busy times.
LaneSeconds median_lane_busy(const std::vector<LaneSeconds>& steps);

// (predicted - measured) / measured; 0 when both are 0, +inf when only measured is 0.
double relative_error(double predicted, double measured);

// Median and largest absolute relative error over a suite.
struct ErrorSummary {
  double median_abs = 0;
  double max_abs = 0;
};
ErrorSummary summarize_errors(const std::vector<double>& errors);

// `ranks` processes on the one machine `hw` describes (a profile with one "GPU": the CPU backend's
// arena): one node with a GPU per rank. Each rank's compute gets min(1, cores / ranks) of the
// profiled rate (one core per rank when there are enough, time-shared when there are not); CPU
// Adam runs on min(ranks, cores) cores of the node; the disk, host memory and copy paths stay the
// node's and are shared in the simulation. A profile whose device shares the host's cores keeps
// its one-thread rates: the simulator shares the core pool among the ranks' threads itself.
// `ranks == 1` returns `hw` unchanged.
HwProfile colocate(const HwProfile& hw, int ranks);

}  // namespace zinf::core
