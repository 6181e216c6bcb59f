// The runs pass (core/plan_state.hpp): the forward order (the graph's or a recorded one) cut into runs,
// stretches of `ci` blocks that are checkpointed and recomputed and the rest, with the activation
// bytes each keeps; under an activation policy, the activation pass's choices (core/activation_pass.hpp)
// applied to them.
#include "core/plan_state.hpp"

#include <algorithm>
#include <numeric>

#include "core/kernel_activations.hpp"
#include "core/memory_model.hpp"

namespace zinf::core::planning {

void make_runs(PlanState& ps) {
  const size_t n = ps.graph_.ops.size();
  std::vector<int32_t> order;
  if (ps.recorded_.empty()) {
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
  } else {
    order = ps.recorded_;
    std::vector<char> seen(n, 0);
    if (order.size() != n) throw PlanError(fmt::format("recorded operator order has {} operators, the graph {}", order.size(), n));
    for (int32_t o : order) {
      if (o < 0 || static_cast<size_t>(o) >= n || seen[static_cast<size_t>(o)])
        throw PlanError(fmt::format("recorded operator order is not a permutation of the graph's operators (at {})", o));
      seen[static_cast<size_t>(o)] = 1;
    }
  }
  ps.order_ = order;
  // Runs: maximal stretches of the order with the same segment key (ci blocks, or outside blocks).
  const int64_t ci = ps.config_.checkpoint_interval;
  auto key = [&](const Operator& o) -> int64_t {
    if (o.block < 0) return -1;
    return ci > 0 ? o.block / ci : o.block;
  };
  const double tokens = double(ps.graph_.tokens);
  const auto& s = ps.graph_.spec;
  // One rank's share of a block's activations (the graph's spec is the whole model's): the memory
  // model's count, so that both split them under tensor parallelism alike.
  const double per_block = tokens * block_activation_bytes_per_token(s, ps.tensor_parallel_);
  ps.runs_.clear();
  ps.op_run_.assign(n, -1);
  int64_t prev_key = -2;
  for (int32_t id : order) {
    const auto& o = ps.graph_.ops[static_cast<size_t>(id)];
    const int64_t k = key(o);
    if (ps.runs_.empty() || k != prev_key) {
      ps.runs_.push_back({});
      // A forward pass alone keeps nothing for a backward: no checkpoint, nothing recomputed.
      ps.runs_.back().recompute = ci > 0 && k >= 0 && !ps.activation_policy_on() && !ps.forward_only_;
    }
    prev_key = k;
    ps.runs_.back().ops.push_back(id);
    ps.op_run_[static_cast<size_t>(id)] = static_cast<int32_t>(ps.runs_.size() - 1);
  }
  // The first run's input is the batch itself: nothing to checkpoint, so it keeps its activations.
  ps.runs_.front().recompute = false;
  int32_t ckpt = 0;
  ps.act_peak_ = 0;
  for (auto& r : ps.runs_) {
    if (r.recompute) r.checkpoint = ckpt++;
    std::vector<int> blocks;
    double outside = 0;
    for (int32_t id : r.ops) {
      const auto& o = ps.graph_.ops[static_cast<size_t>(id)];
      if (o.block >= 0) blocks.push_back(o.block);
      else outside += o.out_bytes;
    }
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    r.act_bytes = per_block * double(blocks.size()) + outside;
    r.act_bytes *= ps.working_bytes_ / 2.0;  // the paper's formula counts 2-byte activations
    if (ps.kernel_tensors_) {  // the tensors the fp32 kernels keep, in place of the paper's formula
      const RunActivations k = run_activation_elements(ps.graph_, r.ops, r.recompute);
      r.act_bytes = ps.working_bytes_ * k.forward;
      r.grad_bytes = ps.working_bytes_ * k.backward;
    }
  }
  // A block split in two (checkpoints_per_block 2) keeps its attention output as well as its input.
  const double block_input = ps.working_bytes_ * tokens * double(s.hidden);
  ps.ckpt_bytes_ = block_input * double(ps.config_.checkpoints_per_block);
  if (ps.kernel_tensors_)  // the output of a run before a checkpointed one is that checkpoint, counted apart
    for (size_t i = 0; i + 1 < ps.runs_.size(); ++i)
      if (ps.runs_[i + 1].recompute) ps.runs_[i].act_bytes -= block_input;
  for (const auto& r : ps.runs_) ps.act_peak_ = std::max(ps.act_peak_, r.act_bytes + r.grad_bytes);
  ps.plan_.checkpoints_per_micro_batch = ckpt;
}

void apply_activation_pass(PlanState& ps, double device_bytes) {
  std::vector<std::vector<int32_t>> run_ops;
  for (const auto& r : ps.runs_) run_ops.push_back(r.ops);
  const auto& n = ps.hw_.node;
  const double G = std::max(1, n.gpus);
  const double nvme_spb = G / std::min(n.nvme_read_bandwidth, n.nvme_write_bandwidth);
  ActivationPassInput in;
  in.policy = ps.config_.activation_policy;
  in.tier = ps.config_.activation_tier;
  in.min_prefetch_runs = ps.config_.activation_prefetch_blocks;
  in.device_bytes_for_activations = device_bytes;
  in.checkpoint_bytes = ps.plan_.checkpoints == Tier::Device ? ps.ckpt_bytes_ : 0;
  in.host_seconds_per_byte = 1.0 / n.pcie_bandwidth_all_active();
  in.nvme_seconds_per_byte = std::max(in.host_seconds_per_byte, nvme_spb);
  in.gds_seconds_per_byte = n.has_gds() ? std::max(1.0 / n.gds_bandwidth_all_active(), nvme_spb) : 0;
  // The items: each block's tensors (their shares of the run's bytes) or each segment whole.
  auto items = [&](bool per_tensor) {
    std::vector<ActivationLifetime> ls = activation_lifetimes(ps.graph_, ps.hw_.node.gpu, run_ops, per_tensor);
    for (auto& l : ls) l.bytes = ps.runs_[static_cast<size_t>(l.run)].act_bytes * l.share;
    return ls;
  };
  std::vector<ActivationLifetime> lifetimes = items(ps.config_.activation_per_tensor);
  double forward = 0;
  for (size_t i = 0; i < lifetimes.size(); ++i)
    if (i == 0 || lifetimes[i].run != lifetimes[i - 1].run) forward += lifetimes[i].run_forward_seconds;
  // Parameters fetched in forward already use the same paths.
  double shard_bytes = 0;
  for (const auto& u : ps.units_) shard_bytes += ps.param_bytes_ * double(ps.shard_elems(u));
  in.pcie_free_seconds = forward - (ps.plan_.params != Tier::Device ? shard_bytes * in.host_seconds_per_byte : 0);
  in.nvme_free_seconds = forward - (ps.plan_.params == Tier::Nvme ? shard_bytes * nvme_spb : 0);
  const PerTier st = max_static(ps);
  in.host_bytes_free = at(ps.plan_.budget, Tier::Host) - at(st, Tier::Host);
  in.nvme_bytes_free = at(ps.plan_.budget, Tier::Nvme) - at(st, Tier::Nvme);
  std::vector<ActivationChoice> choices = choose_activation_actions(lifetimes, in);
  if (ps.config_.activation_per_tensor && in.policy == ActivationPolicy::Lifetime &&
      !activation_choices_fit(lifetimes, choices, in)) {
    // A tensor's recompute never recomputes its input, so per-tensor choices free less than
    // recomputing whole segments from checkpoints can: choose per segment.
    std::vector<ActivationLifetime> whole = items(false);
    std::vector<ActivationChoice> c = choose_activation_actions(whole, in);
    if (activation_choices_fit(whole, c, in)) {
      ps.plan_.activation_note += fmt::format("{}per-tensor choices keep more than {}: chosen per block",
                                              ps.plan_.activation_note.empty() ? "" : "; ", bytes_text(std::max(0.0, device_bytes)));
      lifetimes = std::move(whole);
      choices = std::move(c);
    }
  }

  ps.segments_.clear();
  ps.plan_.activations.clear();
  for (auto& r : ps.runs_) {
    r.action = ActivationAction::Keep;
    r.recompute = false;
    r.checkpoint = -1;
    r.segment = -1;
    r.prefetch_runs = 0;
    r.offload_bytes = r.partial_bytes = 0;
    r.recompute_ops.clear();
  }
  const std::vector<BlockTensor> tensors = block_tensors(ps.graph_.spec, true, ps.graph_.tensor_parallel);
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    const ActivationLifetime& l = lifetimes[i];
    const ActivationChoice& c = choices[i];
    auto& r = ps.runs_[static_cast<size_t>(l.run)];
    if (c.action == ActivationAction::Offload) {
      if (r.segment < 0) {
        r.segment = static_cast<int32_t>(ps.segments_.size());
        ps.segments_.push_back({r.segment, l.first_block, l.last_block, 0.0, c.tier, c.path == ActivationPath::Gds, {}});
      }
      auto& seg = ps.segments_[static_cast<size_t>(r.segment)];
      seg.first_block = std::min<int32_t>(seg.first_block, l.first_block);
      seg.last_block = std::max<int32_t>(seg.last_block, l.last_block);
      seg.bytes += l.bytes;
      if (l.tensor >= 0) seg.tensors.push_back({l.first_block, l.name});
      r.action = ActivationAction::Offload;
      r.offload_bytes += l.bytes;
      r.prefetch_runs = std::max(r.prefetch_runs, c.prefetch_runs);
    } else if (c.action == ActivationAction::Recompute && l.tensor < 0) {
      r.action = ActivationAction::Recompute;
      r.recompute = true;
    } else if (c.action == ActivationAction::Recompute) {
      r.partial_bytes += l.bytes;
      for (int32_t op : r.ops) {
        const Operator& o = ps.graph_.ops[static_cast<size_t>(op)];
        if (o.block == l.first_block && o.role == tensors[static_cast<size_t>(l.tensor)].producer) r.recompute_ops.push_back(op);
      }
    }
    ps.plan_.activations.push_back({l, c});
  }
  for (auto& r : ps.runs_) {  // recomputed per tensor in forward order
    std::sort(r.recompute_ops.begin(), r.recompute_ops.end(), [&](int32_t a, int32_t b) {
      return std::find(r.ops.begin(), r.ops.end(), a) < std::find(r.ops.begin(), r.ops.end(), b);
    });
    r.recompute_ops.erase(std::unique(r.recompute_ops.begin(), r.recompute_ops.end()), r.recompute_ops.end());
  }
  int32_t ckpt = 0;
  for (auto& r : ps.runs_)
    if (r.recompute) r.checkpoint = ckpt++;
  ps.plan_.checkpoints_per_micro_batch = ckpt;
}

}  // namespace zinf::core::planning
