// The schedule pass (core/plan_state.hpp): the parameter fetches the steps need (a unit used again within
// reuse_distance_bytes stays gathered), the step before which each fetch stage is issued (prefetch),
// the steps before which checkpoint and activation loads are issued, and the peak of each tier under
// the idealized list scheduler.
#include "core/plan_state.hpp"

#include <algorithm>
#include <numeric>
#include <queue>
#include <utility>

#include "core/timeline.hpp"

namespace zinf::core::planning {

void make_fetches(PlanState& ps) {
  ps.fetches_.clear();
  ps.use_fetch_.assign(ps.step_units_.size(), -1);
  // Stages 0-2 keep every parameter on the device: nothing to fetch.
  if (!ps.params_partitioned()) return;
  // Bytes used by the steps before step i: the reuse distance of a use is the bytes used since
  // the unit's previous use.
  std::vector<double> used_before(ps.steps_.size() + 1, 0.0);
  for (size_t i = 0; i < ps.steps_.size(); ++i) {
    double b = 0;
    for (uint32_t k = 0; k < ps.steps_[i].units_count; ++k) b += ps.unit_bytes(ps.step_units_[ps.steps_[i].units_begin + k]);
    used_before[i + 1] = used_before[i] + b;
  }
  std::vector<int32_t> last_step(ps.units_.size(), -1), last_fetch(ps.units_.size(), -1);
  // Per parameter group: the unit (tile) of it used last. The vocabulary tiles are fetched, used and
  // released in turn: a tile stays gathered for its next use only if no other tile of its group is
  // used in between (the head's last tile of the forward, kept for the first of its backward);
  // keeping every tile within the reuse distance would hold the whole head from its forward to its
  // backward again. (A linear's tiles keep the reuse distance alone.)
  std::vector<int32_t> group_last_unit(ps.graph_.params.size(), -1);
  for (size_t i = 0; i < ps.steps_.size(); ++i) {
    const auto& s = ps.steps_[i];
    for (uint32_t k = 0; k < s.units_count; ++k) {
      const int32_t u = ps.step_units_[s.units_begin + k];
      const int32_t prev = last_step[static_cast<size_t>(u)];
      if (prev == static_cast<int32_t>(i)) {  // the same unit twice in one step
        ps.use_fetch_[s.units_begin + k] = last_fetch[static_cast<size_t>(u)];
        continue;
      }
      const auto& unit = ps.units_[static_cast<size_t>(u)];
      auto& group_last = group_last_unit[static_cast<size_t>(unit.group)];
      const bool sibling_between =
          unit.tiles > 1 && ps.graph_.params[static_cast<size_t>(unit.group)].vocabulary && group_last != u;
      group_last = u;
      // DeepSpeed's misaligned trace (DeepSpeedBehaviour::trace_misaligned) finds no reuse: every use fetches.
      const double reuse = ps.config_.deepspeed.trace_misaligned ? 0.0 : ps.config_.reuse_distance_bytes;
      if (prev >= 0 && !sibling_between && used_before[i] - used_before[static_cast<size_t>(prev) + 1] < reuse) {
        const int32_t f = last_fetch[static_cast<size_t>(u)];
        ps.fetches_[static_cast<size_t>(f)].release = static_cast<int32_t>(i);
        ps.use_fetch_[s.units_begin + k] = f;
      } else {
        Fetch f;
        f.unit = u;
        f.consumer = f.release = static_cast<int32_t>(i);
        ps.fetches_.push_back(f);
        ps.use_fetch_[s.units_begin + k] = static_cast<int32_t>(ps.fetches_.size() - 1);
        last_fetch[static_cast<size_t>(u)] = static_cast<int32_t>(ps.fetches_.size() - 1);
      }
      last_step[static_cast<size_t>(u)] = static_cast<int32_t>(i);
    }
  }
}

// A stage with distance d of a fetch consumed at step j is issued before step j - d (so it runs beside
// step j - d - ... j - 1), after compute step j - d - 1 has ended. The stage that allocates the whole
// unit on the device is held back further while the bytes that may be live at its start exceed
// max_live_bytes (with DeepSpeed's rule, prefetch_while_under_live: while the bytes live before it
// reach max_live_bytes). A DeepSpeed release's behaviours (core/deepspeed_release.hpp) move stages:
// a misaligned trace prefetches nothing (every distance 0); without backward NVMe prefetch, a
// backward fetch's NVMe read and copy are issued with its all-gather.
void schedule_prefetch(PlanState& ps) {
  const auto& ds = ps.config_.deepspeed;
  const int32_t d_nc = ds.trace_misaligned ? 0 : static_cast<int32_t>(ps.config_.nvme_prefetch_distance);
  const int32_t d_h2d = ds.trace_misaligned ? 0 : static_cast<int32_t>(ps.config_.h2d_prefetch_distance);
  const int32_t d_ag = ds.trace_misaligned ? 0 : static_cast<int32_t>(ps.config_.allgather_prefetch_distance);
  using Live = std::pair<int32_t, double>;  // (release step, bytes)
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  double live_bytes = 0;
  int32_t t_prev = 0;
  for (auto& f : ps.fetches_) {
    const double bytes = ps.unit_bytes(f.unit);
    // The stage that allocates the gathered unit: the all-gather (bandwidth-centric) or the
    // host->device copy into it (owner-based).
    const int32_t d_alloc = ps.owner_based() ? std::max(d_h2d, d_ag) : d_ag;
    int32_t t = std::max({t_prev, f.consumer - d_alloc, 0});
    for (;;) {
      while (!live.empty() && live.top().first < t) {
        live_bytes -= live.top().second;
        live.pop();
      }
      const bool room = ds.prefetch_while_under_live ? live_bytes < ps.config_.max_live_bytes
                                                     : live_bytes + bytes <= ps.config_.max_live_bytes;
      if (t >= f.consumer || room) break;
      ++t;
    }
    t_prev = t;
    live.push({f.release, bytes});
    live_bytes += bytes;
    if (ps.owner_based()) {
      f.t_h2d = t;
      f.t_ag = std::min(f.consumer, std::max(t, f.consumer - d_ag));
    } else {
      f.t_ag = t;
      f.t_h2d = std::min(t, std::max(0, f.consumer - d_h2d));
    }
    f.t_nc = std::min(f.t_h2d, std::max(0, f.consumer - d_nc));
    if (!ds.backward_nvme_prefetch && ps.plan_.params == Tier::Nvme &&
        ps.steps_[static_cast<size_t>(f.consumer)].kind == TaskKind::Backward)
      f.t_nc = f.t_h2d = f.t_ag;
  }
  // Monotone per stage, so that each lane's order follows the fetch order.
  int32_t a = 0, h = 0, n = 0;
  for (auto& f : ps.fetches_) {
    f.t_ag = a = std::max(a, f.t_ag);
    f.t_h2d = h = std::max(h, std::min(f.t_h2d, f.t_ag));
    f.t_nc = n = std::max(n, std::min(f.t_nc, f.t_h2d));
  }
}

// Which step each run's load is issued before, per micro-batch: checkpoint loads of recomputed
// runs and loads of offloaded runs' activations.
void schedule_run_loads(const PlanState& ps, std::vector<std::vector<int32_t>>& ckpt_load_at,
                        std::vector<std::vector<int32_t>>& act_load_at) {
  const size_t S = ps.steps_.size();
  // A recomputed run's checkpoint is loaded while the run after it (in forward order) runs its
  // backward, one run ahead of its own recompute; with synchronous copies, when its recompute is next.
  std::vector<int32_t> start_of(ps.runs_.size(), -1);
  // The first backward step at or after where run `from`'s backward begins, down to run `r`'s: a
  // run without a backward (Run::no_backward) begins none, and the next run's backward follows.
  auto start_from = [&](size_t from, size_t r) {
    for (size_t k = from; k > r && start_of[k] < 0; --k) from = k - 1;
    return start_of[from];
  };
  for (size_t i = 0; i < S; ++i) {
    const auto& s = ps.steps_[i];
    if (s.starts_bwd_of_run) start_of[static_cast<size_t>(s.run)] = static_cast<int32_t>(i);
    if (i + 1 == S || ps.steps_[i + 1].mb != s.mb) {  // the micro-batch's backward is complete: assign loads
      for (size_t r = 0; r < ps.runs_.size(); ++r) {
        if (!ps.runs_[r].recompute) continue;
        const int32_t at =
            r + 1 < ps.runs_.size() && !ps.config_.checkpoint_copies_synchronous ? start_from(r + 1, r) : start_of[r];
        ckpt_load_at[static_cast<size_t>(at)].push_back(static_cast<int32_t>(r));
      }
      // An offloaded run comes back when the backward of the run prefetch_runs after it begins (the
      // pass's choice: early enough to hide the load, at least activation_prefetch_blocks); loads
      // issued together go in the order backward needs them (the later run first).
      for (size_t r = ps.runs_.size(); r-- > 0;) {
        if (ps.runs_[r].action != ActivationAction::Offload) continue;
        const size_t from = std::min(ps.runs_.size() - 1, r + static_cast<size_t>(ps.runs_[r].prefetch_runs));
        act_load_at[static_cast<size_t>(start_from(from, r))].push_back(static_cast<int32_t>(r));
      }
    }
  }
}

// Static + live bytes per tier at the worst moment of the idealized schedule, over the ranks that
// differ (one for bandwidth-centric programs, every rank for owner-based ones).
PeakComposition schedule_peak(const PlanState& ps) {
  std::vector<int> ranks{0};
  if (ps.owner_based())
    for (int r = 1; r < ps.ranks_; ++r) ranks.push_back(r);
  // Executors do not run at nominal rates: take the worst of the nominal schedule, one where data
  // moves 100x faster (prefetch as eager as the dependencies allow) and one where compute does
  // (data movement lags and buffers wait for their consumers).
  HwProfile fast_io = ps.hw_, fast_compute = ps.hw_;
  for (double* rate : {&fast_io.node.pcie_bandwidth, &fast_io.node.pcie_switch_uplink, &fast_io.node.nvme_read_bandwidth,
                       &fast_io.node.nvme_write_bandwidth, &fast_io.node.nvlink_bandwidth, &fast_io.node.nic_bandwidth})
    *rate *= 100;
  for (double* rate : {&fast_compute.node.gpu.peak_flops, &fast_compute.node.gpu.memory_bandwidth,
                       &fast_compute.node.cpu_adam_rate, &fast_compute.node.host_memory_bandwidth})
    *rate *= 100;
  // Owner-based programs are scheduled for every rank; at hundreds of ranks and 10^5 tasks only the
  // nominal schedule is affordable, and the peak is taken on the ranks most likely to hold it:
  // rank 0, the most loaded rank and the owners of the largest units.
  std::vector<const HwProfile*> scenarios{&ps.hw_, &fast_io, &fast_compute};
  if (ps.owner_based() && double(ps.ranks_) * double(ps.prog_.tasks().size()) > 2e7) {
    scenarios.resize(1);
    std::vector<int32_t> by_size(ps.units_.size());
    std::iota(by_size.begin(), by_size.end(), 0);
    std::stable_sort(by_size.begin(), by_size.end(), [&](int32_t a, int32_t b) {
      return ps.units_[static_cast<size_t>(a)].numel > ps.units_[static_cast<size_t>(b)].numel;
    });
    ranks = {0, static_cast<int>(std::max_element(ps.owned_elems_.begin(), ps.owned_elems_.end()) - ps.owned_elems_.begin())};
    for (size_t i = 0; i < std::min<size_t>(8, by_size.size()); ++i) ranks.push_back(ps.units_[static_cast<size_t>(by_size[i])].owner);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  }
  PeakComposition peak{};
  for (size_t i = 0; i < 3; ++i) peak[i].bytes = ps.prog_.static_bytes(0)[i];
  for (const HwProfile* hw : scenarios) {
    for (const auto& p : ideal_peak_composition(ps.prog_, *hw, ranks))
      for (size_t i = 0; i < 3; ++i)
        if (p[i].bytes > peak[i].bytes) peak[i] = p[i];
  }
  return peak;
}

}  // namespace zinf::core::planning
