// `auto` in a run config, decided once for every consumer: `zinf plan`, `sim`, `train`, `validate`
// and `sweep` resolve the config through resolve_auto before they plan, so they all get the same
// Program. The decision is the tuner's search (tune/tuner.hpp) over the knobs the config leaves to
// `auto` alone — the tier of parameters (with gradients), of optimizer states, of checkpoints, and
// the tiling factor — everything else held at the config's values: the memory model prunes, the
// closed-form lane estimate orders, the planner's idealized schedule judges the most promising and
// the simulator the best two, beside the planner's own greedy choice (so the search never returns
// something the simulator finds slower than what greedy `auto` planned). It is bounded (at most 27
// tier combinations, each with the smallest tiling that fits; 32 planned, 3 simulated) and cached: in this process, and on disk under
// $ZINF_CACHE_DIR (default $XDG_CACHE_HOME/zinf or ~/.cache/zinf; "off" disables it), keyed by the
// model, the hwprofile, the node count, the config and this build. When nothing the search covers
// fits, the config is returned unchanged and the planner's own `auto` (greedy, then every tier
// combination) decides or refuses with its reason.
//
// Activation offload's `tier: auto` under the lifetime policy is decided here too, after the tiers:
// the activation pass (core/activation_pass.hpp) chooses per tensor greedily, and the whole choices
// are then compared by simulated step — the pass's own (and per block), host only, NVMe only (over
// GDS where the profile has it) and checkpoint-and-recompute — and the fastest is taken (cached in
// this process).
#pragma once
#include <string>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/run_config.hpp"

namespace zinf::sim {

struct AutoResolution {
  core::RunConfig config;  // auto knobs fixed (unchanged when none were auto or nothing fit)
  bool searched = false;   // the config had auto knobs and the search chose them
  bool cached = false;     // the choice came from the cache
  std::string summary;     // "" when nothing was auto; else what was chosen and why, one line
};

bool has_auto_knobs(const core::RunConfig& config);
// The lifetime policy with the path left to zinf (activation_offload.tier: auto).
bool activation_choice_open(const core::RunConfig& config);

// While one is alive (in this process and in the children it forks), resolve_auto leaves
// activation_offload.tier: auto to the pass: what gets planned is its greedy choice. The
// comparison itself simulates the pass's own choice that way.
class PassActivationChoice {
public:
  PassActivationChoice();
  ~PassActivationChoice();
  PassActivationChoice(const PassActivationChoice&) = delete;
  PassActivationChoice& operator=(const PassActivationChoice&) = delete;
};

// Forks child processes (planning and SimGrid run there): call it before this process creates a
// simulation engine.
AutoResolution resolve_auto(const core::ModelSpec& model, const core::HwProfile& hw, int nodes,
                            const core::RunConfig& config);

// resolve_auto for a run of `ranks` ranks in whole nodes of hw.node.gpus each (what `train` and
// `validate` start); for ranks that fill no whole number of nodes the config comes back unchanged
// and the planner's own `auto` decides.
AutoResolution resolve_auto_for_ranks(const core::ModelSpec& model, const core::HwProfile& hw, int ranks,
                                      const core::RunConfig& config);

}  // namespace zinf::sim
