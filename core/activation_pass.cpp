#include "core/activation_pass.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/errors.hpp"
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
                                                     const std::vector<std::vector<int32_t>>& runs) {
  const auto& s = g.spec;
  const double per_block = double(g.tokens) * (16.0 * double(s.hidden) + 2.0 * double(s.heads) * double(s.seq));
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
    l.segment = static_cast<int32_t>(out.size());
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
    l.forward_seconds = fwd[r];
    out.push_back(l);
  }
  return out;
}

double forward_throttle_seconds(const std::vector<ActivationLifetime>& lifetimes, const std::vector<double>& save_seconds) {
  double now = 0, lane = 0, waited = 0;
  std::vector<double> ends;  // save end times of the offloaded segments so far, in order
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    const bool offloaded = i < save_seconds.size() && save_seconds[i] > 0;
    if (offloaded && ends.size() >= kActivationSavesInFlight) {
      const double ready = ends[ends.size() - kActivationSavesInFlight];
      if (ready > now) {
        waited += ready - now;
        now = ready;
      }
    }
    now += lifetimes[i].forward_seconds;
    if (offloaded) {
      lane = std::max(lane, now) + save_seconds[i];
      ends.push_back(lane);
    }
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
};

// What more a resource's load beyond its free time costs: the part no longer hidden by compute.
double overflow(double load_before, double added, double free_seconds) {
  return std::max(0.0, load_before + added - free_seconds) - std::max(0.0, load_before - free_seconds);
}

std::vector<Option> options_for(const std::vector<ActivationLifetime>& all, size_t index, const ActivationPassInput& in,
                                const State& st) {
  const ActivationLifetime& l = all[index];
  std::vector<Option> opts;
  auto offload = [&](ActivationPath path, double spb, Tier tier) {
    if (spb <= 0) return;
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
    const double window_stall = std::max(0.0, 2.0 * t - l.idle_seconds);
    double ahead = 0;
    int64_t d = 0;
    const auto later = static_cast<int64_t>(l.later_backward_seconds.size());
    while (d < later && (d < in.min_prefetch_runs || ahead < t)) ahead += l.later_backward_seconds[static_cast<size_t>(d++)];
    o.choice.prefetch_runs = std::max<int64_t>(1, d);
    const double load_stall = std::max(0.0, t - ahead);
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
  if (in.policy == ActivationPolicy::Lifetime && in.can_recompute && l.bytes > in.checkpoint_bytes) {
    Option o;
    o.choice.action = ActivationAction::Recompute;
    o.choice.predicted_cost = l.forward_seconds;
    o.choice.reason = fmt::format("recompute: {:.3g} s of forward again in backward, cheaper than any offload", l.forward_seconds);
    o.saved = l.bytes - in.checkpoint_bytes;
    opts.push_back(o);
  }
  return opts;
}

void apply(const std::vector<ActivationLifetime>& all, size_t index, const Option& o, State& st) {
  if (o.choice.action == ActivationAction::Offload) {
    st.save_seconds[index] = o.choice.transfer_seconds;
    st.throttle = forward_throttle_seconds(all, st.save_seconds);
  }
  st.pcie_load += o.pcie_load;
  st.nvme_load += o.nvme_load;
  st.host_bytes += o.host_bytes;
  st.nvme_bytes += o.nvme_bytes;
}

}  // namespace

std::vector<ActivationChoice> choose_activation_actions(const std::vector<ActivationLifetime>& lifetimes,
                                                        const ActivationPassInput& in) {
  std::vector<ActivationChoice> out(lifetimes.size());
  for (auto& c : out) c.reason = "kept on the device: its activations fit the device budget";
  if (in.policy == ActivationPolicy::None) return out;
  if (!in.tier.automatic && in.tier.tier == Tier::Device)
    throw PlanError("activation_offload.tier: offloaded activations go to host or nvme (or auto), not the device");
  State st;
  st.save_seconds.assign(lifetimes.size(), 0.0);
  // Longest idle window first: the segments whose transfers hide best.
  std::vector<size_t> order(lifetimes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lifetimes[a].idle_seconds > lifetimes[b].idle_seconds; });
  if (in.policy == ActivationPolicy::OffloadAll) {
    for (size_t i : order) {
      const auto opts = options_for(lifetimes, i, in, st);
      const Option* best = nullptr;
      for (const auto& o : opts)
        if (o.choice.action == ActivationAction::Offload && (!best || o.choice.predicted_cost < best->choice.predicted_cost)) best = &o;
      if (!best)
        throw PlanError(fmt::format("activation_offload: no room to offload blocks {}-{} ({}) to {}",
                                    lifetimes[i].first_block, lifetimes[i].last_block, format_bytes(lifetimes[i].bytes),
                                    to_string(in.tier)));
      out[i] = best->choice;
      out[i].reason += " (policy offload_all)";
      apply(lifetimes, i, *best, st);
    }
    return out;
  }
  // Lifetime: free device memory until the kept segments fit, each time taking the option that
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
