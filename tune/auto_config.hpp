// `auto` in a run config, decided once for every command that plans a run: `zinf plan`, `sim`,
// `sweep`, `train` and `validate` resolve the config through resolve_auto before they plan, so they
// all plan the same Program.
//
// It answers within a second for any shipped model and cluster, in this process, without
// simulating: the tuner's closed form orders the combinations of tiers the config leaves to `auto`
// (parameters with gradients, optimizer states, checkpoints; tune/tuner.hpp's enumeration with
// everything else held at the config's values): those the memory model admits first, by the lane
// estimate's step time, then the others, closest to fitting first. The planner decides: the first
// combination it accepts is the answer, its tiling factor left to the planner's own rule where the
// config says `auto`. A combination that keeps on the device all that a refused one kept there,
// that one short on the device by more than kSkipMargin of its budget, is not planned: moving
// states between host and NVMe leaves the device's peak as it was, within far less. When none of the first few is accepted, the config goes to the planner
// unchanged, whose own `auto` (greedy, then every tier combination) decides or refuses with its
// reason (core/fit.hpp). Activation offload's `tier: auto` is left to the activation pass.
//
// The simulated search is `zinf tune`'s: it simulates what resolve_auto chose beside its own
// finalists (TuneRequest::incumbents), so its pick is never slower than what plan, sim and train run.
// Thread-compatible (no shared state).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/run_config.hpp"
#include "models/gpt.hpp"

namespace zinf::tune {

struct AutoResolution {
  core::RunConfig config;  // auto knobs fixed (unchanged when none were auto or none was accepted)
  bool searched = false;   // the config had tier or tiling knobs and a combination was accepted
  std::string summary;     // "" when nothing was auto; else what was chosen and how, one line
  // The plan of `config` made while deciding (on the profile given), for a caller that plans the
  // same run: absent when nothing was planned.
  std::shared_ptr<const models::GptPlan> planned;
};

inline constexpr double kSkipMargin = 0.01;

bool has_auto_knobs(const core::RunConfig& config);
// The lifetime policy with the path left to the activation pass (activation_offload.tier: auto).
bool activation_choice_open(const core::RunConfig& config);

AutoResolution resolve_auto(const core::ModelSpec& model, const core::HwProfile& hw, int nodes,
                            const core::RunConfig& config);

// resolve_auto for a run of `ranks` ranks in whole nodes of hw.node.gpus each (what `train` and
// `validate` start); for ranks that fill no whole number of nodes the config comes back unchanged
// and the planner's own `auto` decides.
AutoResolution resolve_auto_for_ranks(const core::ModelSpec& model, const core::HwProfile& hw, int ranks,
                                      const core::RunConfig& config);

// The whole activation choices of a config whose activation_offload.tier is auto, each named: the
// pass's own (per tensor, and per block), host only, NVMe only (over GDS where the profile has
// it), checkpoint and recompute. `zinf tune` simulates them beside its finalists; empty when the
// config leaves no such choice open.
std::vector<std::pair<std::string, core::RunConfig>> activation_alternatives(const core::RunConfig& config,
                                                                             const core::HwProfile& hw);

}  // namespace zinf::tune
