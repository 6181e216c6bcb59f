// The tiling pass (core/plan_state.hpp): the tiling factor (fixed, or `auto`: the smallest power of two
// whose estimate fits the device), and the compute steps of every micro-batch, one per operator tile,
// with the units each step uses, each unit's first and last backward step and the gradient
// contributions its backward steps make (one per operator that uses it).
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
    const PerTier st = max_static(ps);
    const double need = at(st, Tier::Device) + device_working_estimate(ps);
    const bool fits = need <= at(ps.plan_.budget, Tier::Device);
    reason += fmt::format("{}{}: device needs ~{}{}", reason.empty() ? "" : "; ", t, bytes_text(need),
                          fits ? " -> fits" : "");
    // Every tile's shard is aligned (kShardAlignment), so more tiles can outgrow the other tiers'
    // budgets that the placement counted on (small models): no further than the last that fit them.
    const bool others_short = at(st, Tier::Host) > at(ps.plan_.budget, Tier::Host) ||
                              at(st, Tier::Nvme) > at(ps.plan_.budget, Tier::Nvme);
    // Stop where it fits, or where splitting further no longer helps (an untileable group is largest).
    const bool stuck = t > 1 && (need >= last_need || others_short);
    last_need = need;
    if (fits || stuck || t >= std::min<int64_t>(max_rows, kMaxAutoTilingFactor)) {
      if (stuck && (!fits || others_short)) {
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
      for (size_t k = run.ops.size(); k-- > 0;)
        if (ps.graph_.ops[static_cast<size_t>(run.ops[k])].backward) add_op_steps(run.ops[k], TaskKind::Backward, mb, true);
      // A run of operators without a backward (the loss alone, in a recorded order) frees its
      // activations after its forward (Run::no_backward).
      ps.runs_[ri].no_backward = ps.steps_.size() == first;
      if (ps.runs_[ri].no_backward) continue;
      ps.steps_[first].starts_bwd_of_run = true;
      ps.steps_.back().last_bwd_of_run = true;
    }
  }
  mark_gradient_contributions(ps);
}

// A unit's gradient in one micro-batch is one contribution per operator whose backward uses it: the
// operator's backward steps accumulate into one buffer, which is reduced after its last of them. A
// weight two operators share (the tied embedding and LM head) is reduced after each, so neither
// holds its gradient across the backward of the blocks between them: the head's tile is reduced
// before the next tile is gathered, the embedding's at the end, and the two add up at the home in
// the order the steps run (the head's first), as micro-batches do.
void mark_gradient_contributions(PlanState& ps) {
  const size_t U = ps.units_.size(), mbs = static_cast<size_t>(ps.plan_.micro_batches);
  ps.first_bwd_.assign(mbs, std::vector<int32_t>(U, -1));
  ps.last_bwd_ = ps.first_bwd_;
  ps.grad_use_.assign(ps.step_units_.size(), GradUse{});
  std::vector<std::vector<int32_t>> open_op(mbs, std::vector<int32_t>(U, -1));     // operator of the open contribution
  std::vector<std::vector<int32_t>> open_at(mbs, std::vector<int32_t>(U, -1));     // its latest use (step_units_ index)
  std::vector<std::vector<int32_t>> contributions(mbs, std::vector<int32_t>(U, 0));
  for (size_t i = 0; i < ps.steps_.size(); ++i) {
    const auto& s = ps.steps_[i];
    if (s.kind != TaskKind::Backward) continue;
    const size_t mb = static_cast<size_t>(s.mb);
    for (uint32_t k = 0; k < s.units_count; ++k) {
      const size_t use = s.units_begin + k;
      const auto u = static_cast<size_t>(ps.step_units_[use]);
      auto& f = ps.first_bwd_[mb][u];
      if (f < 0) f = static_cast<int32_t>(i);
      ps.last_bwd_[mb][u] = static_cast<int32_t>(i);
      if (open_op[mb][u] != s.op) {  // a new operator's use starts a contribution, closing the one before
        if (open_at[mb][u] >= 0) ps.grad_use_[static_cast<size_t>(open_at[mb][u])].ends = true;
        ps.grad_use_[use].starts = true;
        ps.grad_use_[use].contribution = contributions[mb][u]++;
        open_op[mb][u] = s.op;
      } else {
        ps.grad_use_[use].contribution = contributions[mb][u] - 1;
      }
      open_at[mb][u] = static_cast<int32_t>(use);
    }
  }
  for (size_t mb = 0; mb < mbs; ++mb)
    for (size_t u = 0; u < U; ++u)
      if (open_at[mb][u] >= 0) ps.grad_use_[static_cast<size_t>(open_at[mb][u])].ends = true;
}

void describe_operator_tiles(PlanState& ps) {
  auto& out = ps.plan_.operator_tiles;
  out.clear();
  // A unit as the device holds it gathered, and its gradient before the reduction.
  auto gathered = [&](const ParamUnit& u) { return ps.working_bytes_ * double(ps.gathered_elems(u)); };
  for (int32_t id : ps.order_) {
    const Operator& o = ps.graph_.ops[static_cast<size_t>(id)];
    if (o.param_groups.empty()) continue;
    OperatorTiles t;
    t.op = o.id;
    t.name = o.name;
    double frac = 1.0;
    for (int32_t pg : o.param_groups) {
      const auto& us = ps.group_units_[static_cast<size_t>(pg)];
      // A tiled group counts its largest tile; the others are whole in every tile's step.
      double largest = 0;
      for (int32_t u : us) largest = std::max(largest, gathered(ps.units_[static_cast<size_t>(u)]));
      if (us.size() > 1) {
        t.tiles = static_cast<int64_t>(us.size());
        const ParamUnit& u0 = ps.units_[static_cast<size_t>(us.front())];
        frac = double(u0.row_end - u0.row_begin) / double(ps.graph_.params[static_cast<size_t>(pg)].rows);
      }
      t.gathered_bytes += largest;
    }
    t.gradient_bytes = o.backward ? t.gathered_bytes : 0.0;
    t.fwd_flops = o.fwd_flops * frac;
    t.bwd_flops = o.bwd_flops * frac;
    out.push_back(t);
  }
}

}  // namespace zinf::core::planning
