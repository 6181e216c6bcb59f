#include "core/activation_pass.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "core/errors.hpp"
#include "core/kernel_activations.hpp"
#include "core/memory_model.hpp"
#include "core/units.hpp"

namespace zinf::core {

const char* to_string(ActivationAction a) {
  switch (a) {
    case ActivationAction::Keep: return "keep";
    case ActivationAction::Offload: return "offload";
    case ActivationAction::Recompute: return "recompute";
  }
  return "?";
}

const char* to_string(ActivationPath p) {
  switch (p) {
    case ActivationPath::Host: return "host";
    case ActivationPath::NvmeViaHost: return "nvme via host";
    case ActivationPath::Gds: return "nvme via gds";
  }
  return "?";
}

namespace {

// Nominal seconds of one operator's forward or backward, as the idealized scheduler costs a task.
double op_seconds(const GpuSpec& gpu, const Operator& o, bool backward) {
  const std::string key = std::string(to_string(o.kind)) + (backward ? "_backward" : "_forward");
  Kernel k = Kernel::Elementwise;
  int64_t dim = 0;
  if (o.kind == OpKind::Attention && o.m > 0) {
    k = backward ? Kernel::AttentionBackward : Kernel::AttentionForward;
    dim = std::min({o.m, o.n, o.k});
  } else if (o.m > 0) {
    k = backward ? Kernel::GemmBackward : Kernel::GemmForward;
    dim = std::lround(gemm_intensity_dim(double(o.m), double(o.n), double(o.k)));
  }
  const double flops = backward ? o.bwd_flops : o.fwd_flops;
  const double bytes = o.fwd_bytes * (backward ? 2.0 : 1.0);
  return kernel_seconds(gpu, k, flops, bytes, dim, gpu.in_step(key));
}

}  // namespace

std::vector<ActivationLifetime> activation_lifetimes(const ModelGraph& g, const GpuSpec& gpu,
                                                     const std::vector<std::vector<int32_t>>& runs, bool per_tensor) {
  const auto& s = g.spec;
  const double per_block = double(g.tokens) * (s.is_gpt2() ? 16.0 * double(s.hidden) + 2.0 * s.kept_attention_elements(s.seq)
                                                           : block_activation_bytes_per_token(s, 1));
  const std::vector<BlockTensor> tensors = block_tensors(s, true, g.tensor_parallel);
  std::vector<double> fwd(runs.size(), 0), bwd(runs.size(), 0);
  std::vector<int32_t> first_pos(runs.size(), 0), count(runs.size(), 0);
  int32_t pos = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    first_pos[r] = pos;
    count[r] = static_cast<int32_t>(runs[r].size());
    pos += count[r];
    for (int32_t op : runs[r]) {
      fwd[r] += op_seconds(gpu, g.ops[static_cast<size_t>(op)], false);
      bwd[r] += op_seconds(gpu, g.ops[static_cast<size_t>(op)], true);
    }
  }
  const int32_t forward_ops = pos;
  std::vector<ActivationLifetime> out;
  int32_t segment = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    int lo = std::numeric_limits<int>::max(), hi = -1;
    bool blocks_only = !runs[r].empty();
    for (int32_t op : runs[r]) {
      const int b = g.ops[static_cast<size_t>(op)].block;
      blocks_only &= b >= 0;
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
    if (!blocks_only) continue;
    ActivationLifetime l;
    l.segment = segment++;
    l.run = static_cast<int32_t>(r);
    l.first_block = lo;
    l.last_block = hi;
    l.bytes = per_block * double(hi - lo + 1);
    l.produced = first_pos[r];
    l.last_forward_use = first_pos[r] + count[r] - 1;
    // Backward runs the runs in reverse: everything after run r comes back first.
    int32_t after = 0;
    for (size_t q = r + 1; q < runs.size(); ++q) {
      after += count[q];
      l.idle_seconds += fwd[q] + bwd[q];
    }
    l.first_backward_use = forward_ops + after;
    for (size_t q = r + 1; q < runs.size(); ++q) l.later_backward_seconds.push_back(bwd[q]);
    l.forward_seconds = l.run_forward_seconds = fwd[r];
    if (!per_tensor) {
      out.push_back(l);
      continue;
    }
    // One item per saved tensor of each block: produced by its operator, idle at least while the
    // runs after this one go forward and back (a conservative window: the run's own).
    const double blocks = double(hi - lo + 1);
    for (int b = lo; b <= hi; ++b) {
      const int32_t base = static_cast<int32_t>(out.size());
      for (size_t k = 0; k < tensors.size(); ++k) {
        ActivationLifetime t = l;
        t.first_block = t.last_block = b;
        t.tensor = static_cast<int32_t>(k);
        t.name = tensors[k].name;
        t.share = tensors[k].share / blocks;
        t.bytes = l.bytes * t.share;
        t.pinned = tensors[k].producer == OpRole::Res2;
        t.input = tensors[k].input < 0 ? -1 : base + tensors[k].input;
        t.forward_seconds = 0;
        for (int32_t op : runs[r]) {
          const Operator& o = g.ops[static_cast<size_t>(op)];
          if (o.block == b && o.role == tensors[k].producer) t.forward_seconds += op_seconds(gpu, o, false);
        }
        out.push_back(t);
      }
      for (size_t k = 0; k < tensors.size(); ++k)
        if (out[base + k].input >= 0) out[static_cast<size_t>(out[base + k].input)].consumer = base + static_cast<int32_t>(k);
    }
  }
  return out;
}

double forward_throttle_seconds(const std::vector<ActivationLifetime>& lifetimes, const std::vector<double>& save_seconds) {
  double now = 0, lane = 0, waited = 0;
  std::vector<double> ends;  // save end times of the offloaded segments so far, in order
  for (size_t i = 0; i < lifetimes.size();) {
    // One segment: a whole-segment item, or the consecutive tensor items of one run.
    size_t j = i + 1;
    if (lifetimes[i].tensor >= 0)
      while (j < lifetimes.size() && lifetimes[j].tensor >= 0 && lifetimes[j].run == lifetimes[i].run) ++j;
    double save = 0;
    for (size_t k = i; k < j; ++k) save += k < save_seconds.size() ? save_seconds[k] : 0.0;
    const bool offloaded = save > 0;
    if (offloaded && ends.size() >= kActivationSavesInFlight) {
      const double ready = ends[ends.size() - kActivationSavesInFlight];
      if (ready > now) {
        waited += ready - now;
        now = ready;
      }
    }
    now += lifetimes[i].tensor >= 0 ? lifetimes[i].run_forward_seconds : lifetimes[i].forward_seconds;
    if (offloaded) {
      lane = std::max(lane, now) + save;
      ends.push_back(lane);
    }
    i = j;
  }
  return waited;
}

namespace {

struct Option {
  ActivationChoice choice;
  double saved = 0;       // device bytes it frees across the idle window
  double pcie_load = 0;   // forward seconds it adds to each resource
  double nvme_load = 0;
  double host_bytes = 0, nvme_bytes = 0;
};

struct State {
  double pcie_load = 0, nvme_load = 0;
  double host_bytes = 0, nvme_bytes = 0;
  std::vector<double> save_seconds;  // per lifetime: its save's seconds if offloaded, else 0
  double throttle = 0;               // forward_throttle_seconds of the offloads chosen so far
  std::vector<char> recomputed;      // per lifetime
  std::map<int32_t, double> run_transfer;         // per run: one-way seconds of its offloaded items
  std::map<int32_t, ActivationPath> run_path;     // per run: the path its offloaded items take
};

// What more a resource's load beyond its free time costs: the part no longer hidden by compute.
double overflow(double load_before, double added, double free_seconds) {
  return std::max(0.0, load_before + added - free_seconds) - std::max(0.0, load_before - free_seconds);
}

// The runs ahead of a segment's backward whose backward hides a load of t seconds (at least
// min_prefetch_runs), and the part of t they do not hide.
std::pair<int64_t, double> prefetch_for(const ActivationLifetime& l, double t, int64_t min_prefetch_runs) {
  double ahead = 0;
  int64_t d = 0;
  const auto later = static_cast<int64_t>(l.later_backward_seconds.size());
  while (d < later && (d < min_prefetch_runs || ahead < t)) ahead += l.later_backward_seconds[static_cast<size_t>(d++)];
  return {std::max<int64_t>(1, d), std::max(0.0, t - ahead)};
}

std::vector<Option> options_for(const std::vector<ActivationLifetime>& all, size_t index, const ActivationPassInput& in,
                                const State& st) {
  const ActivationLifetime& l = all[index];
  std::vector<Option> opts;
  if (l.pinned) return opts;
  const auto fixed_path = st.run_path.find(l.run);
  auto offload = [&](ActivationPath path, double spb, Tier tier) {
    if (spb <= 0) return;
    if (fixed_path != st.run_path.end() && fixed_path->second != path) return;  // one path per segment
    const bool to_host = tier == Tier::Host;
    if (to_host ? st.host_bytes + l.bytes > in.host_bytes_free : st.nvme_bytes + l.bytes > in.nvme_bytes_free) return;
    Option o;
    o.choice.action = ActivationAction::Offload;
    o.choice.tier = tier;
    o.choice.path = path;
    o.choice.transfer_seconds = l.bytes * spb;
    const double t = o.choice.transfer_seconds;
    o.pcie_load = path == ActivationPath::Gds ? 0 : t;
    o.nvme_load = path == ActivationPath::Host ? 0 : t;
    // The save and the load of one segment are serial; what the window cannot hide stalls. The
    // load starts prefetch_runs runs ahead of its backward: the fewest whose backward hides it.
    // A tensor joins its segment's transfer: it costs what it adds to the segment's stalls.
    const auto prior = st.run_transfer.find(l.run);
    const double before = l.tensor >= 0 && prior != st.run_transfer.end() ? prior->second : 0.0;
    const double window_stall = std::max(0.0, 2.0 * (before + t) - l.idle_seconds) - std::max(0.0, 2.0 * before - l.idle_seconds);
    const auto [runs_ahead, load_after] = prefetch_for(l, before + t, in.min_prefetch_runs);
    const double load_before = before > 0 ? prefetch_for(l, before, in.min_prefetch_runs).second : 0.0;
    o.choice.prefetch_runs = runs_ahead;
    const double load_stall = load_after - load_before;
    const double lane_stall = std::max(overflow(st.pcie_load, o.pcie_load, in.pcie_free_seconds),
                                       overflow(st.nvme_load, o.nvme_load, in.nvme_free_seconds));
    // Saves slower than the forward that produces them hold it back (kActivationSavesInFlight).
    std::vector<double> saves = st.save_seconds;
    saves[index] = t;
    const double throttle = std::max(0.0, forward_throttle_seconds(all, saves) - st.throttle);
    o.choice.predicted_cost = std::max(window_stall, load_stall) + lane_stall + throttle;
    o.choice.reason = fmt::format(
        "offload to {} ({}): {} each way in {:.3g} s, idle window {:.3g} s, loaded {} run(s) ahead, predicted stall {:.3g} s{}",
        to_string(tier), to_string(path), format_bytes(l.bytes), t, l.idle_seconds, o.choice.prefetch_runs,
        o.choice.predicted_cost,
        throttle > 0 ? fmt::format(" ({:.3g} s of it the forward waiting for saves)", throttle) : std::string());
    o.saved = l.bytes;
    (to_host ? o.host_bytes : o.nvme_bytes) = l.bytes;
    opts.push_back(o);
  };
  const bool any = in.tier.automatic;
  if (any || in.tier.tier == Tier::Host) offload(ActivationPath::Host, in.host_seconds_per_byte, Tier::Host);
  if (any || in.tier.tier == Tier::Nvme) {
    if (in.gds_seconds_per_byte > 0) offload(ActivationPath::Gds, in.gds_seconds_per_byte, Tier::Nvme);
    else offload(ActivationPath::NvmeViaHost, in.nvme_seconds_per_byte, Tier::Nvme);
  }
  if (in.policy != ActivationPolicy::Lifetime) return opts;
  if (l.tensor < 0 && in.can_recompute && l.bytes > in.checkpoint_bytes) {
    Option o;
    o.choice.action = ActivationAction::Recompute;
    o.choice.predicted_cost = l.forward_seconds;
    o.choice.reason = fmt::format("recompute: {:.3g} s of forward again in backward, cheaper than any offload", l.forward_seconds);
    o.saved = l.bytes - in.checkpoint_bytes;
    opts.push_back(o);
  }
  // A tensor is recomputed by its producer alone: its input is kept or brought back, not recomputed.
  const bool input_here = l.input < 0 || !st.recomputed[static_cast<size_t>(l.input)];
  const bool consumer_needs = l.consumer >= 0 && st.recomputed[static_cast<size_t>(l.consumer)];
  if (l.tensor >= 0 && input_here && !consumer_needs && l.bytes > 0) {
    Option o;
    o.choice.action = ActivationAction::Recompute;
    o.choice.predicted_cost = l.forward_seconds;
    o.choice.reason = fmt::format("recompute {} of block {}: its operator again in backward ({:.3g} s), cheaper than any offload",
                                  l.name, l.first_block, l.forward_seconds);
    o.saved = l.bytes;
    opts.push_back(o);
  }
  return opts;
}

void apply(const std::vector<ActivationLifetime>& all, size_t index, const Option& o, State& st) {
  const ActivationLifetime& l = all[index];
  if (o.choice.action == ActivationAction::Offload) {
    st.save_seconds[index] = o.choice.transfer_seconds;
    st.throttle = forward_throttle_seconds(all, st.save_seconds);
    st.run_transfer[l.run] += o.choice.transfer_seconds;
    st.run_path[l.run] = o.choice.path;
  }
  if (o.choice.action == ActivationAction::Recompute) st.recomputed[index] = 1;
  st.pcie_load += o.pcie_load;
  st.nvme_load += o.nvme_load;
  st.host_bytes += o.host_bytes;
  st.nvme_bytes += o.nvme_bytes;
}

double kept_bytes(const std::vector<ActivationLifetime>& lifetimes, const std::vector<ActivationChoice>& choices,
                  const ActivationPassInput& in) {
  double kept = 0;
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    if (choices[i].action == ActivationAction::Keep) kept += lifetimes[i].bytes;
    if (choices[i].action == ActivationAction::Recompute && lifetimes[i].tensor < 0) kept += in.checkpoint_bytes;
  }
  return kept;
}

}  // namespace

bool activation_choices_fit(const std::vector<ActivationLifetime>& lifetimes, const std::vector<ActivationChoice>& choices,
                            const ActivationPassInput& in) {
  return kept_bytes(lifetimes, choices, in) <= in.device_bytes_for_activations;
}

std::vector<ActivationChoice> choose_activation_actions(const std::vector<ActivationLifetime>& lifetimes,
                                                        const ActivationPassInput& in) {
  std::vector<ActivationChoice> out(lifetimes.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i].reason = lifetimes[i].pinned ? "kept on the device: the block's output is the next block's input"
                                        : "kept on the device: its activations fit the device budget";
  if (in.policy == ActivationPolicy::None) return out;
  if (!in.tier.automatic && in.tier.tier == Tier::Device)
    throw PlanError("activation_offload.tier: offloaded activations go to host or nvme (or auto), not the device");
  State st;
  st.save_seconds.assign(lifetimes.size(), 0.0);
  st.recomputed.assign(lifetimes.size(), 0);
  // Longest idle window first: the segments whose transfers hide best.
  std::vector<size_t> order(lifetimes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lifetimes[a].idle_seconds > lifetimes[b].idle_seconds; });
  if (in.policy == ActivationPolicy::OffloadAll) {
    for (size_t i : order) {
      if (lifetimes[i].pinned) continue;
      auto opts = options_for(lifetimes, i, in, st);
      auto best_offload = [&]() -> const Option* {
        const Option* best = nullptr;
        for (const auto& o : opts)
          if (o.choice.action == ActivationAction::Offload && (!best || o.choice.predicted_cost < best->choice.predicted_cost)) best = &o;
        return best;
      };
      const Option* best = best_offload();
      if (!best) {
        // The policy offloads everything: where the estimate of free room says no, it offloads
        // anyway, and the Program's peak on that tier is what decides whether the run fits
        // (core/fit.hpp), with the bytes it really holds.
        ActivationPassInput roomy = in;
        roomy.host_bytes_free = roomy.nvme_bytes_free = std::numeric_limits<double>::infinity();
        opts = options_for(lifetimes, i, roomy, st);
        best = best_offload();
      }
      if (!best)
        throw PlanError(fmt::format("activation_offload: no path to offload blocks {}-{} ({}) to {}",
                                    lifetimes[i].first_block, lifetimes[i].last_block, format_bytes(lifetimes[i].bytes),
                                    to_string(in.tier)));
      out[i] = best->choice;
      out[i].reason += " (policy offload_all)";
      apply(lifetimes, i, *best, st);
    }
    return out;
  }
  // Lifetime: free device memory until the kept items fit, each time taking the option that
  // costs the fewest predicted seconds per byte freed.
  double kept = 0;
  for (const auto& l : lifetimes) kept += l.bytes;
  std::vector<char> decided(lifetimes.size(), 0);
  while (kept > in.device_bytes_for_activations) {
    const Option* best = nullptr;
    size_t best_i = 0;
    double best_score = std::numeric_limits<double>::infinity();
    std::vector<std::vector<Option>> all(lifetimes.size());
    for (size_t i : order) {
      if (decided[i]) continue;
      all[i] = options_for(lifetimes, i, in, st);
      for (const auto& o : all[i]) {
        const double score = o.choice.predicted_cost / o.saved;
        if (score < best_score) {
          best_score = score;
          best = &o;
          best_i = i;
        }
      }
    }
    if (!best) break;  // nothing more can go: the planner's peak check names the shortfall
    out[best_i] = best->choice;
    decided[best_i] = 1;
    apply(lifetimes, best_i, *best, st);
    kept -= best->saved;
  }
  return out;
}

}  // namespace zinf::core
