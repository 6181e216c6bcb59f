#include "tune/auto_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/errors.hpp"
#include "core/plan.hpp"
#include "tune/tuner.hpp"

namespace zinf::tune {

using core::RunConfig;
using core::Tier;

namespace {

bool has_tier_knobs(const RunConfig& c) {
  return c.tiling_factor == 0 || c.params.automatic || c.gradients.automatic || c.optimizer.automatic ||
         (c.checkpoints.automatic && c.checkpoint_interval > 0);
}

// Combinations planned before the config goes to the planner's own `auto`: each refused one costs
// a plan, and the closed form's first is nearly always accepted.
constexpr size_t kPlansTried = 4;

// The tuner's enumeration restricted to what `config` leaves to auto: every other knob is held at
// its value (tiling among them: the planner's own rule decides an `auto` factor).
TuneRequest tier_request(const core::ModelSpec& model, const core::HwProfile& hw, int nodes, const RunConfig& config) {
  TuneRequest req;
  req.model = model;
  req.hw = hw;
  req.nodes = nodes;
  req.base = config;
  const std::vector<Tier> all = {Tier::Device, Tier::Host, Tier::Nvme};
  TuneSpace& s = req.space;
  // Parameters and gradients move together unless one of them is fixed.
  if (config.params.automatic && config.gradients.automatic) s.params_tiers = all;
  else if (config.params.automatic) s.params_tiers = {config.gradients.tier};
  else s.params_tiers = {config.params.tier};
  if (!config.gradients.automatic) s.gradients_tier = config.gradients.tier;
  s.optimizer_tiers = config.optimizer.automatic ? all : std::vector<Tier>{config.optimizer.tier};
  s.checkpoint_intervals = {config.checkpoint_interval};
  s.checkpoint_tiers = config.checkpoints.automatic && config.checkpoint_interval > 0 ? all
                                                                                      : std::vector<Tier>{config.checkpoints.tier};
  if (config.tiling_factor > 0) s.tiling_factors = {config.tiling_factor};
  s.micro_batches = {config.micro_batch.value_or(model.micro_batch)};
  s.live_bytes = {config.max_live_bytes};
  s.partitionings = {config.partitioning};
  s.tensor_parallels = {config.tensor_parallel};
  s.expert_parallels = {config.expert_parallel};
  s.node_counts = {nodes};
  s.prefetch = {{config.nvme_prefetch_distance, config.h2d_prefetch_distance, config.allgather_prefetch_distance}};
  s.sub_group_sizes = {config.sub_group_size};
  s.timings = {config.optimizer_timing};
  return req;
}

// `config` with the tiers of `chosen` where it says auto; tiling stays as the config gives it.
RunConfig with_tiers(RunConfig config, const RunConfig& chosen) {
  if (config.params.automatic) config.params = {false, chosen.params.tier};
  if (config.gradients.automatic) config.gradients = {false, chosen.gradients.tier};
  if (config.optimizer.automatic) config.optimizer = {false, chosen.optimizer.tier};
  if (config.checkpoints.automatic) config.checkpoints = {false, chosen.checkpoints.tier};
  return config;
}

// Which model states a config keeps on the device (params, gradients, optimizer, checkpoints).
using DeviceStates = std::array<bool, 4>;
DeviceStates on_device(const RunConfig& c) {
  return {c.params.tier == Tier::Device, c.gradients.tier == Tier::Device, c.optimizer.tier == Tier::Device,
          c.checkpoints.tier == Tier::Device};
}

// A candidate that keeps on the device every state a refused one kept there, the refusal short on
// the device by more than kSkipMargin of its budget, is skipped unplanned: states moved between
// host and NVMe leave the device's peak within a fraction of a percent of where it was (the same
// units are gathered, the same gradients reduced; tests/tuner_test.cpp checks it), so the planner
// would refuse it too, after as many schedules (an `auto` tiling factor is doubled three times).
bool keeps_all_of_a_refused(const DeviceStates& candidate, const std::vector<DeviceStates>& refused) {
  return std::any_of(refused.begin(), refused.end(), [&](const DeviceStates& r) {
    for (size_t i = 0; i < r.size(); ++i)
      if (r[i] && !candidate[i]) return false;
    return true;
  });
}

std::string chosen_text(const RunConfig& asked, const RunConfig& b, int64_t tiling) {
  std::vector<std::string> parts;
  if (asked.params.automatic) parts.push_back(fmt::format("params {}", core::to_string(b.params.tier)));
  if (asked.gradients.automatic) parts.push_back(fmt::format("gradients {}", core::to_string(b.gradients.tier)));
  if (asked.optimizer.automatic) parts.push_back(fmt::format("optimizer {}", core::to_string(b.optimizer.tier)));
  if (asked.checkpoints.automatic && asked.checkpoint_interval > 0)
    parts.push_back(fmt::format("checkpoints {}", core::to_string(b.checkpoints.tier)));
  if (asked.tiling_factor == 0) parts.push_back(fmt::format("tiling {}", tiling));
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out;
}

}  // namespace

bool activation_choice_open(const RunConfig& c) {
  return c.activation_policy == core::ActivationPolicy::Lifetime && c.activation_tier.automatic;
}

bool has_auto_knobs(const RunConfig& c) { return has_tier_knobs(c) || activation_choice_open(c); }

AutoResolution resolve_auto(const core::ModelSpec& model, const core::HwProfile& hw, int nodes, const RunConfig& config) {
  AutoResolution r;
  r.config = config;
  if (!has_tier_knobs(config)) return r;
  std::vector<TuneEntry> ranked;
  try {
    ranked = ranked_candidates(tier_request(model, hw, nodes, config));
  } catch (const std::invalid_argument&) {
    return r;  // no candidate to order (a batch the ranks cannot split): the planner says why
  }
  const int ranks = nodes * hw.node.gpus;
  size_t tried = 0, skipped = 0;
  std::vector<DeviceStates> device_short;  // what refused candidates kept on the device, short there
  for (const TuneEntry& e : ranked) {
    if (tried == kPlansTried) break;
    const RunConfig c = with_tiers(config, e.candidate.config);
    if (keeps_all_of_a_refused(on_device(c), device_short)) {
      ++skipped;
      continue;
    }
    ++tried;
    try {
      auto planned = std::make_shared<models::GptPlan>(models::plan_gpt(model, hw, c, ranks));
      r.config = c;
      r.config.tiling_factor = planned->planned.plan.tiling_factor;
      r.planned = std::move(planned);
      r.searched = true;
      r.summary = fmt::format("auto, by the closed form: {} — the {} of {} combinations by estimated step ({:.4g} s), "
                              "the first the planner accepts ({} planned{}){}",
                              chosen_text(config, c, r.config.tiling_factor), e.memory_fits ? "fastest fitting" : "closest",
                              ranked.size(), e.estimate.step_time, tried,
                              skipped ? fmt::format(", {} skipped: they keep on the device all that a refused one did", skipped) : "",
                              config.tiling_factor == 0 ? "; tiling by the planner's own rule" : "");
      return r;
    } catch (const core::PlanError& err) {
      const core::Fit* fit = err.fit();
      if (fit && !fit->fits() && fit->tier == Tier::Device &&
          fit->shortfall > kSkipMargin * fit->accounting.at(Tier::Device).budget)
        device_short.push_back(on_device(c));
    }
  }
  return r;  // none of the first few: the planner's own auto decides, or says why not
}

AutoResolution resolve_auto_for_ranks(const core::ModelSpec& model, const core::HwProfile& hw, int ranks,
                                      const core::RunConfig& config) {
  const int gpus = std::max(1, hw.node.gpus);
  if (ranks % gpus != 0) return {config, false, "", nullptr};
  return resolve_auto(model, hw, ranks / gpus, config);
}

std::vector<std::pair<std::string, RunConfig>> activation_alternatives(const RunConfig& config, const core::HwProfile& hw) {
  std::vector<std::pair<std::string, RunConfig>> out;
  if (!activation_choice_open(config)) return out;
  out.push_back({fmt::format("activations: the pass's own (host or NVMe per {})", config.activation_per_tensor ? "tensor" : "block"),
                 config});
  if (config.activation_per_tensor) {
    RunConfig blocks = config;
    blocks.activation_per_tensor = false;
    out.push_back({"activations: the pass's own per block", blocks});
  }
  RunConfig host = config;
  host.activation_tier = {false, Tier::Host};
  out.push_back({"activations: host only", host});
  if (hw.nvme_budget() > 0) {
    RunConfig nvme = config;
    nvme.activation_tier = {false, Tier::Nvme};
    out.push_back({hw.node.has_gds() ? "activations: NVMe only (over GDS)" : "activations: NVMe only", nvme});
  }
  RunConfig recompute = config;
  recompute.activation_policy = core::ActivationPolicy::None;
  recompute.checkpoint_interval = std::max<int64_t>(1, recompute.checkpoint_interval);
  out.push_back({"activations: checkpoint and recompute", recompute});
  return out;
}

}  // namespace zinf::tune
