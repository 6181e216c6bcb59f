// Whether a run fits, decided once. The Program's accounting (what makes each tier's peak: model
// states, working memory, staging and buffers, activations kept and offloaded, checkpoints) and the
// one verdict drawn from it: it fits, or a tier is short by so much, its largest item is this and
// that knob moves it; or the configuration is refused outright, for a reason that is not memory.
//
// The planner builds the accounting and throws its refusals through judge_fit (a PlanError carries
// the Fit); `zinf plan`, `sim`, `tune`, `train` and the DeepSpeed reader report it through fit_of,
// so they cannot disagree on whether a configuration fits, on which tier, or by how much.
// Bytes are per rank, as the Program's budget is: a node's host and NVMe are its GPUs' ranks'
// shares together (budget and peak per node = per rank x GPUs per node).
// Pure functions, thread-safe.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/program.hpp"
#include "core/run_config.hpp"

namespace zinf::core {

// The headings of a tier's peak.
enum class MemCategory : uint8_t { States, WorkingMemory, Staging, ActivationsKept, ActivationsOffloaded, Checkpoints };
inline constexpr int kMemCategoryCount = 6;
const char* to_string(MemCategory c);
MemCategory category_of(MemUse u);

// What an item is: a state's home (resident all step), NVMe room for a saved training checkpoint,
// or live buffers of one MemUse.
enum class ItemKind : uint8_t { ParamHome, GradHome, OptimizerHome, SavedCheckpointRoom, Live };

// One thing a tier holds at its peak: "optimizer states", "gathered parameters", ...
struct MemoryItem {
  std::string what;
  MemCategory category = MemCategory::States;
  double bytes = 0;  // per rank
  ItemKind kind = ItemKind::Live;
  MemUse use = MemUse::Unstated;  // Live items
};
MemoryItem state_item(ItemKind kind, double bytes);
MemoryItem live_item(MemUse use, double bytes);

// One tier of one rank at its peak: the items sum to `peak`.
struct TierAccount {
  double peak = 0;
  double budget = 0;
  int rank = 0;  // the rank whose peak this is (owner-based programs differ per rank)
  std::vector<MemoryItem> items;
  double category_bytes(MemCategory c) const;
  const MemoryItem* largest() const;  // nullptr when empty
};

// The Program's accounting: per tier (indexed by Tier), for one rank; ranks_per_node (the ranks
// sharing a node's host memory and NVMe: its GPUs, or fewer on a cluster smaller than a node) turns
// the host and NVMe figures into the node's.
struct Accounting {
  std::array<TierAccount, 3> tiers{};
  int ranks_per_node = 1;
  // False when the planner refused on the states alone, before scheduling anything: the peak is
  // then the static bytes, a lower bound of what the step would need.
  bool scheduled = true;
  const TierAccount& at(Tier t) const { return tiers[static_cast<size_t>(t)]; }
  TierAccount& at(Tier t) { return tiers[static_cast<size_t>(t)]; }
  // A tier's figure as a user reads it: per GPU for the device, per node for host and NVMe.
  double shown(Tier t, double per_rank) const { return t == Tier::Device ? per_rank : per_rank * ranks_per_node; }
};

enum class Verdict : uint8_t { Fits, Short, Refused };
const char* to_string(Verdict v);

struct Fit {
  Verdict verdict = Verdict::Fits;
  // Short: the first short tier (device, host, NVMe in that order), by how much per rank, its
  // largest item and the run-config knob that moves that item.
  Tier tier = Tier::Device;
  double shortfall = 0;
  MemoryItem largest;
  std::string knob;
  std::string reason;     // Refused: why (the planner's or the model's words)
  Accounting accounting;  // empty for a refusal made before anything was planned
  bool fits() const { return verdict == Verdict::Fits; }
  // One line: "fits", "device is short by 216 GB per rank (216 GB per GPU) at the step's peak
  // (244 GB needed, 27.5 GB budget); the largest item is activations kept (242 GB): set ...", or
  // "refused: <reason>".
  std::string message() const;
};

// The verdict on an accounting. `config` is what was planned: the knob depends on it (an interval
// of 0 asks for checkpointing, a longer one for a shorter interval, and so on).
Fit judge_fit(const Accounting& accounting, const RunConfig& config);
// A refusal for a reason that is not memory (an invalid combination, a degree that does not divide).
Fit refused_fit(std::string reason);

// The Fit a PlanError carries (a Short one from the planner's budget checks), or a refusal with its
// message for one that carries none.
Fit fit_of(const PlanError& e);
// Throws the PlanError for `fit` (its message, and the Fit with it).
[[noreturn]] void throw_fit(const Fit& fit);

}  // namespace zinf::core
