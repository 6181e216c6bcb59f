// The tiling pass (core/plan_state.hpp): the tiling factor (fixed, or `auto`: the smallest power of two
// whose estimate fits the device), and the compute steps of every micro-batch, one per operator tile,
// with the units each step uses and each unit's first and last backward step.
#include "core/memory_model.hpp"
#include "core/plan_state.hpp"

#include <algorithm>

namespace zinf::core::planning {

void choose_tiling(PlanState& ps) {
  if (ps.config_.tiling_factor > 0) {
    ps.plan_.tiling_factor = ps.config_.tiling_factor;
    ps.plan_.tiling_reason = "fixed by the run config";
    make_units(ps, ps.plan_.tiling_factor);
    return;
  }
  int64_t max_rows = 1;
  for (const auto& pg : ps.graph_.params)
    if (pg.tileable) max_rows = std::max(max_rows, pg.rows);
  std::string reason;
  double last_need = 0;
  for (int64_t t = 1;; t *= 2) {
    make_units(ps, t);
    const double need = at(max_static(ps), Tier::Device) + device_working_estimate(ps);
    const bool fits = need <= at(ps.plan_.budget, Tier::Device);
    reason += fmt::format("{}{}: device needs ~{}{}", reason.empty() ? "" : "; ", t, bytes_text(need),
                          fits ? " -> fits" : "");
    // Stop where it fits, or where splitting further no longer helps (an untileable group is largest).
    const bool stuck = t > 1 && need >= last_need;
    last_need = need;
    if (fits || stuck || t >= std::min<int64_t>(max_rows, kMaxAutoTilingFactor)) {
      if (stuck && !fits) {
        t /= 2;
        make_units(ps, t);
      }
      ps.plan_.tiling_factor = t;
      ps.plan_.tiling_reason = fmt::format("auto, smallest power of two that fits the device budget of {} ({})",
                                        bytes_text(at(ps.plan_.budget, Tier::Device)), reason);
      return;
    }
  }
}

void make_steps(PlanState& ps) {
  ps.steps_.clear();
  ps.step_units_.clear();
  const int mbs = static_cast<int>(ps.plan_.micro_batches);
  auto tiled_group = [&](const Operator& o) -> int32_t {
    for (int32_t pg : o.param_groups)
      if (ps.group_units_[static_cast<size_t>(pg)].size() > 1) return pg;
    return -1;
  };
  auto add_op_steps = [&](int32_t op, TaskKind kind, int32_t mb, bool reverse_tiles) {
    const auto& o = ps.graph_.ops[static_cast<size_t>(op)];
    const int32_t tg = tiled_group(o);
    const int32_t tiles = tg >= 0 ? static_cast<int32_t>(ps.group_units_[static_cast<size_t>(tg)].size()) : 1;
    for (int32_t i = 0; i < tiles; ++i) {
      const int32_t tile = reverse_tiles ? tiles - 1 - i : i;
      Step s;
      s.kind = kind;
      s.op = op;
      s.tile = tg >= 0 ? tile : -1;
      s.mb = mb;
      s.run = ps.op_run_[static_cast<size_t>(op)];
      s.units_begin = static_cast<uint32_t>(ps.step_units_.size());
      for (int32_t pg : o.param_groups) {
        const auto& us = ps.group_units_[static_cast<size_t>(pg)];
        if (pg == tg) ps.step_units_.push_back(us[static_cast<size_t>(tile)]);
        else ps.step_units_.insert(ps.step_units_.end(), us.begin(), us.end());
      }
      s.units_count = static_cast<uint32_t>(ps.step_units_.size()) - s.units_begin;
      ps.steps_.push_back(s);
    }
  };
  for (int32_t mb = 0; mb < mbs; ++mb) {
    for (size_t r = 0; r < ps.runs_.size(); ++r) {
      const size_t first = ps.steps_.size();
      for (int32_t op : ps.runs_[r].ops) add_op_steps(op, TaskKind::Forward, mb, false);
      ps.steps_[first].first_fwd_of_run = true;
      ps.steps_.back().last_fwd_of_run = true;
    }
    if (ps.forward_only_) continue;  // a forward pass alone: nothing runs backward
    for (size_t ri = ps.runs_.size(); ri-- > 0;) {
      const auto& run = ps.runs_[ri];
      const size_t first = ps.steps_.size();
      if (run.recompute) {
        for (int32_t op : run.ops) add_op_steps(op, TaskKind::Recompute, mb, false);
        ps.steps_[first].first_recompute = true;
      } else if (!run.recompute_ops.empty()) {
        for (int32_t op : run.recompute_ops) add_op_steps(op, TaskKind::Recompute, mb, false);
        ps.steps_[first].first_partial_recompute = true;
      }
      for (size_t k = run.ops.size(); k-- > 0;) add_op_steps(run.ops[k], TaskKind::Backward, mb, true);
      ps.steps_[first].starts_bwd_of_run = true;
      ps.steps_.back().last_bwd_of_run = true;
    }
  }
  // First and last backward use of every unit, per micro-batch: the gradient buffer lives between.
  ps.first_bwd_.assign(static_cast<size_t>(mbs), std::vector<int32_t>(ps.units_.size(), -1));
  ps.last_bwd_ = ps.first_bwd_;
  for (size_t i = 0; i < ps.steps_.size(); ++i) {
    const auto& s = ps.steps_[i];
    if (s.kind != TaskKind::Backward) continue;
    for (uint32_t k = 0; k < s.units_count; ++k) {
      const int32_t u = ps.step_units_[s.units_begin + k];
      auto& f = ps.first_bwd_[static_cast<size_t>(s.mb)][static_cast<size_t>(u)];
      if (f < 0) f = static_cast<int32_t>(i);
      ps.last_bwd_[static_cast<size_t>(s.mb)][static_cast<size_t>(u)] = static_cast<int32_t>(i);
    }
  }
}

}  // namespace zinf::core::planning
