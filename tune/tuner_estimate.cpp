// The tuner's closed-form lane estimate (tune/tuner.hpp: estimate_lanes): each lane's busy seconds
// in one step of a candidate, from the model's shape and the hwprofile's nominal rates.
#include <algorithm>
#include <cmath>

#include "core/memory_model.hpp"
#include "core/timeline.hpp"
#include "tune/tuner.hpp"

namespace zinf::tune {

using core::OptimizerTiming;
using core::RunConfig;
using core::Tier;

namespace {

struct OptimizerLoad {
  double cpu = 0, dev = 0, h2d = 0, d2h = 0, rd = 0, wr = 0;
};

// The optimizer step over a rank's shard of `params`: fp32 master, m and v (12 bytes per
// parameter) where the states live, the gradients brought to it and the parameters sent back.
OptimizerLoad optimizer_load(const RunConfig& c, const core::NodeSpec& n, double params, double pcie, double nvme_r,
                             double nvme_w) {
  OptimizerLoad o;
  const double G = n.gpus;
  if (c.optimizer.tier == Tier::Device) {
    o.dev = 16 * params / (n.gpu.memory_bandwidth * std::max(0.05, n.gpu.elementwise_efficiency));
    if (c.gradients.tier != Tier::Device) o.h2d += 2 * params / pcie;
    return o;
  }
  o.cpu = params / (n.cpu_adam_rate / G);
  if (c.gradients.tier == Tier::Device) o.d2h += 2 * params / pcie;
  if (c.params.tier == Tier::Device) o.h2d += 2 * params / pcie;
  if (c.optimizer.tier == Tier::Nvme) {
    o.rd += 12 * params / nvme_r;
    o.wr += 12 * params / nvme_w;
  }
  if (c.gradients.tier == Tier::Nvme) o.rd += 2 * params / nvme_r;
  if (c.params.tier == Tier::Nvme) o.wr += 2 * params / nvme_w;
  return o;
}

}  // namespace

LaneEstimate estimate_lanes(const core::ModelSpec& model, const core::HwProfile& hw, int nodes, const RunConfig& c) {
  const auto& n = hw.node;
  const double G = n.gpus, R = double(nodes) * G;
  // Tensor parallelism: a rank holds and computes its group's share P of the model; ZeRO partitions
  // and reduces that share over the D = R / T data-parallel ranks that hold the same share.
  const int64_t tp = std::max<int64_t>(1, c.tensor_parallel);
  const double T = double(tp), D = R / T;
  const double P = double(core::gpt_param_counts(model, tp).total(model.layers));
  const double b = double(c.micro_batch.value_or(model.micro_batch));
  const double s = double(model.seq), h = double(model.hidden), L = double(model.layers);
  const double M = double(c.gradient_accumulation);
  const double recompute = c.checkpoint_interval > 0 ? 1 : 0;
  const double tiles = double(std::max<int64_t>(1, c.tiling_factor));

  // Compute: 2 FLOPs per parameter per token forward plus attention's two s x s GEMMs per layer;
  // backward twice forward, recompute once more.
  const double forward = 2 * P * b * s * M + 4 * b * s * s * h * L * M / T;
  LaneEstimate out;
  out.flops_per_gpu = forward * (3 + recompute);
  const auto& curve = n.gpu.gemm_forward_efficiency.points.empty() ? n.gpu.gemm_efficiency : n.gpu.gemm_forward_efficiency;
  const double eff = std::max(1e-3, curve.at(core::gemm_intensity_dim(b * s, double(model.ffn_hidden()) / T / tiles, h)));
  const double kernels = 16 * L * (3 + recompute) * M * tiles;  // launches: about 16 kernels per block and pass
  double compute = out.flops_per_gpu / (n.gpu.peak_flops * eff) + kernels * n.gpu.kernel_launch;
  // Tensor-parallel all-reduces run on the compute stream inside a node: two per block in forward
  // (and recompute) and two in backward, each of one bf16 hidden state, as a ring over NVLink.
  if (tp > 1)
    compute += L * M * (4 + 2 * recompute) * (2 * (T - 1) / T * 2 * b * s * h / n.nvlink_bandwidth + 2 * (T - 1) * n.nvlink_latency);

  // Expert parallelism: a dispatch and a combine all-to-all per mixture layer and pass, on the compute
  // stream, each of experts x capacity bf16 hidden states (core's planner sizes them the same way).
  if (c.expert_parallel > 1 && model.experts > 0) {
    const double k = double(model.experts_per_token), X = double(model.experts);
    const double capacity = std::max(4.0, std::ceil(c.capacity_factor * b * s * k / X - 1e-9));
    double moe_layers = 0;
    for (int64_t l = 0; l < model.layers; ++l) moe_layers += model.moe_layer(l) ? 1 : 0;
    const int ep = static_cast<int>(c.expert_parallel);
    compute += moe_layers * M * (4 + 2 * recompute) *
               core::collective_seconds(hw, core::TaskKind::AllToAll, 2 * X * capacity * h, ep, std::min(ep, int(G)));
  }

  const double pcie = n.pcie_bandwidth_all_active();
  // One ZeRO collective of the rank's whole share (2P bytes) over its D-rank data-parallel group,
  // G / T of them in each node once the ranks span nodes, as the list scheduler charges it.
  const int dp = static_cast<int>(D), per_node = R <= G ? dp : std::max(1, static_cast<int>(G / T));
  auto collective = [&](core::TaskKind kind) { return core::collective_seconds(hw, kind, 2 * P, dp, per_node); };
  const double nvme_r = n.nvme_read_bandwidth / G, nvme_w = n.nvme_write_bandwidth / G;  // this rank's share
  const double groups = 12 * L + 3;  // parameter groups a pass fetches, for per-request latencies

  double h2d = 0, d2h = 0, rd = 0, wr = 0, comm = 0;
  // Parameters: fetched for forward, backward and recompute of every micro-batch.
  const double fetches = (2 + recompute) * M;
  const bool partitioned = c.zero_stage >= 3;
  const double shard = partitioned ? 2 * P / D : 2 * P;
  if (partitioned && c.params.tier != Tier::Device) {
    h2d += fetches * shard / pcie + fetches * groups * n.pcie_latency;
    if (c.params.tier == Tier::Nvme) rd += fetches * shard / nvme_r + fetches * groups * n.nvme_latency;
  }
  if (D > 1) {
    if (partitioned) comm += fetches * collective(core::TaskKind::AllGather);
    // Reduce-scatter (all-reduce below stage 2).
    comm += M * collective(c.zero_stage >= 2 ? core::TaskKind::ReduceScatter : core::TaskKind::AllReduce);
  }
  // Gradient shards leave the device after each micro-batch's reduction.
  const double grad_shard = c.zero_stage >= 2 ? 2 * P / D : 2 * P;
  if (c.gradients.tier != Tier::Device) {
    d2h += M * grad_shard / pcie;
    if (c.gradients.tier == Tier::Nvme) wr += M * grad_shard / nvme_w + M * groups * n.nvme_latency;
  }
  // Activation checkpoints: saved in forward, loaded in backward.
  if (c.checkpoint_interval > 0 && c.checkpoints.tier != Tier::Device) {
    const double ckpt = 2 * b * s * h * std::ceil(L / double(c.checkpoint_interval)) * M / (c.checkpoints_partitioned ? T : 1) *
                        double(c.checkpoints_per_block);
    d2h += ckpt / pcie;
    h2d += ckpt / pcie;
    if (c.checkpoints.tier == Tier::Nvme) {
      wr += ckpt / nvme_w;
      rd += ckpt / nvme_r;
    }
  }
  const OptimizerLoad o = optimizer_load(c, n, c.zero_stage >= 1 ? P / D : P, pcie, nvme_r, nvme_w);
  struct Lane {
    const char* name;
    double step, optim;
  };
  std::vector<Lane> lanes;
  if (n.device_shares_host_cores) {
    // The "device" is the host's cores: compute, copies and CPU Adam take turns on them.
    lanes.push_back({"cores", compute + h2d + d2h, o.cpu + o.dev + o.h2d + o.d2h});
  } else {
    lanes.push_back({"compute", compute, o.dev});
    lanes.push_back({"pcie_h2d", h2d, o.h2d});
    lanes.push_back({"pcie_d2h", d2h, o.d2h});
    lanes.push_back({"cpu_optim", 0, o.cpu});
  }
  lanes.push_back({"nvme_read", rd, o.rd});
  lanes.push_back({"nvme_write", wr, o.wr});
  lanes.push_back({"comm", comm, 0});
  // ZeRO-3 gathers the next operator's parameters while this one computes only where the bound on
  // live parameter bytes holds both: twice the largest operator's gathered share (its tile, bf16).
  // Where it does not, each gather waits for the operator before it (the planner holds a gather back
  // while the live bytes would exceed the bound: core/plan_schedule.cpp, schedule_prefetch), and
  // compute and collectives take turns on the step's critical path.
  const double largest_unit = 2 * h * std::max(3 * h, double(model.ffn_hidden())) / T / tiles;
  if (partitioned && D > 1 && 2 * largest_unit > c.max_live_bytes)
    lanes.push_back({"compute+comm", compute + comm, o.dev});

  double longest_step = 0, longest_optim = 0, longest_sum = 0;
  for (const auto& l : lanes) {
    out.lanes.push_back({l.name, l.step + l.optim});
    longest_step = std::max(longest_step, l.step);
    longest_optim = std::max(longest_optim, l.optim);
    longest_sum = std::max(longest_sum, l.step + l.optim);
  }
  out.step_time = c.optimizer_timing == OptimizerTiming::OverlapBackward ? longest_sum : longest_step + longest_optim;
  const auto it = std::max_element(out.lanes.begin(), out.lanes.end(),
                                   [](const LaneLoad& a, const LaneLoad& b2) { return a.seconds < b2.seconds; });
  out.bottleneck = it->lane;
  return out;
}

}  // namespace zinf::tune
