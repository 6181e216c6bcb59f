// The planner's entry point (core/plan.hpp): make_plan runs the passes over one PlanState, the
// intermediate state they share (core/plan_state.hpp, which also says what each pass decides):
//  1. partition, runs, placement, tiling: budgets, units with their shards or owners, the runs of
//     the forward order, the tier of each state, the tiling factor;
//  2. the activation pass (under an activation policy), the compute steps, the parameter fetches
//     and the step each of their stages is issued before (prefetch);
//  3. emission: the tasks, with the optimizer sub-groups pipelined after backward or as their
//     gradients are ready;
//  4. the peak of each tier under the idealized list scheduler, checked against the budgets. Where
//     the device peak is over budget, the activation pass keeps less, or an `auto` tiling factor
//     doubles, and steps 2-4 run again.
// When the greedy `auto` placement is refused, make_plan searches the `auto` combinations
// (plan_placement.cpp).
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/plan_state.hpp"

namespace zinf::core {
namespace planning {
namespace {

PlanResult run_passes(PlanState& ps) {
  basics(ps);
  make_runs(ps);
  make_units(ps, std::max<int64_t>(1, ps.config_.tiling_factor));
  place(ps);
  choose_tiling(ps);
  ps.plan_.static_bytes = max_static(ps);
  // The states alone over a budget: refused before anything is scheduled.
  Accounting states = accounting_for(ps, static_peaks(ps));
  states.scheduled = false;
  if (const Fit f = judge_fit(states, ps.config_); !f.fits()) throw_fit(f);
  if (ps.plan_.grad_clip && ps.config_.optimizer_timing == OptimizerTiming::OverlapBackward)
    ps.plan_.optimizer_timing_note =
        "overlap with gradient clipping (or fp16's overflow check): optimizer states and gradients of ready "
        "sub-groups are read during backward, but every Adam step waits for the all-reduced global gradient norm, so "
        "the update stays exact";
  else if (ps.config_.optimizer_timing == OptimizerTiming::OverlapBackward)
    ps.plan_.optimizer_timing_note = "each sub-group is updated as soon as its gradient shards are reduced and stored";
  else
    ps.plan_.optimizer_timing_note = "sub-groups are updated after backward";

  // Peak per tier under the idealized schedule (see schedule_peak). Every buffer's lifetime is
  // bounded by dependencies (prefetch distances and live bytes, backpressure on gradient stores and
  // checkpoint saves, the optimizer pipeline depth), so executors at other rates stay close; they
  // check their own Timelines against the same budget. An `auto` tiling factor whose estimate was
  // too hopeful is doubled until the schedule fits.
  PeakComposition peaks{};
  PerTier peak{};
  // The activation pass first keeps every segment it can (the room its estimate leaves, or all of
  // them); where the schedule's device peak is over budget, it aims lower by the excess and plans
  // again (at most 6 times).
  ps.plan_.activation_policy = ps.config_.activation_policy;
  double act_room = std::numeric_limits<double>::infinity();
  int act_attempts = 0;
  for (int attempt = 0;; ++attempt) {
    if (ps.activation_policy_on()) apply_activation_pass(ps, act_room);
    make_steps(ps);
    make_fetches(ps);
    schedule_prefetch(ps);
    emit(ps);
    finish_program(ps);
    peaks = schedule_peak(ps);
    peak = {peaks[0].bytes, peaks[1].bytes, peaks[2].bytes};
    const bool device_short = at(peak, Tier::Device) > at(ps.plan_.budget, Tier::Device);
    const bool any_kept = std::any_of(ps.plan_.activations.begin(), ps.plan_.activations.end(), [](const ActivationDecision& d) {
      return d.choice.action == ActivationAction::Keep && !d.lifetime.pinned;
    });
    if (device_short && ps.config_.activation_policy == ActivationPolicy::Lifetime && act_attempts < 6 && any_kept) {
      const double excess = at(peak, Tier::Device) - at(ps.plan_.budget, Tier::Device);
      double kept = 0;
      for (const auto& d : ps.plan_.activations)
        if (d.choice.action == ActivationAction::Keep) kept += d.lifetime.bytes;
      act_room = std::min(act_room, kept) - excess;
      ps.plan_.activation_note += fmt::format("{}device peak {} over budget with {} kept: keep at most {}",
                                           ps.plan_.activation_note.empty() ? "" : "; ", bytes_text(excess), bytes_text(kept),
                                           bytes_text(std::max(0.0, act_room)));
      ++act_attempts;
      reset_emission(ps);
      continue;
    }
    // An automatic optimizer depth that puts the host over budget is halved (down to the pipeline's 3).
    if (at(peak, Tier::Host) > at(ps.plan_.budget, Tier::Host) && ps.config_.optimizer_sub_groups_in_flight == 0 &&
        ps.sg_in_flight_ > kOptimizerPipelineDepth) {
      ps.sg_depth_cap_ = std::max<int64_t>(kOptimizerPipelineDepth, ps.sg_in_flight_ / 2);
      reset_emission(ps);
      continue;
    }
    if (!(device_short && ps.config_.tiling_factor == 0 && attempt < 3)) break;
    ps.plan_.tiling_factor *= 2;
    ps.plan_.tiling_reason += fmt::format("; the schedule's device peak {} is over budget: {}", bytes_text(at(peak, Tier::Device)),
                                       ps.plan_.tiling_factor);
    make_units(ps, ps.plan_.tiling_factor);
    reset_emission(ps);
  }
  ps.builder_.peak() = peak;
  ps.plan_.peak_bytes = peak;
  describe_operator_tiles(ps);
  if (ps.plan_.optimizer == Tier::Nvme)
    ps.plan_.optimizer_timing_note +=
        fmt::format("; {} sub-groups in flight ({} of host memory){}{}", ps.sg_in_flight_,
                    bytes_text(double(ps.sg_in_flight_) * sub_group_host_bytes(ps, ps.sg_largest_)),
                    ps.sg_depth_cap_ > 0 ? ", halved: the host peak was over budget deeper" : "",
                    ps.sg_phases_ ? ", their NVMe reads and writes in waves" : "");
  ps.plan_.accounting = accounting_for(ps, peaks);
  if (const Fit f = judge_fit(ps.plan_.accounting, ps.config_); !f.fits()) throw_fit(f);
  account(ps);
  return {std::move(ps.plan_), std::move(ps.prog_)};
}

}  // namespace
}  // namespace planning

PlanResult make_plan(const ModelGraph& graph, const HwProfile& hw, const RunConfig& config, int ranks,
                     const std::vector<int32_t>& recorded_order) {
  try {
    planning::PlanState ps(graph, hw, config, ranks, recorded_order);
    return planning::run_passes(ps);
  } catch (const PlanError& greedy) {
    // Per-tensor choices load more, earlier, than whole blocks: where their schedule does not fit,
    // choose per block.
    if (config.activation_policy == ActivationPolicy::Lifetime && config.activation_per_tensor) {
      RunConfig blocks = config;
      blocks.activation_per_tensor = false;
      try {
        PlanResult r = make_plan(graph, hw, blocks, ranks, recorded_order);
        r.plan.activation_note += fmt::format("{}chosen per block: per tensor, {}", r.plan.activation_note.empty() ? "" : "; ",
                                              greedy.what());
        return r;
      } catch (const PlanError&) {
      }
    }
    const bool any_auto = config.params.automatic || config.gradients.automatic || config.optimizer.automatic ||
                          config.checkpoints.automatic;
    if (!any_auto) throw;
    return planning::search_auto_tiers(config, greedy, [&](const RunConfig& c) { return make_plan(graph, hw, c, ranks, recorded_order); });
  }
}

PlanResult make_forward_plan(const ModelGraph& graph, const HwProfile& hw, const RunConfig& config, int ranks,
                             ForwardBeside beside) {
  // One micro-batch, nothing offloaded for a backward that never comes.
  RunConfig c = config;
  c.gradient_accumulation = 1;
  c.activation_policy = ActivationPolicy::None;
  try {
    planning::PlanState ps(graph, hw, c, ranks, {});
    ps.forward_only_ = true;
    ps.beside_training_ = beside == ForwardBeside::TrainingStates;
    return planning::run_passes(ps);
  } catch (const PlanError& greedy) {
    if (!(c.params.automatic || c.gradients.automatic || c.optimizer.automatic || c.checkpoints.automatic)) throw;
    return planning::search_auto_tiers(c, greedy, [&](const RunConfig& fixed) {
      return make_forward_plan(graph, hw, fixed, ranks, beside);
    });
  }
}

RunConfig forward_config(const RunConfig& config, const Plan& trained) {
  RunConfig c = config;
  c.params = {false, trained.params};
  c.gradients = {false, trained.gradients};
  c.optimizer = {false, trained.optimizer};
  c.checkpoints = {false, trained.checkpoints};
  c.tiling_factor = trained.tiling_factor;
  return c;
}

}  // namespace zinf::core
