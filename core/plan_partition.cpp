// The partition pass (core/plan_state.hpp): the inputs checked, the budgets per rank, parameter groups
// cut into units (`tiling_factor` tiles of rows each where a linear is tileable; a vocabulary-wide
// weight into core::vocabulary_tiles tiles along the vocabulary), and each unit's shard
// (bandwidth-centric) or owner (owner-based); the bytes each rank keeps for the whole step.
#include "core/plan_state.hpp"

#include "core/memory_model.hpp"

#include <algorithm>
#include <queue>
#include <utility>

namespace zinf::core::planning {

namespace {

// Expert parallelism E: E divides the data-parallel ranks (groups of E) and the experts (experts / E
// on each rank of a group). Refused beside what it is not planned with, naming expert_parallel.
void check_expert_parallel(const PlanState& ps) {
  const int64_t E = ps.config_.expert_parallel;
  if (E <= 1) return;
  const int64_t experts = ps.graph_.spec.experts;
  if (experts <= 0)
    throw PlanError(fmt::format("expert_parallel {}: {} has no routed experts to split; set expert_parallel: 1", E,
                                ps.graph_.spec.name.empty() ? std::string("the model") : ps.graph_.spec.name));
  if (ps.data_parallel_ % E != 0)
    throw PlanError(fmt::format("expert_parallel {} does not divide the {} data-parallel ranks: an expert-parallel "
                                "group is E of them; choose a divisor of {}",
                                E, ps.data_parallel_, ps.data_parallel_));
  if (experts % E != 0)
    throw PlanError(fmt::format("expert_parallel {} does not divide the model's {} routed experts: each rank of a "
                                "group holds experts / E of them; choose a divisor of {}",
                                E, experts, experts));
  const int G = std::max(1, ps.hw_.node.gpus);
  if (E > G && ps.ranks_ > G)
    throw PlanError(fmt::format("expert_parallel {} spans nodes of {} GPUs: an expert-parallel group larger than a node "
                                "is not planned (its expert-data-parallel groups would stride across nodes); choose "
                                "at most {}",
                                E, G, G));
  if (ps.tensor_parallel_ > 1)
    throw PlanError(fmt::format("expert_parallel {} with tensor_parallel {} is not planned: set one of them to 1", E,
                                ps.tensor_parallel_));
  if (ps.config_.partitioning == Partitioning::OwnerBased)
    throw PlanError(fmt::format("expert_parallel {} is planned with bandwidth-centric partitioning only; set "
                                "partitioning: bandwidth-centric", E));
  if (ps.config_.zero_stage < 3)
    throw PlanError(fmt::format("expert_parallel {} is planned with zero_stage 3 only (the memory model counts stages "
                                "0-2, the Program's gather of updated parameters has no expert groups); set zero_stage: 3",
                                E));
}

}  // namespace

void basics(PlanState& ps) {
  if (ps.ranks_ < 1) throw PlanError(fmt::format("ranks must be at least 1, got {}", ps.ranks_));
  if (ps.graph_.ops.empty()) throw PlanError("the model graph has no operators");
  if (ps.config_.tensor_parallel != ps.tensor_parallel_)
    throw PlanError(fmt::format("the run config's tensor_parallel {} differs from the model graph's {}; build the graph "
                                "with the degree it trains with",
                                ps.config_.tensor_parallel, ps.tensor_parallel_));
  if (ps.tensor_parallel_ > 1) {
    const int G = std::max(1, ps.hw_.node.gpus);
    if (ps.ranks_ % ps.tensor_parallel_ != 0)
      throw PlanError(fmt::format("tensor_parallel {} does not divide the {} ranks", ps.tensor_parallel_, ps.ranks_));
    if (std::min(G, ps.ranks_) % ps.tensor_parallel_ != 0)
      throw PlanError(fmt::format("tensor_parallel {} must divide the {} GPUs of a node: a tensor-parallel group stays "
                                  "inside one node",
                                  ps.tensor_parallel_, std::min(G, ps.ranks_)));
    if (ps.config_.partitioning == Partitioning::OwnerBased)
      throw PlanError("tensor parallelism is planned with bandwidth-centric partitioning only; "
                      "set partitioning: bandwidth-centric");
  }
  check_expert_parallel(ps);
  ps.plan_.ranks = ps.ranks_;
  ps.plan_.gpus_per_node = std::max(1, ps.hw_.node.gpus);
  ps.plan_.nodes = static_cast<int>(ceil_div(ps.ranks_, ps.plan_.gpus_per_node));
  ps.plan_.partitioning = ps.config_.partitioning;
  ps.plan_.zero_stage = ps.config_.zero_stage;
  ps.plan_.checkpoint_interval = ps.config_.checkpoint_interval;
  ps.plan_.micro_batches = ps.config_.gradient_accumulation;
  ps.plan_.nvme_prefetch_distance = ps.config_.nvme_prefetch_distance;
  ps.plan_.h2d_prefetch_distance = ps.config_.h2d_prefetch_distance;
  ps.plan_.allgather_prefetch_distance = ps.config_.allgather_prefetch_distance;
  ps.plan_.max_live_bytes = ps.config_.max_live_bytes;
  ps.plan_.reuse_distance_bytes = ps.config_.reuse_distance_bytes;
  ps.plan_.sub_group_size = shard_aligned(std::max<int64_t>(1, ps.config_.sub_group_size));
  ps.plan_.optimizer_timing = ps.config_.optimizer_timing;
  // fp16's overflow check is the same all-reduced sum of squares: non-finite on any rank skips the step.
  ps.plan_.grad_clip = ps.config_.grad_clip > 0 || ps.config_.precision == Precision::Fp16;
  ps.plan_.total_params = ps.graph_.total_params();
  // Host memory and NVMe are shared by the ranks of a node; each rank gets its share.
  const double per_node = double(std::min(ps.plan_.gpus_per_node, ps.ranks_));
  ps.plan_.budget = {ps.hw_.gpu_budget(), ps.hw_.host_budget() / per_node, ps.hw_.nvme_budget() / per_node};
  if (ps.config_.micro_batch && *ps.config_.micro_batch != ps.graph_.spec.micro_batch)
    throw PlanError(fmt::format("the run config's micro_batch {} differs from the model graph's {}; build the graph "
                                "with the micro-batch it trains with",
                                *ps.config_.micro_batch, ps.graph_.spec.micro_batch));
}

namespace {

// Tiles a parameter group is cut into when `tiles` are wanted (1 where it cannot be tiled).
int64_t tiles_of(const ParamGroup& pg, int64_t tiles) {
  if (pg.tileable && tiles > 1 && pg.rows > 1 && pg.numel % pg.rows == 0) return std::min<int64_t>(tiles, pg.rows);
  return 1;
}

// A bound on what a Program may hold: each unit is several tasks per micro-batch (7 to 13 as planned
// here; about 600 bytes each in memory), so a tiling factor or an accumulation far beyond any useful
// one is refused up front, with the figure and the keys that lower it, before anything is built.
constexpr double kMaxTasksPerRank = 8e6;
constexpr double kTasksPerUnitStep = 7;

void check_task_bound(const PlanState& ps, int64_t tiles, int64_t vocab_tiles) {
  int64_t units = 0;
  for (const auto& pg : ps.graph_.params) units += tiles_of(pg, pg.vocabulary ? vocab_tiles : tiles);
  const double micro_batches = double(std::max<int64_t>(1, ps.config_.gradient_accumulation));
  const double tasks = double(units) * micro_batches * kTasksPerUnitStep;
  if (tasks <= kMaxTasksPerRank) return;
  throw PlanError(fmt::format(
      "tiling factor {} cuts the model into {} units; with {} micro-batches per step the Program would hold about "
      "{:.3g} tasks per rank, above zinf's bound of {:.0e}: lower tiling_factor or gradient_accumulation "
      "(gradient_accumulation_steps in a DeepSpeed config)",
      tiles, units, int64_t(micro_batches), tasks, kMaxTasksPerRank));
}

}  // namespace

void make_units(PlanState& ps, int64_t tiles) {
  // The vocabulary-wide weights are tiled to the size of the largest linear's tiles.
  int64_t largest_linear = 0, vocab_tiles = 1;
  for (const auto& pg : ps.graph_.params)
    if (pg.tileable && !pg.vocabulary) largest_linear = std::max(largest_linear, pg.numel);
  std::string vocab_reason = "the model has no vocabulary-wide weight";
  for (const auto& pg : ps.graph_.params) {
    if (!pg.vocabulary) continue;
    vocab_tiles = vocabulary_tiles(pg.rows, pg.numel, largest_linear, tiles, ps.config_.vocabulary_tiles);
    vocab_reason = ps.config_.vocabulary_tiles > 0
                       ? fmt::format("fixed by the run config ({} rows of {} per tile)", ceil_div(pg.rows, vocab_tiles), pg.rows)
                       : fmt::format("auto: tiling factor {} x the power of two that brings {} ({} elements) to the "
                                     "largest linear's {} ({} rows of {} per tile)",
                                     tiles, pg.name, pg.numel, largest_linear, ceil_div(pg.rows, vocab_tiles), pg.rows);
  }
  check_task_bound(ps, tiles, vocab_tiles);
  ps.units_.clear();
  ps.group_units_.assign(ps.graph_.params.size(), {});
  ps.plan_.vocabulary_tiles = vocab_tiles;
  ps.plan_.vocabulary_tiles_reason = vocab_reason;
  for (const auto& pg : ps.graph_.params) {
    const int64_t t = tiles_of(pg, pg.vocabulary ? vocab_tiles : tiles);
    const int64_t per_row = pg.rows > 0 && pg.numel % pg.rows == 0 ? pg.numel / pg.rows : 0;
    const int64_t rows_per_tile = ceil_div(pg.rows, t);
    for (int64_t i = 0; i < t; ++i) {
      ParamUnit u;
      u.id = static_cast<int32_t>(ps.units_.size());
      u.group = pg.id;
      u.tile = static_cast<int32_t>(i);
      u.tiles = static_cast<int32_t>(t);
      u.row_begin = std::min(pg.rows, i * rows_per_tile);
      u.row_end = std::min(pg.rows, (i + 1) * rows_per_tile);
      u.numel = t == 1 ? pg.numel : (u.row_end - u.row_begin) * per_row;
      u.name = t == 1 ? pg.name : fmt::format("{}[t{}/{}]", pg.name, i, t);
      // Expert parallelism: this rank's slice, experts / E of the layer's routed experts.
      if (pg.experts && ps.expert_parallel_ > 1) {
        u.expert = true;
        u.numel /= ps.expert_parallel_;
      }
      if (u.numel == 0) continue;
      u.id = static_cast<int32_t>(ps.units_.size());
      ps.group_units_[static_cast<size_t>(pg.id)].push_back(u.id);
      ps.units_.push_back(u);
    }
  }
  // Shards: partitioned states are split in `ranks` equal padded shards (bandwidth-centric) or owned
  // whole by the least-loaded rank (owner-based, ZeRO-Offload style). Stage 0 keeps everything whole.
  // The data-parallel group (an expert slice: its expert-data-parallel group) shares each unit.
  int64_t offset = 0;
  for (auto& u : ps.units_) {
    u.shard_numel = ceil_div(u.numel, ps.config_.zero_stage >= 1 ? ps.unit_parts(u) : 1);
    u.shard_offset = offset;
    offset = shard_aligned(offset + u.shard_numel);
  }
  ps.shard_space_ = offset;
  ps.owned_elems_.assign(static_cast<size_t>(ps.ranks_), 0);
  if (ps.owner_based()) {
    using Load = std::pair<int64_t, int32_t>;
    std::priority_queue<Load, std::vector<Load>, std::greater<>> heap;
    for (int32_t r = 0; r < ps.ranks_; ++r) heap.push({0, r});
    for (auto& u : ps.units_) {
      auto [load, r] = heap.top();
      heap.pop();
      u.owner = r;
      u.owner_offset = load;
      const int64_t end = shard_aligned(load + u.numel);
      heap.push({end, r});
      ps.owned_elems_[static_cast<size_t>(r)] = end;
    }
  }
}

// What one rank keeps for the whole step, item by item, with the tier of each.
std::vector<std::pair<Tier, MemoryItem>> static_items_for(const PlanState& ps, int rank) {
  int64_t all = 0;
  for (const auto& u : ps.units_) all += u.numel;
  const int64_t mine = ps.owner_based() ? ps.owned_elems_[static_cast<size_t>(rank)] : ps.shard_space_;
  const double params = double(ps.params_partitioned() ? mine : all);
  const double grads = double(ps.grads_partitioned() ? mine : all);
  const double optim = double(ps.config_.zero_stage >= 1 ? mine : all);
  std::vector<std::pair<Tier, MemoryItem>> items;
  items.push_back({ps.plan_.params, state_item(ItemKind::ParamHome, ps.param_bytes_ * params)});
  if (ps.forward_only_ && !ps.beside_training_) return items;  // a forward pass alone: the parameters are all
  items.push_back({ps.plan_.gradients, state_item(ItemKind::GradHome, (ps.plan_.gradients == Tier::Device ? ps.grad_bytes_
                                                                                                      : ps.moved_grad_bytes()) * grads)});
  items.push_back({ps.plan_.optimizer, state_item(ItemKind::OptimizerHome, ps.state_bytes_ * optim)});
  // Room for one saved training checkpoint (the parameters and the optimizer's fp32 states; bf16
  // with Adam: 14 bytes) on the NVMe array that holds the model states: a run that cannot save is
  // not a run (as the memory model counts it).
  if (ps.config_.reserve_nvme_for_checkpoint && (ps.plan_.params == Tier::Nvme || ps.plan_.optimizer == Tier::Nvme))
    items.push_back({Tier::Nvme, state_item(ItemKind::SavedCheckpointRoom, (ps.param_bytes_ + ps.state_bytes_) * optim)});
  return items;
}

// Bytes one rank keeps for the whole step, per tier.
PerTier static_bytes_for(const PlanState& ps, int rank) {
  PerTier s{};
  for (const auto& [tier, item] : static_items_for(ps, rank)) at(s, tier) += item.bytes;
  return s;
}

Accounting accounting_for(const PlanState& ps, const PeakComposition& peaks) {
  Accounting acc;
  acc.ranks_per_node = std::max(1, std::min(ps.plan_.gpus_per_node, ps.ranks_));
  for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
    TierAccount& a = acc.at(t);
    const TierPeak& p = peaks[static_cast<size_t>(t)];
    a.peak = p.bytes;
    a.budget = at(ps.plan_.budget, t);
    a.rank = p.rank;
    for (const auto& [tier, item] : static_items_for(ps, p.rank))
      if (tier == t && item.bytes > 0) a.items.push_back(item);
    for (int u = 0; u < kMemUseCount; ++u)
      if (p.live[static_cast<size_t>(u)] > 0.5) a.items.push_back(live_item(static_cast<MemUse>(u), p.live[static_cast<size_t>(u)]));
  }
  return acc;
}

PeakComposition static_peaks(const PlanState& ps) {
  PeakComposition out{};
  const int ranks = ps.owner_based() ? ps.ranks_ : 1;
  for (int r = 0; r < ranks; ++r) {
    const PerTier s = static_bytes_for(ps, r);
    for (size_t i = 0; i < 3; ++i)
      if (r == 0 || s[i] > out[i].bytes) out[i] = {s[i], {}, r};
  }
  return out;
}

PerTier max_static(const PlanState& ps) {
  PerTier m = static_bytes_for(ps, 0);
  if (ps.owner_based())
    for (int r = 1; r < ps.ranks_; ++r) {
      PerTier s = static_bytes_for(ps, r);
      for (int i = 0; i < 3; ++i) m[static_cast<size_t>(i)] = std::max(m[static_cast<size_t>(i)], s[static_cast<size_t>(i)]);
    }
  return m;
}

}  // namespace zinf::core::planning
