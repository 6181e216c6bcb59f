// The placement pass (core/plan_state.hpp): the tier of each model state, as the run config fixes it or,
// for `auto`, the fastest that fits given the others; and the search over `auto` combinations that
// make_plan falls back to when the planner refuses the greedy choice.
#include "core/plan_state.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

namespace zinf::core::planning {

// What the device needs beyond its static bytes: activations of the largest run, the prefetch
// window, the largest unit gathered with its gradient, and the checkpoints kept on the device.
double device_working_estimate(const PlanState& ps) {
  // The largest unit gathered, with its gradient; prefetched units within max_live_bytes; the
  // largest gradient held across backward uses (tied weights); activations of the largest run.
  int64_t largest = 0;
  for (const auto& u : ps.units_) largest = std::max(largest, u.numel);
  const double unit = ps.working_bytes_ * double(largest);
  double ckpt = 0;
  if (ps.plan_.checkpoints == Tier::Device) {
    int64_t n = 0;
    for (const auto& r : ps.runs_) n += r.recompute ? 1 : 0;
    ckpt = ps.ckpt_bytes_ * double(n) * double(ps.plan_.micro_batches);
  } else {
    ckpt = 2 * ps.ckpt_bytes_;
  }
  return ps.act_peak_ + ckpt + std::max(ps.config_.max_live_bytes, unit) + unit;
}

void place(PlanState& ps) {
  struct Item {
    const char* name;
    const Placement* want;
    Tier* out;
  };
  Item items[] = {{"params", &ps.config_.params, &ps.plan_.params},
                  {"gradients", &ps.config_.gradients, &ps.plan_.gradients},
                  {"checkpoints", &ps.config_.checkpoints, &ps.plan_.checkpoints},
                  {"optimizer", &ps.config_.optimizer, &ps.plan_.optimizer}};
  // Fixed placements first; `auto` ones start on the device and are moved down one at a time.
  for (auto& it : items) *it.out = it.want->automatic ? Tier::Device : it.want->tier;
  // Without checkpointing nothing is saved; under an activation policy, recomputed segments are.
  if (ps.config_.checkpoint_interval == 0 && !ps.config_.checkpoints.automatic && !ps.activation_policy_on())
    ps.plan_.checkpoints = Tier::Device;

  auto ckpt_total = [&] {
    int64_t n = 0;
    for (const auto& r : ps.runs_) n += r.recompute ? 1 : 0;
    return ps.ckpt_home_bytes() * double(n) * double(ps.plan_.micro_batches);
  };
  auto need = [&] {
    PerTier s = max_static(ps);
    at(s, Tier::Device) += device_working_estimate(ps);
    if (ps.plan_.checkpoints != Tier::Device) at(s, ps.plan_.checkpoints) += ckpt_total();
    return s;
  };
  for (auto& it : items) {
    if (!it.want->automatic) {
      ps.plan_.placements.push_back({it.name, *it.out, false, "fixed by the run config"});
      continue;
    }
    std::string reason;
    Tier chosen = Tier::Nvme;
    const std::string name = it.name;
    // Stages 0-2 keep parameters (and stages 0-1 gradients) whole on every device.
    const bool device_only = (name == "params" && !ps.params_partitioned()) || (name == "gradients" && !ps.grads_partitioned());
    for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
      if (t != Tier::Device && device_only) break;
      *it.out = t;
      PerTier s = need();
      const bool fits = at(s, t) <= at(ps.plan_.budget, t);
      reason += fmt::format("{}{}: needs {} of {}{}", reason.empty() ? "" : "; ", to_string(t), bytes_text(at(s, t)),
                            bytes_text(at(ps.plan_.budget, t)), fits ? " -> fits" : " -> too small");
      if (fits) {
        chosen = t;
        break;
      }
    }
    *it.out = chosen;
    ps.plan_.placements.push_back({it.name, chosen, true, reason});
  }
  if (!ps.params_partitioned() && ps.plan_.params != Tier::Device)
    throw PlanError(fmt::format("parameters on {} need ZeRO stage 3 (zero_stage is {}); with stages 0-2 every rank "
                                "keeps all parameters on the device",
                                to_string(ps.plan_.params), ps.config_.zero_stage));
  if (ps.config_.zero_stage < 2 && ps.plan_.gradients != Tier::Device)
    throw PlanError(fmt::format("gradients on {} need ZeRO stage 2 or 3 (zero_stage is {})", to_string(ps.plan_.gradients),
                                ps.config_.zero_stage));
  const HostPath path = ps.config_.optimizer_host_path;
  if (path != HostPath::Fused && ps.plan_.optimizer == Tier::Device)
    throw PlanError(std::string("optimizer.host_path ") + to_string(path) +
                    " describes an optimizer on the host, but this plan keeps the optimizer on the device; offload it "
                    "(offload.optimizer: cpu or nvme) or drop host_path");
  if (path == HostPath::DeepSpeed09 && ps.config_.zero_stage != 3)
    throw PlanError("optimizer.host_path deepspeed-0.9 describes ZeRO-3's stage3.py; this run is ZeRO stage " +
                    std::to_string(ps.config_.zero_stage) + " (use deepspeed-0.3's path or drop host_path)");
}

// `auto` placements are chosen greedily (each state in turn takes the fastest tier that fits given
// the others). When that choice is refused, every combination of tiers for the `auto` states is
// planned, fastest first (fewest states off the device, then host before NVMe, in the order
// params, gradients, checkpoints, optimizer), with the tiling factor left as the config gives it;
// the first the planner accepts is the plan. So `auto` finds a fitting combination whenever one
// exists among these choices (tests/planner_test.cpp checks it against an exhaustive search). A
// combination whose states alone are too large is refused before any scheduling, so the search
// costs little more than the greedy attempt unless many combinations nearly fit. A combination
// that cannot fit where a refused one did not is not planned at all (see `dominated`).
namespace {

// A refusal that rules out more than its own combination: short on `tier` by more than
// kRefusalMargin of its budget, either on the states alone (their bytes on a tier only grow as
// more states go there) or at the device's scheduled peak (which hardly moves when states go
// between host and NVMe: the same units are gathered, the same gradients reduced). Any
// combination that puts on `tier` every auto state this one put there is refused too.
constexpr double kRefusalMargin = 0.01;
struct Refusal {
  Tier tier;
  std::vector<bool> there;  // per auto state: on `tier` in the refused combination
};

std::optional<Refusal> refusal_of(const PlanError& e, const std::vector<Tier>& combo) {
  const Fit* f = e.fit();
  if (!f || f->verdict != Verdict::Short) return std::nullopt;
  if (f->accounting.scheduled && f->tier != Tier::Device) return std::nullopt;
  if (!(f->shortfall > kRefusalMargin * f->accounting.at(f->tier).budget)) return std::nullopt;
  Refusal r{f->tier, {}};
  for (Tier t : combo) r.there.push_back(t == f->tier);
  return r;
}

bool dominated(const std::vector<Tier>& combo, const std::vector<Refusal>& refusals) {
  return std::any_of(refusals.begin(), refusals.end(), [&](const Refusal& r) {
    for (size_t k = 0; k < combo.size(); ++k)
      if (r.there[k] && combo[k] != r.tier) return false;
    return true;
  });
}

}  // namespace

PlanResult search_auto_tiers(const RunConfig& config, const PlanError& greedy,
                             const std::function<PlanResult(const RunConfig&)>& plan) {
  struct Auto {
    const char* state;
    Placement RunConfig::*field;
  };
  std::vector<Auto> autos;
  for (Auto a : {Auto{"params", &RunConfig::params}, Auto{"gradients", &RunConfig::gradients},
                 Auto{"checkpoints", &RunConfig::checkpoints}, Auto{"optimizer", &RunConfig::optimizer}})
    if ((config.*a.field).automatic) autos.push_back(a);
  const std::vector<Tier> tiers{Tier::Device, Tier::Host, Tier::Nvme};
  std::vector<std::vector<Tier>> combos{{}};
  for (size_t k = 0; k < autos.size(); ++k) {
    std::vector<std::vector<Tier>> next;
    for (const auto& c : combos)
      for (Tier t : tiers) {
        next.push_back(c);
        next.back().push_back(t);
      }
    combos = std::move(next);
  }
  auto cost = [](const std::vector<Tier>& c) {
    int off = 0, rank = 0;
    for (Tier t : c) {
      off += t != Tier::Device;
      rank += t == Tier::Nvme ? 2 : t == Tier::Host ? 1 : 0;
    }
    return std::pair{off, rank};
  };
  std::stable_sort(combos.begin(), combos.end(), [&](const auto& a, const auto& b) { return cost(a) < cost(b); });
  int tried = 0, skipped = 0;
  std::vector<Refusal> refusals;
  for (const auto& combo : combos) {
    if (dominated(combo, refusals)) {
      ++skipped;
      continue;
    }
    RunConfig c = config;
    for (size_t k = 0; k < autos.size(); ++k) c.*autos[k].field = {false, combo[k]};
    ++tried;
    try {
      PlanResult r = plan(c);
      for (auto& d : r.plan.placements)
        for (const auto& a : autos)
          if (d.state == a.state) {
            d.automatic = true;
            d.reason = fmt::format("the greedy choice was refused ({}); the first of {} combinations of the auto "
                                   "tiers that the planner accepts, fastest first ({} tried{})",
                                   greedy.what(), combos.size(), tried,
                                   skipped ? fmt::format(", {} not planned: they put on a tier all that a "
                                                         "refused one did", skipped)
                                           : "");
          }
      return r;
    } catch (const PlanError& e) {
      if (auto refusal = refusal_of(e, combo)) refusals.push_back(std::move(*refusal));
    }
  }
  throw greedy;
}

}  // namespace zinf::core::planning
