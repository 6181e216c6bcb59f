#include "core/validation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

namespace zinf::core {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

StepSummary summarize_steps(const std::vector<double>& seconds, int skip) {
  if (seconds.empty()) throw std::invalid_argument("no step times to summarize");
  std::vector<double> kept(seconds.begin() + std::min<std::ptrdiff_t>(std::max(0, skip), std::ptrdiff_t(seconds.size())),
                           seconds.end());
  if (kept.empty()) kept = seconds;
  StepSummary s;
  s.median = median_of(kept);
  s.min = *std::min_element(kept.begin(), kept.end());
  s.max = *std::max_element(kept.begin(), kept.end());
  s.steps = int(kept.size());
  return s;
}

LaneSeconds lane_busy(const Timeline& timeline) {
  LaneSeconds busy{};
  std::set<int> ranks;
  // The time a lane has at least one task running: the union of its tasks' intervals, since the
  // tasks of a lane with several slots overlap.
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;  // (rank, lane)
  for (const auto& e : timeline.events) {
    spans[{e.rank, static_cast<int>(e.lane)}].emplace_back(e.start, e.end);
    ranks.insert(e.rank);
  }
  for (auto& [key, v] : spans) {
    std::sort(v.begin(), v.end());
    double covered = 0, from = v.front().first, to = v.front().first;
    for (const auto& [a, b] : v) {
      if (a > to) {
        covered += to - from;
        from = a;
        to = a;
      }
      to = std::max(to, b);
    }
    covered += to - from;
    busy[static_cast<size_t>(key.second)] += covered;
  }
  if (!ranks.empty())
    for (double& b : busy) b /= double(ranks.size());
  return busy;
}

LaneSeconds median_lane_busy(const std::vector<LaneSeconds>& steps) {
  LaneSeconds out{};
  if (steps.empty()) return out;
  for (size_t l = 0; l < out.size(); ++l) {
    std::vector<double> v;
    for (const auto& s : steps) v.push_back(s[l]);
    out[l] = median_of(v);
  }
  return out;
}

double relative_error(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return (predicted - measured) / measured;
}

ErrorSummary summarize_errors(const std::vector<double>& errors) {
  ErrorSummary s;
  if (errors.empty()) return s;
  std::vector<double> a;
  for (double e : errors) a.push_back(std::fabs(e));
  s.median_abs = median_of(a);
  s.max_abs = *std::max_element(a.begin(), a.end());
  return s;
}

HwProfile colocate(const HwProfile& hw, int ranks) {
  if (ranks < 1) throw std::invalid_argument("colocate: at least one rank");
  if (ranks == 1) return hw;
  HwProfile out = hw;
  const int cores = std::max(1, hw.node.cpu_cores);
  out.node.gpus = hw.node.gpus * ranks;
  // With the cores modelled as one shared pool, the simulator time-shares them among every rank's
  // threads as they run: the rates stay those of one thread.
  if (!hw.node.device_shares_host_cores) {
    out.node.gpu.peak_flops = hw.node.gpu.peak_flops * std::min(1.0, double(cores) / ranks);
    out.node.cpu_adam_rate = hw.node.cpu_adam_rate * std::min(ranks, cores);
  }
  // zinf's default gives each process the cores it may use over the ranks on its node: a profile
  // taken that way (one process) measured its kernels on more threads than each rank gets here.
  const auto& m = hw.measured_on;
  if (hw.node.device_shares_host_cores && m.blas_threads_from == "cores" && m.blas_threads > 1) {
    const int per_rank = std::max(1, std::max(1, m.cores) / ranks);
    if (per_rank < m.blas_threads) out.node.rank_blas_threads = per_rank;
  }
  out.node.gpus_per_pcie_switch = 1;
  out.node.pcie_switch_uplink = 0;
  return out;
}

}  // namespace zinf::core
