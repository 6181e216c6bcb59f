// The memory model of the ZeRO-Infinity paper (§3): where the bytes of a training run go, per tier,
// for a placement of model states and activation checkpoints, and the bandwidth efficiency model of
// §4. Closed-form in the number of layers, so that "the largest model that fits" is a binary search
// that answers in microseconds even for 32T parameters on 512 GPUs. Pure functions, thread-safe.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/fit.hpp"
#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/run_config.hpp"

namespace zinf::core {

// The five strategies the paper compares (Fig. 1, Table 1).
enum class Strategy { DataParallel, ZeroOffload, Zero3, InfinityCpu, InfinityNvme };
const char* to_string(Strategy s);
const std::vector<Strategy>& all_strategies();
// The placement the paper uses for each strategy, starting from `base` (keeps ci, tiling, prefetch, …).
RunConfig strategy_config(Strategy s, const RunConfig& base);

// Parameters of a GPT of this shape as a closed form in layers; models/gpt.cpp builds the graph
// with exactly these counts (a test holds them together). With tensor parallelism `t`, one rank's
// share as models::build_gpt(spec, t) builds it: the column- and row-parallel weights, the
// column-parallel biases and the vocabulary (padded to a multiple of t) split t ways; layernorms
// and the row-parallel biases whole on every rank.
struct ParamCounts {
  int64_t per_block = 0;
  int64_t outside = 0;
  int64_t largest_linear = 0;  // elements of the largest linear weight of a block (hd x 4hd in a GPT)
  int64_t largest_linear_group = 0;  // ... with its bias, as the planner's units count it
  int64_t vocabulary = 0;      // elements of the vocabulary-wide weight (wte; an untied lm_head is another)
  int64_t vocabulary_rows = 0; // its rows: the vocabulary (a rank's share of it)
  int64_t total(int64_t layers) const { return per_block * layers + outside; }
};
ParamCounts gpt_param_counts(const ModelSpec& m, int64_t tensor_parallel = 1);

// Tiles of a vocabulary-wide weight (the embedding's, the LM head's) of `rows` rows and `numel`
// elements, where the largest linear has `largest_linear` elements, at tiling factor `tiling_factor`:
// `fixed` when the run config fixes it (> 0), else the tiling factor times the smallest power of two
// that brings the weight to the largest linear's size, so that tiling bounds the working set by the
// linears' tiles and the vocabulary never sets it. At most `rows` (a tile is at least one row).
int64_t vocabulary_tiles(int64_t rows, int64_t numel, int64_t largest_linear, int64_t tiling_factor, int64_t fixed);

// Bytes one token's bf16 activations of one transformer block take on a rank: the paper's
// 16·hidden + 2·heads·seq (ZeRO-Infinity §4.1 with 2-byte elements) at tensor_parallel 1. Under
// tensor parallelism t the attention scores split with the heads, and of the per-token term the
// share Korthikanti et al. (2022) find replicated, 10 of 34 bytes per hidden unit (layernorm
// inputs, residuals, dropout masks), stays whole while the rest splits t ways. The memory model's
// working-memory row and the planner's activation estimate both use it.
double block_activation_bytes_per_token(const ModelSpec& m, int64_t tensor_parallel);

struct TierBytes {
  double device = 0;  // per GPU
  double host = 0;    // per node
  double nvme = 0;    // per node
  TierBytes& operator+=(const TierBytes& o) {
    device += o.device;
    host += o.host;
    nvme += o.nvme;
    return *this;
  }
};

// A row of the closed form, under the heading of the Program's accounting it corresponds to
// (core/fit.hpp): model states and the saved checkpoint's room are states, activation working
// memory is activations kept, model-state working memory is working memory, pinned buffers are
// staging, checkpoints are checkpoints.
struct MemoryRow {
  std::string what;
  TierBytes bytes;
  MemCategory category = MemCategory::States;
};

struct MemoryReport {
  int64_t params = 0;
  int ranks = 0;
  int64_t tiling_factor = 1;
  std::vector<MemoryRow> rows;  // model states, checkpoints, working memory, buffers
  TierBytes total;
  TierBytes budget;
  bool fits = true;
  // The first tier that is short, and by how much (bytes per GPU or per node as the tier counts).
  std::optional<Tier> short_tier;
  double shortfall = 0;
};

struct MemoryModelInput {
  ModelSpec model;
  HwProfile hw;
  int nodes = 1;
  RunConfig config;
};

// Bytes per tier for `in.config`'s placement.
MemoryReport memory_requirement(const MemoryModelInput& in);

// The two views side by side, per heading of the Program's accounting (indexed by MemCategory),
// in the closed form's units (device per GPU, host and NVMe per node): what the Program holds at
// each tier's peak, what the closed form counts, and the difference, Program less closed form.
struct CategoryComparison {
  MemCategory category = MemCategory::States;
  TierBytes program, closed_form, difference;
};
std::vector<CategoryComparison> compare_views(const Accounting& program, const MemoryReport& closed_form);

// The largest number of layers at this width that fits (0 if not even one layer fits), and the
// parameter count it gives.
struct LargestModel {
  int64_t layers = 0;
  int64_t params = 0;
};
LargestModel largest_model(const MemoryModelInput& in);

// Largest power-of-two hidden size (heads scaled to keep the head size) whose device memory fits on
// one GPU with the configured tiling factor. Only the device tier is checked: the question is what
// a single GPU can run, with host and NVMe assumed large enough (as in the paper's §8.6 experiment).
int64_t largest_hidden(const MemoryModelInput& in, int64_t max_hidden = int64_t(1) << 22);

// The largest tiling factor `auto` tries (the planner's and the memory model's search alike).
inline constexpr int64_t kMaxAutoTilingFactor = 4096;

// Smallest tiling factor (a power of two up to `limit`) with which `in`'s device memory fits its
// budget, whatever the other tiers say; 0 if none does.
int64_t auto_tiling_factor(const MemoryModelInput& in, int64_t limit = kMaxAutoTilingFactor);

// Paper §4: efficiency = ait·bw / (ait·bw + peak).
double efficiency(double arithmetic_intensity, double bandwidth, double peak_flops);
double ait_params_grads(const ModelSpec& m);       // seq · bsz
double ait_optimizer_states(const ModelSpec& m);   // seq · bsz / 4
double ait_checkpoints(const ModelSpec& m, int64_t checkpoint_interval);  // 24 · hd · ci
// Bandwidth needed to reach `target` efficiency.
double bandwidth_for_efficiency(double arithmetic_intensity, double target, double peak_flops);

// The bandwidth per GPU of a tier as §4 counts it: HBM, PCIe with every GPU active, or the node's
// NVMe (the slower direction) shared by its GPUs.
double tier_bandwidth_per_gpu(const HwProfile& hw, Tier t);

// §4's efficiency of one kind of state at the tier the config puts it (`auto`: the device).
struct EfficiencyRow {
  std::string what;
  Tier tier;
  double ait, bandwidth, efficiency;
};
// Parameters and gradients, optimizer states, and activation checkpoints when the config has them.
std::vector<EfficiencyRow> efficiency_rows(const ModelSpec& m, const HwProfile& hw, const RunConfig& c);

}  // namespace zinf::core
