#include "core/memory_model.hpp"
#include "core/kernel_activations.hpp"
#include "core/model_layout.hpp"

#include <algorithm>
#include <cmath>

namespace zinf::core {

const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::DataParallel: return "data-parallel";
    case Strategy::ZeroOffload: return "zero-offload";
    case Strategy::Zero3: return "zero-3";
    case Strategy::InfinityCpu: return "zero-infinity-cpu";
    case Strategy::InfinityNvme: return "zero-infinity-nvme";
  }
  return "?";
}

const std::vector<Strategy>& all_strategies() {
  static const std::vector<Strategy> all = {Strategy::DataParallel, Strategy::ZeroOffload, Strategy::Zero3,
                                            Strategy::InfinityCpu, Strategy::InfinityNvme};
  return all;
}

RunConfig strategy_config(Strategy s, const RunConfig& base) {
  RunConfig c = base;
  const Placement dev{false, Tier::Device}, host{false, Tier::Host}, nvme{false, Tier::Nvme};
  switch (s) {
    case Strategy::DataParallel:
      c.zero_stage = 0;
      c.params = c.gradients = c.optimizer = c.checkpoints = dev;
      break;
    case Strategy::ZeroOffload:  // ZeRO-2 with the optimizer (and the gradients it consumes) on the CPU
      c.zero_stage = 2;
      c.params = c.checkpoints = dev;
      c.gradients = c.optimizer = host;
      break;
    case Strategy::Zero3:
      c.zero_stage = 3;
      c.params = c.gradients = c.optimizer = c.checkpoints = dev;
      break;
    case Strategy::InfinityCpu:  // the paper offloads activation checkpoints to CPU memory
      c.zero_stage = 3;
      c.params = c.gradients = c.optimizer = c.checkpoints = host;
      break;
    case Strategy::InfinityNvme:
      c.zero_stage = 3;
      c.params = c.gradients = c.optimizer = nvme;
      c.checkpoints = host;
      break;
  }
  return c;
}

ParamCounts gpt_param_counts(const ModelSpec& m, int64_t tensor_parallel) {
  if (!m.is_gpt2()) {
    // Another architecture (planned whole, without tensor parallelism): the layout's exact count,
    // with the blocks as the repeating mixture block (or the dense one) and whatever the other
    // blocks differ by counted outside, so that total(layers) is the exact total.
    int64_t typical = 0;
    while (typical + 1 < m.layers && m.experts > 0 && !m.moe_layer(typical)) ++typical;
    ParamCounts c;
    c.per_block = block_params(m, typical).total;
    c.outside = exact_params(m).total - c.per_block * m.layers;
    c.largest_linear = largest_block_weight(m, false);
    c.largest_linear_group = largest_block_weight(m, true);
    c.vocabulary = m.vocab * m.embedding_width();
    c.vocabulary_rows = m.vocab;
    return c;
  }
  const int64_t t = std::max<int64_t>(1, tensor_parallel);
  const int64_t h = m.hidden, f = m.ffn_hidden(), v = (m.vocab + t - 1) / t;
  ParamCounts c;
  // ln_1, c_attn (W + b, column-parallel), attn c_proj (row-parallel: W split, b whole), ln_2,
  // mlp c_fc (column-parallel), mlp c_proj (row-parallel)
  c.per_block = 2 * h + (3 * h * h + 3 * h) / t + (h * h / t + h) + 2 * h + (f * h + f) / t + (h * f / t + h);
  // wte (vocabulary-parallel), wpe, ln_f, and an untied LM head (vocabulary-parallel)
  c.outside = v * h + m.seq * h + 2 * h + (m.tied_embeddings ? 0 : v * h);
  c.largest_linear = f * h / t;
  // As models/gpt.cpp builds a rank's share: weight and bias of c_attn, attn.c_proj, c_fc, mlp.c_proj.
  c.largest_linear_group = std::max({3 * h / t * h + 3 * h / t, h * (h / t) + h, f / t * h + f / t, h * (f / t) + h});
  c.vocabulary = v * h;
  c.vocabulary_rows = v;
  return c;
}

int64_t vocabulary_tiles(int64_t rows, int64_t numel, int64_t largest_linear, int64_t tiling_factor, int64_t fixed) {
  int64_t t = fixed;
  if (t <= 0) {
    int64_t scale = 1;
    while (largest_linear > 0 && numel > scale * largest_linear) scale *= 2;
    t = std::max<int64_t>(1, tiling_factor) * scale;
  }
  return std::max<int64_t>(1, std::min(t, rows));
}

double block_activation_bytes_per_token(const ModelSpec& m, int64_t tensor_parallel) {
  if (!m.is_gpt2()) return layout_activation_bytes_per_token(m);  // planned whole: no tensor parallelism
  const double t = double(std::max<int64_t>(1, tensor_parallel));
  const double replicated = 10.0 / 34.0;
  return 16.0 * double(m.hidden) * (replicated + (1.0 - replicated) / t) + 2.0 * m.kept_attention_elements(m.seq) / t;
}

namespace {

// The offload engine's staging buffers per rank in this estimate: DeepSpeed's swap buffers (8 of
// 64 MiB). zinf's own staging is the Program's host buffers, counted in its plan.
constexpr double kPinnedStagingBytes = 8.0 * double(64 << 20);

void add(TierBytes& t, Tier tier, double per_gpu_bytes, int gpus_per_node) {
  switch (tier) {
    case Tier::Device: t.device += per_gpu_bytes; break;
    case Tier::Host: t.host += per_gpu_bytes * gpus_per_node; break;
    case Tier::Nvme: t.nvme += per_gpu_bytes * gpus_per_node; break;
  }
}

// `auto` placements are resolved by the planner; the memory model counts them on the device,
// the tier the planner tries first.
Tier tier_of(const Placement& p) { return p.automatic ? Tier::Device : p.tier; }

}  // namespace

MemoryReport memory_requirement(const MemoryModelInput& in) {
  const RunConfig& c = in.config;
  ModelSpec m = in.model;
  if (c.seq) m.seq = *c.seq;
  const int G = in.hw.node.gpus;
  const int N = G * in.nodes;
  // Tensor parallelism: a rank holds its group's share of every layer (counts), and ZeRO partitions
  // that share over the N / t data-parallel ranks that hold the same share.
  const int64_t t = std::max<int64_t>(1, c.tensor_parallel);
  ParamCounts counts = gpt_param_counts(m, t);
  // Expert parallelism E: a rank holds experts / E of each layer's routed experts, and its largest
  // gathered unit may be that slice.
  const int64_t E = m.experts > 0 ? std::max<int64_t>(1, c.expert_parallel) : 1;
  if (E > 1) {
    counts.largest_linear = largest_block_weight(m, false, E);
    counts.largest_linear_group = largest_block_weight(m, true, E);
  }
  const double P = double(gpt_param_counts(m).total(m.layers));
  const double P_rank = double(counts.total(m.layers));
  const double dp = double(N) / double(t);
  const double bsz = double(c.micro_batch.value_or(m.micro_batch));
  const double seq = double(m.seq), hd = double(m.hidden), nl = double(m.layers);
  const int64_t tiles = std::max<int64_t>(1, c.tiling_factor);
  // The device's working precision: the run's (fp32 activations for an fp32 run), or the CPU
  // backend's fp32, whose profile counts the tensors its kernels keep, as the planner does.
  const bool kernel_tensors = in.hw.node.gpu.working_bytes == 4;
  const double wb = std::max(double(in.hw.node.gpu.working_bytes), param_bytes(c));

  MemoryReport r;
  r.params = static_cast<int64_t>(P);
  r.ranks = N;
  r.tiling_factor = tiles;

  // Model states in the run's precision, 16 bytes/param for bf16 and Adam: params (2) and grads
  // (2), fp32 master, m and v (12).
  // Under expert parallelism E the routed experts' share of a rank is their E-th, partitioned over
  // the dp / E ranks of its expert-data-parallel group (DeepSpeed-MoE's expert-data-parallel groups):
  // with ZeRO a rank keeps the same 1/dp of them, without it (stages below a state's) an E-th.
  const double routed = E > 1 ? double(routed_expert_params(m)) : 0.0;
  const double dense_rank = P_rank - routed, local_experts = routed / double(E);
  const double partitioned = dense_rank / dp + local_experts / std::max(1.0, dp / double(E));
  const double whole = dense_rank + local_experts;
  const double params_share = c.zero_stage >= 3 ? partitioned : whole;
  const double grads_share = c.zero_stage >= 2 ? partitioned : whole;
  const double optim_share = c.zero_stage >= 1 ? partitioned : whole;
  MemoryRow states{"model states", {}, MemCategory::States};
  add(states.bytes, tier_of(c.params), param_bytes(c) * params_share, G);
  // DeepSpeed's host path keeps a host optimizer's gradients off the device in fp32 (from v0.9 beside
  // the partition in the run's precision).
  const bool fp32_grads = c.optimizer_host_path != HostPath::Fused && tier_of(c.optimizer) != Tier::Device &&
                          tier_of(c.gradients) != Tier::Device;
  const double host_grad_bytes = c.optimizer_host_path == HostPath::DeepSpeed09 ? grad_bytes(c) + 4.0 : 4.0;
  add(states.bytes, tier_of(c.gradients), (fp32_grads ? host_grad_bytes : grad_bytes(c)) * grads_share, G);
  add(states.bytes, tier_of(c.optimizer), optimizer_state_bytes(c) * optim_share, G);
  r.rows.push_back(states);

  // Activation checkpoints: 2·bsz·seq·hd·nl/ci per GPU; without checkpointing every block's
  // activations stay on the device (activation working memory with ci = nl). Under tensor
  // parallelism every rank of a group holds the same checkpoint unless they are partitioned.
  const double ci = c.checkpoint_interval > 0 ? double(c.checkpoint_interval) : nl;
  if (c.checkpoint_interval > 0) {
    MemoryRow ckpt{"activation checkpoints", {}, MemCategory::Checkpoints};
    const double split = c.checkpoints_partitioned ? double(t) : 1.0;
    add(ckpt.bytes, tier_of(c.checkpoints), wb * bsz * seq * hd * nl / ci / split * double(c.checkpoints_per_block), G);
    r.rows.push_back(ckpt);
  }

  // Working memory on the device: activations of ci blocks being recomputed, and the model states
  // of the largest operator (param + grad, bf16) split into tiles. When parameters are partitioned
  // (ZeRO-3) the prefetched parameters within the live-bytes bound are resident too. Under tensor
  // parallelism a rank holds its share of the activations (block_activation_bytes_per_token).
  MemoryRow awm{"activation working memory", {}, MemCategory::ActivationsKept};
  if (!kernel_tensors) {
    awm.bytes.device = wb / 2.0 * bsz * seq * ci * block_activation_bytes_per_token(m, t);
  } else {  // ci blocks' activations and one block's gradients as the fp32 kernels keep them on a rank
    awm.bytes.device = wb * bsz * seq * (ci * block_forward_elements(m, t) + block_backward_elements(m, t));
  }
  r.rows.push_back(awm);
  MemoryRow mswm{"model-state working memory", {}, MemCategory::WorkingMemory};
  const int64_t vocab_tiles =
      vocabulary_tiles(counts.vocabulary_rows, counts.vocabulary, counts.largest_linear_group, tiles, c.vocabulary_tiles);
  const double largest_tile =
      std::max(double(counts.largest_linear) / double(tiles), double(counts.vocabulary) / double(vocab_tiles));
  mswm.bytes.device = 2.0 * wb * largest_tile;
  if (c.zero_stage >= 3) mswm.bytes.device += std::min(c.max_live_bytes, param_bytes(c) * whole);
  r.rows.push_back(mswm);

  // Pinned staging buffers of the offload engine, per rank, when anything lives off the device.
  bool offloaded = tier_of(c.params) != Tier::Device || tier_of(c.optimizer) != Tier::Device ||
                   tier_of(c.gradients) != Tier::Device ||
                   (c.checkpoint_interval > 0 && tier_of(c.checkpoints) != Tier::Device);
  if (offloaded) {
    MemoryRow pinned{"pinned buffers", {}, MemCategory::Staging};
    pinned.bytes.host = kPinnedStagingBytes * G;
    r.rows.push_back(pinned);
  }
  // Room for one saved training checkpoint (bf16 params + fp32 master, m, v: 14 bytes/param) on the
  // same NVMe array, when model states live there: a run that cannot save is not a run.
  if (c.reserve_nvme_for_checkpoint && (tier_of(c.params) == Tier::Nvme || tier_of(c.optimizer) == Tier::Nvme)) {
    MemoryRow save{"saved checkpoint (room on NVMe)", {}, MemCategory::States};
    save.bytes.nvme = (param_bytes(c) + optimizer_state_bytes(c)) * P / N * G;
    r.rows.push_back(save);
  }

  for (const auto& row : r.rows) r.total += row.bytes;
  r.budget = {in.hw.gpu_budget(), in.hw.host_budget(), in.hw.nvme_budget()};
  const std::pair<Tier, double> checks[] = {{Tier::Device, r.total.device - r.budget.device},
                                            {Tier::Host, r.total.host - r.budget.host},
                                            {Tier::Nvme, r.total.nvme - r.budget.nvme}};
  for (const auto& [tier, over] : checks) {
    if (over > 0 && !r.short_tier) {
      r.fits = false;
      r.short_tier = tier;
      r.shortfall = over;
    }
  }
  return r;
}

std::vector<CategoryComparison> compare_views(const Accounting& program, const MemoryReport& closed_form) {
  std::vector<CategoryComparison> out;
  for (int i = 0; i < kMemCategoryCount; ++i) {
    CategoryComparison c;
    c.category = static_cast<MemCategory>(i);
    c.program = {program.shown(Tier::Device, program.at(Tier::Device).category_bytes(c.category)),
                 program.shown(Tier::Host, program.at(Tier::Host).category_bytes(c.category)),
                 program.shown(Tier::Nvme, program.at(Tier::Nvme).category_bytes(c.category))};
    for (const auto& row : closed_form.rows)
      if (row.category == c.category) c.closed_form += row.bytes;
    c.difference = {c.program.device - c.closed_form.device, c.program.host - c.closed_form.host,
                    c.program.nvme - c.closed_form.nvme};
    out.push_back(c);
  }
  return out;
}

LargestModel largest_model(const MemoryModelInput& in) {
  MemoryModelInput probe = in;
  auto fits = [&](int64_t layers) {
    probe.model.layers = layers;
    return memory_requirement(probe).fits;
  };
  LargestModel out;
  if (!fits(1)) return out;
  int64_t lo = 1, hi = 2;
  while (fits(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > (int64_t(1) << 40)) break;
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  out.layers = lo;
  out.params = gpt_param_counts(in.model).total(lo);
  return out;
}


int64_t largest_hidden(const MemoryModelInput& in, int64_t max_hidden) {
  MemoryModelInput probe = in;
  const int64_t head_dim = in.model.hidden / in.model.heads;
  int64_t best = 0;
  for (int64_t h = head_dim; h <= max_hidden; h *= 2) {
    probe.model.hidden = h;
    probe.model.heads = std::max<int64_t>(1, h / head_dim);
    auto r = memory_requirement(probe);
    if (r.total.device > r.budget.device) break;
    best = h;
  }
  return best;
}

int64_t auto_tiling_factor(const MemoryModelInput& in, int64_t limit) {
  MemoryModelInput probe = in;
  for (int64_t t = 1; t <= limit; t *= 2) {
    probe.config.tiling_factor = t;
    auto r = memory_requirement(probe);
    if (r.total.device <= r.budget.device) return t;
  }
  return 0;
}

double efficiency(double ait, double bw, double peak) { return ait * bw / (ait * bw + peak); }
double ait_params_grads(const ModelSpec& m) { return double(m.seq) * double(m.micro_batch); }
double ait_optimizer_states(const ModelSpec& m) { return double(m.seq) * double(m.micro_batch) / 4.0; }
double ait_checkpoints(const ModelSpec& m, int64_t ci) { return 24.0 * double(m.hidden) * double(std::max<int64_t>(1, ci)); }
double bandwidth_for_efficiency(double ait, double target, double peak) { return target * peak / ((1.0 - target) * ait); }

double tier_bandwidth_per_gpu(const HwProfile& hw, Tier t) {
  switch (t) {
    case Tier::Device: return hw.node.gpu.memory_bandwidth;
    case Tier::Host: return hw.node.pcie_bandwidth_all_active();
    case Tier::Nvme: return std::min(hw.node.nvme_read_bandwidth, hw.node.nvme_write_bandwidth) / hw.node.gpus;
  }
  return 0;
}

std::vector<EfficiencyRow> efficiency_rows(const ModelSpec& m, const HwProfile& hw, const RunConfig& c) {
  const double peak = hw.node.gpu.peak_flops;
  auto tier = [](const Placement& p) { return p.automatic ? Tier::Device : p.tier; };
  std::vector<EfficiencyRow> rows;
  auto add = [&](std::string what, Tier t, double ait) {
    const double bw = tier_bandwidth_per_gpu(hw, t);
    rows.push_back({std::move(what), t, ait, bw, efficiency(ait, bw, peak)});
  };
  add("params/grads", tier(c.params), ait_params_grads(m));
  add("optimizer states", tier(c.optimizer), ait_optimizer_states(m));
  if (c.checkpoint_interval > 0) add("activation checkpoints", tier(c.checkpoints), ait_checkpoints(m, c.checkpoint_interval));
  return rows;
}

}  // namespace zinf::core
