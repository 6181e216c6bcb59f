#include "core/fit.hpp"

#include <fmt/format.h>

#include "core/units.hpp"

namespace zinf::core {

const char* to_string(MemCategory c) {
  switch (c) {
    case MemCategory::States: return "model states";
    case MemCategory::WorkingMemory: return "working memory";
    case MemCategory::Staging: return "staging and buffers";
    case MemCategory::ActivationsKept: return "activations kept";
    case MemCategory::ActivationsOffloaded: return "activations offloaded";
    case MemCategory::Checkpoints: return "activation checkpoints";
  }
  return "?";
}

MemCategory category_of(MemUse u) {
  switch (u) {
    case MemUse::ParamGathered:
    case MemUse::GradWorking:
    case MemUse::ActivationGrad: return MemCategory::WorkingMemory;
    case MemUse::Unstated:
    case MemUse::ParamStaging:
    case MemUse::GradStaging:
    case MemUse::OptimizerInFlight: return MemCategory::Staging;
    case MemUse::ActivationKept: return MemCategory::ActivationsKept;
    case MemUse::ActivationOffloaded: return MemCategory::ActivationsOffloaded;
    case MemUse::Checkpoint: return MemCategory::Checkpoints;
  }
  return MemCategory::Staging;
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::Fits: return "fits";
    case Verdict::Short: return "short";
    case Verdict::Refused: return "refused";
  }
  return "?";
}

MemoryItem state_item(ItemKind kind, double bytes) {
  const char* what = "?";
  switch (kind) {
    case ItemKind::ParamHome: what = "parameters (home shards)"; break;
    case ItemKind::GradHome: what = "gradients (home shards)"; break;
    case ItemKind::OptimizerHome: what = "optimizer states (fp32 master, m, v)"; break;
    case ItemKind::SavedCheckpointRoom: what = "room for a saved checkpoint"; break;
    case ItemKind::Live: break;
  }
  return {what, MemCategory::States, bytes, kind, MemUse::Unstated};
}

MemoryItem live_item(MemUse use, double bytes) { return {to_string(use), category_of(use), bytes, ItemKind::Live, use}; }

double TierAccount::category_bytes(MemCategory c) const {
  double b = 0;
  for (const auto& i : items)
    if (i.category == c) b += i.bytes;
  return b;
}

const MemoryItem* TierAccount::largest() const {
  const MemoryItem* best = nullptr;
  for (const auto& i : items)
    if (!best || i.bytes > best->bytes) best = &i;
  return best;
}

namespace {

// The same knobs as DeepSpeed's keys, for a config read from a DeepSpeed file; empty where DeepSpeed
// has no key for it (zinf's run-config key is named then, said as such).
std::string deepspeed_knob_for(const MemoryItem& item, Tier tier, const RunConfig& c) {
  const bool dev = tier == Tier::Device, host = tier == Tier::Host;
  const std::string more_nodes = "more nodes (each rank holds 1/N)";
  const std::string micro = "train_micro_batch_size_per_gpu (lower)";
  switch (item.kind) {
    case ItemKind::ParamHome:
      if (dev && c.zero_stage < 3)
        return "zero_optimization.stage: 3 (partition the parameters), then zero_optimization.offload_param.device: cpu or nvme";
      return dev ? "zero_optimization.offload_param.device: cpu (or nvme)"
                 : host ? "zero_optimization.offload_param.device: nvme" : more_nodes;
    case ItemKind::GradHome:
      if (dev && c.zero_stage < 2) return "zero_optimization.stage: 2 or 3 (partition the gradients)";
      return dev ? "zero_optimization.offload_param.device: cpu (gradients stay with the parameters)" : more_nodes;
    case ItemKind::OptimizerHome:
      if (dev && c.zero_stage < 1) return "zero_optimization.stage: 1 or more (partition the optimizer states)";
      return dev ? "zero_optimization.offload_optimizer.device: cpu (or nvme)"
                 : host ? "zero_optimization.offload_optimizer.device: nvme" : more_nodes;
    case ItemKind::SavedCheckpointRoom: return "more nodes (zinf keeps room on NVMe to save one checkpoint)";
    case ItemKind::Live: break;
  }
  switch (item.use) {
    case MemUse::ParamGathered: return "zero_optimization.stage3_max_live_parameters (lower)";
    case MemUse::OptimizerInFlight: return "zero_optimization.sub_group_size (lower)";
    case MemUse::ActivationKept:
      // Checkpointing first: it frees the most for the least.
      if (c.checkpoint_interval == 0)
        return "an activation_checkpointing section (a checkpoint per block, recomputed in backward), or " + micro;
      return micro;
    case MemUse::Checkpoint:
      if (dev) return "activation_checkpointing.cpu_checkpointing: true";
      return micro + ", or " + more_nodes;
    case MemUse::ActivationGrad: return micro;
    case MemUse::GradWorking:
    case MemUse::ParamStaging:
    case MemUse::GradStaging:
    case MemUse::ActivationOffloaded: return "";
    case MemUse::Unstated: break;
  }
  return micro + ", or " + more_nodes;
}

// The run-config knob that makes `item` on `tier` smaller, given what was planned.
std::string zinf_knob_for(const MemoryItem& item, Tier tier, const RunConfig& c) {
  const bool dev = tier == Tier::Device, host = tier == Tier::Host;
  switch (item.kind) {
    case ItemKind::ParamHome:
      if (dev && c.zero_stage < 3) return "zero_stage: 3 (partition the parameters), then offload.params: cpu or nvme";
      return dev ? "offload.params: cpu (or nvme)" : host ? "offload.params: nvme" : "more nodes (each rank holds 1/N)";
    case ItemKind::GradHome:
      if (dev && c.zero_stage < 2) return "zero_stage: 2 or 3 (partition the gradients)";
      return dev ? "offload.gradients: cpu (or nvme)" : host ? "offload.gradients: nvme" : "more nodes (each rank holds 1/N)";
    case ItemKind::OptimizerHome:
      if (dev && c.zero_stage < 1) return "zero_stage: 1 or more (partition the optimizer states)";
      return dev ? "offload.optimizer: cpu (or nvme)" : host ? "offload.optimizer: nvme" : "more nodes (each rank holds 1/N)";
    case ItemKind::SavedCheckpointRoom: return "reserve_nvme_for_checkpoint: false, or more nodes";
    case ItemKind::Live: break;
  }
  switch (item.use) {
    case MemUse::ParamGathered: return "prefetch.max_live_bytes (lower), or tiling_factor (higher: smaller units)";
    case MemUse::GradWorking: return "tiling_factor (higher: smaller units), or gradient_stores_in_flight (lower)";
    case MemUse::ActivationGrad: return "micro_batch (lower)";
    case MemUse::ParamStaging: return "prefetch.nvme_distance (lower)";
    case MemUse::GradStaging: return "gradient_stores_in_flight (lower)";
    case MemUse::OptimizerInFlight: return "optimizer.sub_groups_in_flight or optimizer.sub_group_size (lower)";
    case MemUse::ActivationKept:
      // Checkpointing first: it frees the most for the least.
      if (c.checkpoint_interval == 0 && c.activation_policy == ActivationPolicy::None)
        return "activation_checkpoint.interval: 1 (checkpoint every block and recompute), or activation_offload.policy: lifetime";
      if (c.checkpoint_interval > 1) return "activation_checkpoint.interval (lower: fewer blocks' activations at once)";
      if (c.activation_policy == ActivationPolicy::None) return "activation_offload.policy: lifetime, or micro_batch (lower)";
      return "micro_batch (lower)";
    case MemUse::ActivationOffloaded: return host ? "activation_offload.tier: nvme" : "micro_batch (lower), or more nodes";
    case MemUse::Checkpoint:
      if (dev) return "activation_checkpoint.tier: cpu (or nvme)";
      if (host) return "activation_checkpoint.tier: nvme, or activation_checkpoint.interval (higher)";
      return "activation_checkpoint.interval (higher)";
    case MemUse::Unstated: break;
  }
  return "a smaller micro_batch or more nodes";
}

// The knob that makes `item` on `tier` smaller, in the keys of the file the config came from.
std::string knob_for(const MemoryItem& item, Tier tier, const RunConfig& c) {
  if (!c.deepspeed_keys) return zinf_knob_for(item, tier, c);
  std::string k = deepspeed_knob_for(item, tier, c);
  return k.empty() ? zinf_knob_for(item, tier, c) + " (a zinf run-config key: DeepSpeed has none for it)" : k;
}

}  // namespace

Fit judge_fit(const Accounting& acc, const RunConfig& config) {
  Fit f;
  f.accounting = acc;
  for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
    const TierAccount& a = acc.at(t);
    const double over = a.peak - a.budget;
    if (over <= 0) continue;
    f.verdict = Verdict::Short;
    f.tier = t;
    f.shortfall = over;
    if (const MemoryItem* l = a.largest()) {
      f.largest = *l;
      f.knob = knob_for(*l, t, config);
    }
    return f;
  }
  return f;
}

Fit refused_fit(std::string reason) {
  Fit f;
  f.verdict = Verdict::Refused;
  f.reason = std::move(reason);
  return f;
}

std::string Fit::message() const {
  switch (verdict) {
    case Verdict::Fits: return "fits";
    case Verdict::Refused: return "refused: " + reason;
    case Verdict::Short: break;
  }
  const TierAccount& a = accounting.at(tier);
  const std::string node =
      tier == Tier::Device ? "per GPU" : fmt::format("{} per node", format_bytes(accounting.shown(tier, shortfall)));
  std::string m =
      accounting.scheduled
          ? fmt::format("{} is short by {} per rank ({}) at the step's peak ({} needed, {} budget)", to_string(tier),
                        format_bytes(shortfall), node, format_bytes(a.peak), format_bytes(a.budget))
          : fmt::format("{} is short by at least {} per rank ({}): the states placed there need {} of its {} budget before "
                        "anything else",
                        to_string(tier), format_bytes(shortfall), node, format_bytes(a.peak), format_bytes(a.budget));
  if (!largest.what.empty())
    m += fmt::format("; the largest item is {} ({}): {}", largest.what, format_bytes(largest.bytes), knob);
  return m;
}

Fit fit_of(const PlanError& e) { return e.fit() ? *e.fit() : refused_fit(e.what()); }

void throw_fit(const Fit& fit) {
  throw PlanError(fit.verdict == Verdict::Refused ? fit.reason : fit.message(), std::make_shared<const Fit>(fit));
}

}  // namespace zinf::core
