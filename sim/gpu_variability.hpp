// GPU-to-GPU variability as the simulator draws it. Identical GPUs sustain different rates
// (manufacturing spread and power management), and a job whose ranks meet at every collective
// waits each time for the slowest of them. The hwprofile gives the distribution of one GPU's kernel
// time over the median GPU's (GpuSpec::variability_*): a normal core, whose whisker range (4 IQR)
// over the median is the spread, plus a uniform tail of outliers beyond the upper whisker.
//
// A rank's factor depends on (seed, rank) only, not on how many ranks there are, so that a folded
// simulation (node 0 for all nodes) can take the slowest of the very draws an unfolded one would
// use; without a seed, a folded simulation takes the expected slowest of its ranks (an order
// statistic of the same distribution). Pure functions; thread-safe.
#pragma once
#include <cstdint>

#include "core/hwprofile.hpp"

namespace zinf::sim {

// Rank `rank`'s kernel time over the median GPU's, drawn from `seed`. 1 without variability.
double gpu_time_factor(const core::GpuSpec& gpu, uint64_t seed, int rank);
// The largest gpu_time_factor of ranks 0 .. ranks-1 for `seed`.
double slowest_gpu(const core::GpuSpec& gpu, uint64_t seed, int ranks);
// E[max of `ranks` independent factors]: the expected slowest of that many GPUs.
double expected_slowest_gpu(const core::GpuSpec& gpu, int ranks);
// The distribution's quantile: the factor a fraction u in (0, 1) of GPUs stay under.
double gpu_time_quantile(const core::GpuSpec& gpu, double u);
// The standard normal's quantile function (exposed for tests).
double normal_quantile(double u);

}  // namespace zinf::sim
