// The optimizer pass (core/plan_state.hpp): each rank's shard space cut into sub-groups of at most
// sub_group_size elements, and their pipelined update (read states and gradients, Adam, write back),
// advanced by emission as gradients become ready: after backward, or during it (overlap-backward).
#include "core/plan_state.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace zinf::core::planning {

namespace {

std::vector<int32_t> window_and(std::vector<int32_t> window, int32_t dep) {
  window.push_back(dep);
  return window;
}

// One sub-group's stages, each emitted once the tasks it depends on exist: read its inputs (states
// and gradients to where the optimizer runs), update it (Adam), write its outputs back.
class SubGroupStages {
public:
  SubGroupStages(PlanState& state, int32_t sub_group)
      : ps(state), id(sub_group), s(state.sg_[static_cast<size_t>(sub_group)]),
        g(state.builder_.sub_groups()[static_cast<size_t>(sub_group)]), n(double(g.count)),
        overlap(state.config_.optimizer_timing == OptimizerTiming::OverlapBackward),
        started(state.owner_started_[state.owner_based() ? static_cast<size_t>(g.owner) : 0]) {
    for (int32_t u : s.units) grad_deps.push_back(ps.grad_store_[static_cast<size_t>(u)]);
  }

  // Takes the sub-group's place in its owner's pipeline and reads its states (NVMe optimizer):
  // only `depth` sub-groups of one owner are in flight at once, so the sub-group `depth` before
  // this one has written its outputs back or, in waves (phases), every sub-group of the wave before
  // has. Needs no gradient: with reads ahead it runs before the sub-group is ready.
  bool start() {
    if (s.started) return true;
    if (!overlap && ps.backward_done_ < 0) return false;
    const size_t depth = static_cast<size_t>(ps.sg_in_flight_);
    std::vector<int32_t> window;
    auto wait_for = [&](int32_t old_id) {
      const auto& old = ps.sg_[static_cast<size_t>(old_id)];
      if (old.stage < 3) return false;
      window.push_back(old.adam);
      window.insert(window.end(), old.outs.begin(), old.outs.end());
      return true;
    };
    if (started.size() >= depth) {
      if (ps.sg_phases_) {
        const size_t wave_begin = started.size() / depth * depth;
        for (size_t j = wave_begin - depth; j < wave_begin; ++j)
          if (!wait_for(started[j])) return false;
      } else if (!wait_for(started[started.size() - depth])) {
        return false;
      }
    }
    s.seq = static_cast<int64_t>(started.size());
    started.push_back(id);
    s.started = true;
    s.window = window;
    if (ps.plan_.optimizer == Tier::Nvme) {
      s.state_buf = ps.builder_.buffer();
      s.in_states = ps.builder_.add(
          base(TaskKind::NvmeRead, Lane::NvmeRead, Data::OptimizerState, Tier::Nvme, Tier::Host, ps.state_bytes_ * n),
          window_and(window, overlap ? -1 : ps.backward_done_), {{Tier::Host, s.state_buf, ps.state_bytes_ * n}}, {});
    } else {
      s.in_states = -1;
    }
    return true;
  }

  // Each returns whether it emitted its stage (and moved the sub-group to the next).
  bool read_inputs() {
    // Starts the sub-group if reads ahead have not, then reads its gradients, which also wait for
    // the place in the pipeline (their buffer is part of it).
    if (!s.ready || !start()) return false;
    std::vector<int32_t> deps = grad_deps;
    deps.insert(deps.end(), s.window.begin(), s.window.end());
    if (!overlap) deps.push_back(ps.backward_done_);
    // Gradients to where the optimizer runs.
    const Tier where = ps.optim_compute_tier();
    const double gb = ps.moved_grad_bytes() * n;
    if (ps.plan_.gradients != where) {
      s.grad_buf = ps.builder_.buffer();
      // Each stage names the buffer it fills (Task::buffer) and the one an earlier stage filled that
      // it reads (Task::source; -1: the gradients' home).
      if (ps.plan_.gradients == Tier::Nvme) {
        const Tier land = Tier::Host;
        Task r = base(TaskKind::NvmeRead, Lane::NvmeRead, Data::Grad, Tier::Nvme, land, gb);
        r.buffer = s.grad_buf;
        int32_t t = ps.builder_.add(r, deps, {{land, s.grad_buf, gb}}, {});
        if (where == Tier::Device) {
          const int64_t dbuf = ps.builder_.buffer();
          Task c = base(TaskKind::CopyH2D, Lane::H2D, Data::Grad, Tier::Host, Tier::Device, gb);
          c.buffer = dbuf;
          c.source = s.grad_buf;
          t = ps.builder_.add(c, {t}, {{Tier::Device, dbuf, gb}}, {{Tier::Host, s.grad_buf, gb}});
          s.grad_buf = dbuf;
        }
        s.in_grads = t;
      } else if (ps.plan_.gradients == Tier::Device) {
        Task c = base(TaskKind::CopyD2H, Lane::D2H, Data::Grad, Tier::Device, Tier::Host, gb);
        c.buffer = s.grad_buf;
        s.in_grads = ps.builder_.add(c, deps, {{Tier::Host, s.grad_buf, gb}}, {});
      } else {  // host -> device for a device optimizer
        Task c = base(TaskKind::CopyH2D, Lane::H2D, Data::Grad, Tier::Host, Tier::Device, gb);
        c.buffer = s.grad_buf;
        s.in_grads = ps.builder_.add(c, deps, {{Tier::Device, s.grad_buf, gb}}, {});
      }
    }
    s.stage = 1;
    return true;
  }

  bool update() {
    const bool cpu = ps.plan_.optimizer != Tier::Device;
    if (ps.plan_.grad_clip && ps.norm_task_ < 0) return false;
    std::vector<int32_t> deps = grad_deps;
    deps.push_back(s.in_states);
    deps.push_back(s.in_grads);
    deps.push_back(ps.norm_task_);
    deps.push_back(overlap ? -1 : ps.backward_done_);
    std::vector<MemEvent> allocs, frees;
    if (s.grad_buf >= 0) frees.push_back({ps.optim_compute_tier(), s.grad_buf, ps.moved_grad_bytes() * n});
    // Updated bf16 parameters go back to their tier (and, stages 0-2, to every rank) from a buffer.
    const bool param_elsewhere = ps.plan_.params != ps.optim_compute_tier();
    if (param_elsewhere) {
      s.param_buf = ps.builder_.buffer();
      allocs.push_back({ps.optim_compute_tier(), s.param_buf, ps.updated_param_bytes() * n});
    }
    Task t = base(TaskKind::OptimizerStep, cpu ? Lane::CpuOptim : Lane::Compute, Data::OptimizerState,
                  ps.plan_.optimizer, ps.plan_.optimizer, ps.optimizer_host_bytes() * n);
    t.flops = kAdamFlopsPerParam * n;
    t.source = s.grad_buf;   // the gradients moved to where it runs (-1: their home is there)
    t.buffer = s.param_buf;  // where it writes the updated parameters (-1: their home is there)
    s.adam = ps.builder_.add(t, deps, allocs, frees);
    s.stage = 2;
    return true;
  }

  bool write_back() {
    // In waves, the writes of a wave wait for every update of the wave (so for every read of it).
    std::vector<int32_t> gate{s.adam};
    if (ps.sg_phases_) {
      const size_t depth = static_cast<size_t>(ps.sg_in_flight_);
      const size_t wb = static_cast<size_t>(s.seq) / depth * depth;
      const size_t we = std::min(wb + depth, static_cast<size_t>(ps.owner_sg_count_[ps.owner_based() ? static_cast<size_t>(g.owner) : 0]));
      if (started.size() < we) return false;
      for (size_t j = wb; j < we; ++j) {
        const auto& other = ps.sg_[static_cast<size_t>(started[j])];
        if (other.stage < 2) return false;
        gate.push_back(other.adam);
      }
    }
    if (ps.plan_.optimizer == Tier::Nvme)
      s.outs.push_back(ps.builder_.add(
          base(TaskKind::NvmeWrite, Lane::NvmeWrite, Data::OptimizerState, Tier::Host, Tier::Nvme, ps.state_bytes_ * n),
          gate, {}, {{Tier::Host, s.state_buf, ps.state_bytes_ * n}}));
    const Tier where = ps.optim_compute_tier();
    int32_t param_done = s.adam;
    if (ps.plan_.params != where) {
      const double pb = ps.updated_param_bytes() * n;
      // Each stage reads the buffer the one before filled (Task::source) and fills its own
      // (Task::buffer), or writes the parameters' home (-1).
      auto stage = [&](TaskKind k, Lane l, Tier from, Tier to, int64_t source, int64_t buffer) {
        Task t = base(k, l, Data::Param, from, to, pb);
        t.source = source;
        t.buffer = buffer;
        return t;
      };
      if (ps.plan_.params == Tier::Device) {
        param_done = ps.builder_.add(stage(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device, s.param_buf, -1),
                                     {s.adam}, {}, {{Tier::Host, s.param_buf, pb}});
      } else if (ps.plan_.params == Tier::Nvme) {
        int64_t buf = s.param_buf;
        int32_t t = s.adam;
        if (where == Tier::Device) {
          const int64_t hbuf = ps.builder_.buffer();
          t = ps.builder_.add(stage(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host, buf, hbuf), {t},
                              {{Tier::Host, hbuf, pb}}, {{Tier::Device, buf, pb}});
          buf = hbuf;
        }
        std::vector<int32_t> pdeps = gate;
        pdeps.push_back(t);
        param_done = ps.builder_.add(stage(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Host, Tier::Nvme, buf, -1),
                                     pdeps, {}, {{Tier::Host, buf, pb}});
      } else {  // host params, device optimizer
        param_done = ps.builder_.add(stage(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host, s.param_buf, -1),
                                     {s.adam}, {}, {{Tier::Device, s.param_buf, pb}});
      }
      s.outs.push_back(param_done);
    }
    if (!ps.params_partitioned() && ps.ranks_ > 1 && ps.config_.zero_stage >= 1) {
      // Stages 1-2: every rank needs the updated parameters of every shard.
      Task t = base(ps.owner_based() ? TaskKind::Broadcast : TaskKind::AllGather, Lane::Comm, Data::Param, Tier::Device,
                    Tier::Device, ps.param_bytes_ * n * (ps.owner_based() ? 1 : ps.data_parallel_));
      t.owner = -1;
      t.participants = ps.ranks_;
      t.root = g.owner;
      s.outs.push_back(ps.builder_.add(t, {param_done}, {}, {}));
    }
    s.stage = 3;
    return true;
  }

private:
  Task base(TaskKind k, Lane l, Data d, Tier from, Tier to, double bytes) const {
    Task t = make_task(k, l, d, Phase::Optimizer);
    t.sub_group = id;
    t.sg_offset = g.offset;
    t.sg_count = g.count;
    t.owner = g.owner;
    t.from = from;
    t.to = to;
    t.bytes = bytes;
    return t;
  }

  PlanState& ps;
  const int32_t id;
  SgState& s;
  const SubGroup& g;
  const double n;
  const bool overlap;
  std::vector<int32_t>& started;  // its owner's sub-groups started, in order
  std::vector<int32_t> grad_deps;  // the last gradient store of each unit it covers
};

// Advances one sub-group through its stages as far as the tasks it depends on exist.
// Returns true when it emitted anything.
bool advance_sub_group(PlanState& ps, int32_t id) {
  SubGroupStages stages(ps, id);
  const int32_t& stage = ps.sg_[static_cast<size_t>(id)].stage;
  bool progressed = false;
  if (stage == 0 && !(progressed = stages.read_inputs())) return false;
  if (stage == 1 && stages.update()) progressed = true;
  if (stage == 2 && stages.write_back()) progressed = true;
  return progressed;
}

// The order emission will find sub-groups ready in: a sub-group is ready once the last micro-batch
// has reduced the gradients of every unit it covers (emit_grad_reduction); sub-groups no backward
// step reaches come last. Reads ahead start sub-groups in this order. Also counts the last
// micro-batch's forward steps, over which reads ahead spread.
void predict_ready_order(PlanState& ps) {
  const int32_t last_mb = static_cast<int32_t>(ps.plan_.micro_batches - 1);
  std::vector<int32_t> pending(ps.sg_.size());
  for (size_t j = 0; j < ps.sg_.size(); ++j) pending[j] = ps.sg_[j].pending_units;
  std::vector<char> placed(ps.sg_.size(), 0);
  ps.sg_start_order_.clear();
  ps.sg_ahead_fwd_steps_ = 0;
  for (size_t i = 0; i < ps.steps_.size(); ++i) {
    const Step& st = ps.steps_[i];
    if (st.mb != last_mb) continue;
    if (st.kind == TaskKind::Forward) ++ps.sg_ahead_fwd_steps_;
    for (const Reduction& r : reductions_at(ps, i)) {
      if (!r.last) continue;  // an earlier contribution of a shared unit: its gradient is not complete
      for (int32_t sg : ps.unit_sgs_[static_cast<size_t>(r.unit)])
        if (--pending[static_cast<size_t>(sg)] == 0) {
          ps.sg_start_order_.push_back(sg);
          placed[static_cast<size_t>(sg)] = 1;
        }
    }
  }
  for (size_t j = 0; j < ps.sg_.size(); ++j)
    if (!placed[j]) ps.sg_start_order_.push_back(static_cast<int32_t>(j));
  ps.sg_ahead_cursor_ = 0;
  ps.sg_ahead_fwd_done_ = 0;
}

}  // namespace

double sub_group_host_bytes(const PlanState& ps, int64_t count) {
  const double n = double(count);
  const Tier where = ps.optim_compute_tier();
  double bytes = ps.plan_.optimizer == Tier::Nvme ? ps.state_bytes_ * n : 0.0;
  if (where == Tier::Host && ps.plan_.gradients != Tier::Host) bytes += ps.moved_grad_bytes() * n;
  if (where == Tier::Host && ps.plan_.params != Tier::Host) bytes += ps.updated_param_bytes() * n;
  return bytes;
}

int64_t optimizer_depth(const PlanState& ps, int64_t largest_count, int64_t sub_groups) {
  if (ps.config_.optimizer_sub_groups_in_flight > 0) return ps.config_.optimizer_sub_groups_in_flight;
  if (ps.plan_.optimizer != Tier::Nvme || largest_count <= 0) return kOptimizerPipelineDepth;
  // A share of what the host budget leaves after the states placed there, in sub-groups; never
  // fewer than the read / update / write pipeline needs, nor more than a rank has.
  const double free = at(ps.plan_.budget, Tier::Host) - at(ps.plan_.static_bytes, Tier::Host);
  int64_t fit = static_cast<int64_t>(kOptimizerHostShare * std::max(0.0, free) / sub_group_host_bytes(ps, largest_count));
  if (ps.sg_depth_cap_ > 0) fit = std::min(fit, ps.sg_depth_cap_);
  return std::max<int64_t>(kOptimizerPipelineDepth, std::min(fit, sub_groups));
}

// The offsets where a rank's sub-groups start, in a shard space of `space` elements: every S
// elements, or (whole units, as DeepSpeed) at the start of a unit once the group before has reached
// S. `unit_starts` are the (aligned) offsets of the rank's units in order.
std::vector<int64_t> sub_group_starts(const PlanState& ps, int64_t space, int64_t S, const std::vector<int64_t>& unit_starts) {
  // A bound on what the pipeline holds: each sub-group is several tasks and buffers per step. Checked
  // before the offsets are listed where they could be many (a sub_group_size of 1 lists every element).
  constexpr int64_t kMaxSubGroups = 200'000;
  auto bound = [&](int64_t count) {
    if (count > kMaxSubGroups)
      throw PlanError(fmt::format("sub_group_size {} cuts a rank's {} optimizer elements into {} sub-groups, above "
                                  "zinf's bound of {}: raise sub_group_size (optimizer.sub_group_size; "
                                  "zero_optimization.sub_group_size in a DeepSpeed config) to at least {}",
                                  ps.config_.sub_group_size, space, count, kMaxSubGroups,
                                  (space + kMaxSubGroups - 1) / kMaxSubGroups));
  };
  std::vector<int64_t> starts;
  if (!ps.config_.sub_groups_whole_units) {
    bound((space + S - 1) / std::max<int64_t>(1, S));
    for (int64_t off = 0; off < space; off += S) starts.push_back(off);
  } else {
    for (int64_t off : unit_starts)
      if (off < space && (starts.empty() || off - starts.back() >= S)) starts.push_back(off);
    if (!starts.empty()) starts.front() = 0;
    bound(int64_t(starts.size()));  // at most one per unit: listed first
  }
  return starts;
}

void add_sub_groups(std::vector<SubGroup>& sgs, const std::vector<int64_t>& starts, int64_t space, int32_t owner) {
  for (size_t i = 0; i < starts.size(); ++i) {
    SubGroup g;
    g.id = static_cast<int32_t>(sgs.size());
    g.offset = starts[i];
    g.count = (i + 1 < starts.size() ? starts[i + 1] : space) - starts[i];
    g.owner = owner;
    sgs.push_back(g);
  }
}

void make_sub_groups(PlanState& ps) {
  // A rank's shard space is its shards (bandwidth-centric) or the units it owns (owner-based), in
  // unit order; sub-groups are consecutive ranges of it (sub_group_starts).
  const int64_t S = shard_aligned(std::max<int64_t>(1, ps.config_.sub_group_size));
  std::vector<SubGroup> sgs;
  ps.unit_sgs_.assign(ps.units_.size(), {});
  if (!ps.owner_based()) {
    const int64_t space = ps.shard_space_;
    ps.builder_.shard_space() = {space};
    std::vector<int64_t> unit_starts;
    for (const auto& u : ps.units_) unit_starts.push_back(u.shard_offset);
    add_sub_groups(sgs, sub_group_starts(ps, space, S, unit_starts), space, -1);
    // Units overlapping each sub-group, by walking both in order.
    size_t k = 0;
    for (const auto& u : ps.units_) {
      const int64_t ub = u.shard_offset, ue = ub + u.shard_numel;
      while (k < sgs.size() && sgs[k].offset + sgs[k].count <= ub) ++k;
      for (size_t j = k; j < sgs.size() && sgs[j].offset < ue; ++j)
        ps.unit_sgs_[static_cast<size_t>(u.id)].push_back(static_cast<int32_t>(j));
    }
  } else {
    ps.builder_.shard_space() = ps.owned_elems_;
    std::vector<std::vector<int32_t>> owned(static_cast<size_t>(ps.ranks_));
    for (const auto& u : ps.units_) owned[static_cast<size_t>(u.owner)].push_back(u.id);
    for (int32_t r = 0; r < ps.ranks_; ++r) {
      const int64_t space = ps.owned_elems_[static_cast<size_t>(r)];
      const size_t first = sgs.size();
      std::vector<int64_t> unit_starts;
      for (int32_t uid : owned[static_cast<size_t>(r)]) unit_starts.push_back(ps.units_[static_cast<size_t>(uid)].owner_offset);
      add_sub_groups(sgs, sub_group_starts(ps, space, S, unit_starts), space, r);
      size_t k = first;
      for (int32_t uid : owned[static_cast<size_t>(r)]) {
        const auto& u = ps.units_[static_cast<size_t>(uid)];
        const int64_t ub = u.owner_offset, ue = ub + u.numel;
        while (k < sgs.size() && sgs[k].offset + sgs[k].count <= ub) ++k;
        for (size_t j = k; j < sgs.size() && sgs[j].offset < ue; ++j)
          ps.unit_sgs_[static_cast<size_t>(uid)].push_back(static_cast<int32_t>(j));
      }
    }
  }
  ps.builder_.sub_groups() = sgs;
  ps.plan_.sub_groups = static_cast<int64_t>(sgs.size());
  ps.owner_sg_count_.assign(ps.owner_based() ? static_cast<size_t>(ps.ranks_) : 1, 0);
  int64_t largest = 0, most = 0;
  for (const auto& g : sgs) {
    auto& c = ps.owner_sg_count_[ps.owner_based() ? static_cast<size_t>(g.owner) : 0];
    largest = std::max(largest, g.count);
    most = std::max(most, ++c);
  }
  ps.sg_in_flight_ = optimizer_depth(ps, largest, most);
  ps.sg_phases_ = ps.plan_.optimizer == Tier::Nvme && ps.config_.optimizer_nvme_phases;
  ps.plan_.sub_groups_in_flight = ps.sg_in_flight_;
  ps.plan_.optimizer_nvme_phases = ps.sg_phases_;
  ps.sg_largest_ = largest;
  ps.sg_.assign(sgs.size(), {});
  for (size_t u = 0; u < ps.units_.size(); ++u)
    for (int32_t sg : ps.unit_sgs_[u]) {
      ps.sg_[static_cast<size_t>(sg)].units.push_back(static_cast<int32_t>(u));
      ++ps.sg_[static_cast<size_t>(sg)].pending_units;
    }
  ps.owner_started_.assign(ps.owner_based() ? static_cast<size_t>(ps.ranks_) : 1, {});
  predict_ready_order(ps);
}

bool reads_ahead(const PlanState& ps) {
  // After backward every gradient is stored: no gradient read waits, and states first would only
  // delay the first update.
  return ps.config_.optimizer_read_ahead && ps.plan_.optimizer == Tier::Nvme &&
         ps.config_.optimizer_timing == OptimizerTiming::OverlapBackward;
}

void read_states_ahead(PlanState& ps) {
  if (!reads_ahead(ps)) return;
  // A share of every owner's depth in proportion to the forward steps done, so that the reads fill
  // the disk's idle time between parameter fetches instead of queuing before them. Only an owner's
  // first `depth` sub-groups can start (start() finds no write emitted yet for the others), so none
  // of these reads waits for anything.
  const int64_t total = ps.sg_in_flight_ * static_cast<int64_t>(ps.owner_started_.size());
  const int64_t F = std::max<int64_t>(1, ps.sg_ahead_fwd_steps_);
  const int64_t done = std::min(++ps.sg_ahead_fwd_done_, F);
  const int64_t limit = (done * total + F - 1) / F;
  int64_t started = 0;
  for (const auto& owner : ps.owner_started_) started += static_cast<int64_t>(owner.size());
  auto& order = ps.sg_start_order_;
  for (size_t i = ps.sg_ahead_cursor_; i < order.size() && started < limit; ++i)
    if (!ps.sg_[static_cast<size_t>(order[i])].started && SubGroupStages(ps, order[i]).start()) ++started;
  while (ps.sg_ahead_cursor_ < order.size() && ps.sg_[static_cast<size_t>(order[ps.sg_ahead_cursor_])].started)
    ++ps.sg_ahead_cursor_;
}

void pump_optimizer(PlanState& ps, bool backward_done) {
  if (backward_done && ps.plan_.grad_clip && ps.norm_task_ < 0) {
    // Global gradient norm: each rank's partial sum of squares is taken as its accumulated shards
    // are final (fused into the accumulation), combined here and all-reduced; every Adam waits.
    std::vector<int32_t> deps(ps.grad_store_.begin(), ps.grad_store_.end());
    deps.push_back(ps.backward_done_);
    Task n = make_task(TaskKind::GradNorm, ps.plan_.gradients == Tier::Device ? Lane::Compute : Lane::CpuOptim,
                       Data::Scalar, Phase::Optimizer);
    n.from = n.to = ps.plan_.gradients;
    n.bytes = 8;
    const int32_t partial = ps.builder_.add(n, deps, {}, {});
    Task a = make_task(TaskKind::AllReduce, Lane::Comm, Data::Scalar, Phase::Optimizer);
    a.bytes = 8;
    a.participants = ps.ranks_;
    ps.norm_task_ = ps.builder_.add(a, {partial}, {}, {});
  }
  // Reads ahead: before each step a sub-group takes, every ready sub-group that can start does, so
  // that every state read the pipeline has room for precedes the next gradient read (one waiting
  // for its store holds back the lane's later tasks).
  auto start_ready = [&ps] {
    for (size_t i = ps.sg_cursor_; i < ps.sg_ready_order_.size(); ++i) {
      const int32_t id = ps.sg_ready_order_[i];
      if (!ps.sg_[static_cast<size_t>(id)].started && !SubGroupStages(ps, id).start()) return;
    }
  };
  // Sub-groups start in the order their gradients became ready; keep advancing until stuck.
  for (bool any = true; any;) {
    any = false;
    for (size_t i = ps.sg_cursor_; i < ps.sg_ready_order_.size(); ++i) {
      if (reads_ahead(ps)) start_ready();
      any |= advance_sub_group(ps, ps.sg_ready_order_[i]);
    }
    while (ps.sg_cursor_ < ps.sg_ready_order_.size() && ps.sg_[static_cast<size_t>(ps.sg_ready_order_[ps.sg_cursor_])].stage == 3)
      ++ps.sg_cursor_;
  }
}

}  // namespace zinf::core::planning
