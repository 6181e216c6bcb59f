// The emission pass (core/plan_state.hpp): the Program's tasks in one pass over the steps, each after its
// dependencies (so ids are a topological order and every lane's order is too): before each compute step
// the fetch stages and loads scheduled there, after it the reductions, saves and (overlapped) optimizer
// stages it makes possible; then the Program's tables and the bytes each kind of data moves.
#include "core/plan_state.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

namespace zinf::core::planning {

// stage 0: NVMe -> host; 1: host -> device (or the owner-based alloc + copy); 2: all-gather / broadcast.
void emit_fetch_stage(PlanState& ps, Fetch& f, int stage, int32_t prev_compute) {
  const ParamUnit& u = ps.units_[static_cast<size_t>(f.unit)];
  const Step& consumer = ps.steps_[static_cast<size_t>(f.consumer)];
  const Phase phase = consumer.kind == TaskKind::Forward ? Phase::Forward : Phase::Backward;
  const int32_t owner = ps.owner_of(u);
  const double shard = ps.param_bytes_ * double(ps.shard_elems(u));
  const double whole = ps.param_bytes_ * double(u.numel);
  const double gathered = ps.owner_based() ? whole : ps.param_bytes_ * double(ps.gathered_elems(u));
  // What the gathered copy holds on the device, in the working precision.
  const double gathered_mem = ps.working_bytes_ * double(ps.gathered_elems(u));
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) {
    Task t = make_task(k, l, Data::Param, phase);
    t.unit = u.id;
    t.op = consumer.op;
    t.micro_batch = consumer.mb;
    t.from = from;
    t.to = to;
    return t;
  };
  if (stage == 0) {
    if (ps.plan_.params != Tier::Nvme) return;
    Task t = base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host);
    t.bytes = shard;
    t.owner = owner;
    f.host_buf = ps.builder_.buffer();
    t.buffer = f.host_buf;
    f.nc_task = ps.builder_.add(t, {prev_compute}, {{Tier::Host, f.host_buf, shard}});
    f.last_task = f.nc_task;
    return;
  }
  if (stage == 1) {
    if (ps.owner_based()) {
      f.gathered_buf = ps.builder_.buffer();
      Task a = base(TaskKind::Alloc, Lane::H2D, Tier::Device, Tier::Device);
      a.buffer = f.gathered_buf;
      const int32_t alloc = ps.builder_.add(a, {prev_compute}, {{Tier::Device, f.gathered_buf, gathered_mem}});
      f.last_task = alloc;
      if (ps.plan_.params == Tier::Device) return;  // the owner broadcasts from its resident copy
      Task t = base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device);
      t.bytes = shard;
      t.owner = owner;
      t.buffer = f.gathered_buf;  // the owner copies its whole unit straight into the gathered buffer
      t.source = f.host_buf;
      std::vector<MemEvent> frees;
      if (f.host_buf >= 0) frees.push_back({Tier::Host, f.host_buf, shard});
      f.h2d_task = ps.builder_.add(t, {prev_compute, alloc, f.nc_task}, {}, frees);
      f.last_task = f.h2d_task;
      return;
    }
    if (ps.plan_.params == Tier::Device) return;
    Task t = base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device);
    t.bytes = shard;
    f.shard_buf = ps.builder_.buffer();
    t.buffer = f.shard_buf;
    t.source = f.host_buf;
    std::vector<MemEvent> frees;
    if (f.host_buf >= 0) frees.push_back({Tier::Host, f.host_buf, shard});
    f.h2d_task = ps.builder_.add(t, {prev_compute, f.nc_task}, {{Tier::Device, f.shard_buf, shard}}, frees);
    f.last_task = f.h2d_task;
    return;
  }
  // stage 2: the collective that makes the whole unit available on every rank
  Task t = base(ps.owner_based() ? TaskKind::Broadcast : TaskKind::AllGather, Lane::Comm, Tier::Device, Tier::Device);
  t.bytes = gathered;
  t.participants = ps.ranks_;
  t.root = owner;
  if (ps.owner_based()) {
    t.buffer = f.gathered_buf;
    // What the owner broadcasts: what its host-to-device copy put in the buffer, or (none) its home.
    if (f.h2d_task >= 0) t.source = f.gathered_buf;
    f.last_task = ps.builder_.add(t, {prev_compute, f.last_task}, {}, {});
    return;
  }
  f.gathered_buf = ps.builder_.buffer();
  t.buffer = f.gathered_buf;
  t.source = f.shard_buf;
  std::vector<MemEvent> frees;
  if (f.shard_buf >= 0) frees.push_back({Tier::Device, f.shard_buf, shard});
  // DeepSpeed's synchronizing fetch: the gather waits for every device copy issued before it
  // (collectives before it already precede it on the comm lane).
  const bool sync = ps.config_.deepspeed.fetch_syncs_device;
  f.last_task = ps.builder_.add(t,
                                {prev_compute, f.h2d_task, sync ? ps.builder_.last_on(Lane::H2D) : -1,
                                 sync ? ps.builder_.last_on(Lane::D2H) : -1},
                                {{Tier::Device, f.gathered_buf, gathered_mem}}, frees);
}

namespace {

// After the last backward use of a unit by an operator in micro-batch `mb`: reduce that contribution
// to the shard owner(s) and store the shard on the gradients tier, accumulating over contributions
// (micro-batches, and the operators that share the unit).
void emit_grad_reduction(PlanState& ps, const Reduction& red, int32_t mb, int32_t compute_task) {
  const int32_t unit = red.unit;
  const ParamUnit& u = ps.units_[static_cast<size_t>(unit)];
  const int32_t owner = ps.owner_of(u);
  const double whole = ps.grad_bytes_ * double(u.numel);
  // The whole gradient as this rank holds it before the reduction (padded for a reduce-scatter).
  const double padded = ps.owner_based() || !ps.grads_partitioned() ? whole : ps.grad_bytes_ * double(ps.gathered_elems(u));
  const double shard = ps.grads_partitioned() ? ps.grad_bytes_ * double(ps.shard_elems(u)) : whole;
  // The same before accumulation, as the device (and the host staging on its way to NVMe) holds
  // them: in the working precision. The accumulated shard on its tier is bf16.
  const double to_mem = ps.working_bytes_ / ps.grad_bytes_;
  const double whole_mem = whole * to_mem, padded_mem = padded * to_mem, shard_mem = shard * to_mem;
  // The shard as it leaves the device for a host optimizer (fp32 on DeepSpeed's host path), and as
  // the host staging on its way to NVMe holds it.
  const double moved = shard * ps.moved_grad_bytes() / ps.grad_bytes_;
  const double staged = std::max(shard_mem, moved);
  const int64_t full_buf = ps.grad_buf_[static_cast<size_t>(unit)];
  const int32_t prev_store = ps.grad_store_[static_cast<size_t>(unit)];
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) {
    Task t = make_task(k, l, Data::Grad, Phase::Backward);
    t.unit = unit;
    t.micro_batch = mb;
    t.from = from;
    t.to = to;
    t.grad_first = red.first;
    t.grad_last = red.last;
    return t;
  };
  int32_t last = -1;
  int64_t shard_buf = -1;  // device buffer holding this rank's reduced shard, when it must move on
  if (!ps.grads_partitioned()) {
    Task t = base(TaskKind::AllReduce, Lane::Comm, Tier::Device, Tier::Device);
    t.bytes = whole;
    t.participants = ps.ranks_;
    last = ps.builder_.add(t, {compute_task, prev_store}, {}, {{Tier::Device, full_buf, padded_mem}});
  } else if (ps.owner_based()) {
    Task t = base(TaskKind::Reduce, Lane::Comm, Tier::Device, Tier::Device);
    t.bytes = whole;
    t.participants = ps.ranks_;
    t.root = owner;
    last = ps.builder_.add(t, {compute_task, prev_store}, {}, {});
  } else {
    Task t = base(TaskKind::ReduceScatter, Lane::Comm, Tier::Device, Tier::Device);
    t.bytes = padded;
    t.participants = ps.ranks_;
    std::vector<MemEvent> allocs;
    if (ps.plan_.gradients != Tier::Device) {
      shard_buf = ps.builder_.buffer();
      allocs.push_back({Tier::Device, shard_buf, shard_mem});
    }
    last = ps.builder_.add(t, {compute_task, prev_store}, allocs, {{Tier::Device, full_buf, padded_mem}});
  }
  const int32_t reduce = last;
  ps.grad_reduce_[static_cast<size_t>(unit)] = reduce;
  if (ps.plan_.gradients != Tier::Device) {
    // Device -> host: into the host accumulation buffer, or a staging buffer on its way to NVMe.
    Task t = base(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host);
    t.bytes = moved;
    t.owner = owner;
    std::vector<MemEvent> allocs, frees;
    int64_t host_buf = -1;
    if (ps.plan_.gradients == Tier::Nvme) {
      host_buf = ps.builder_.buffer();
      allocs.push_back({Tier::Host, host_buf, staged});
    }
    if (shard_buf >= 0) frees.push_back({Tier::Device, shard_buf, shard_mem});
    last = ps.builder_.add(t, std::vector<int32_t>{reduce, prev_store}, allocs, frees);
    if (ps.plan_.gradients == Tier::Nvme) {
      std::vector<MemEvent> wfrees{{Tier::Host, host_buf, staged}};
      int32_t partial = -1;
      if (!red.first) {  // read the partial sum of the earlier contributions, add, write back
        Task r = base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host);
        r.bytes = moved;
        r.owner = owner;
        const int64_t pbuf = ps.builder_.buffer();
        partial = ps.builder_.add(r, {reduce, prev_store}, {{Tier::Host, pbuf, moved}});
        wfrees.push_back({Tier::Host, pbuf, moved});
      }
      Task w = base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Host, Tier::Nvme);
      w.bytes = moved;
      w.owner = owner;
      last = ps.builder_.add(w, std::vector<int32_t>{last, partial}, {}, wfrees);
    }
  }
  if (ps.owner_based() && ps.grads_partitioned()) {  // every rank drops its copy of the whole gradient once the owner has it
    Task fr = base(TaskKind::Free, Lane::D2H, Tier::Device, Tier::Device);
    last = ps.builder_.add(fr, {reduce, last}, {}, {{Tier::Device, full_buf, whole_mem}});
  }
  ps.grad_store_[static_cast<size_t>(unit)] = last;
  ps.grad_stores_.push_back(last);
  if (red.last) {
    for (int32_t sg : ps.unit_sgs_[static_cast<size_t>(unit)]) {
      auto& s = ps.sg_[static_cast<size_t>(sg)];
      if (--s.pending_units == 0) {
        s.ready = true;
        ps.sg_ready_order_.push_back(sg);
      }
    }
  }
}

void emit_checkpoint_save(PlanState& ps, int32_t run, int32_t mb, int32_t compute_task) {
  const double bytes = ps.ckpt_home_bytes();
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) {
    Task t = make_task(k, l, Data::Checkpoint, Phase::Forward);
    t.checkpoint = ps.runs_[static_cast<size_t>(run)].checkpoint;
    t.micro_batch = mb;
    t.from = from;
    t.to = to;
    t.bytes = bytes;
    return t;
  };
  const size_t r = static_cast<size_t>(run);
  if (ps.plan_.checkpoints == Tier::Device) {
    ps.ckpt_save_task_[r] = compute_task;
    ps.ckpt_saves_.push_back(compute_task);
    return;
  }
  const int64_t host_buf = ps.builder_.buffer();
  int32_t t = ps.builder_.add(base(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host), {compute_task},
                     {{Tier::Host, host_buf, bytes}}, {{Tier::Device, ps.ckpt_dev_buf_[r], ps.ckpt_bytes_}});
  if (ps.config_.checkpoint_copies_synchronous) ps.sync_ckpt_save_ = t;
  ps.ckpt_home_buf_[r] = host_buf;
  ps.ckpt_copies_[static_cast<size_t>(mb)].push_back(t);
  if (ps.plan_.checkpoints == Tier::Nvme) {
    const int64_t nvme_buf = ps.builder_.buffer();
    t = ps.builder_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Host, Tier::Nvme), {t},
                        {{Tier::Nvme, nvme_buf, bytes}}, {{Tier::Host, host_buf, bytes}});
    ps.ckpt_home_buf_[r] = nvme_buf;
  }
  ps.ckpt_save_task_[r] = t;
  ps.ckpt_saves_.push_back(t);
}

void emit_checkpoint_load(PlanState& ps, int32_t run, int32_t mb, int32_t prev_compute) {
  const size_t r = static_cast<size_t>(run);
  const double bytes = ps.ckpt_home_bytes();
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) {
    Task t = make_task(k, l, Data::Checkpoint, Phase::Backward);
    t.checkpoint = ps.runs_[r].checkpoint;
    t.micro_batch = mb;
    t.from = from;
    t.to = to;
    t.bytes = bytes;
    return t;
  };
  if (ps.plan_.checkpoints == Tier::Device) {
    ps.ckpt_load_task_[r] = ps.ckpt_save_task_[r];
    return;
  }
  int32_t t = ps.ckpt_save_task_[r];
  int64_t host_buf = ps.ckpt_home_buf_[r];
  if (ps.plan_.checkpoints == Tier::Nvme) {
    const int64_t staging = ps.builder_.buffer();
    t = ps.builder_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host), {prev_compute, t},
               {{Tier::Host, staging, bytes}}, {{Tier::Nvme, ps.ckpt_home_buf_[r], bytes}});
    host_buf = staging;
  }
  ps.ckpt_dev_buf_[r] = ps.builder_.buffer();
  ps.ckpt_load_task_[r] =
      ps.builder_.add(base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device), {prev_compute, t},
                      {{Tier::Device, ps.ckpt_dev_buf_[r], ps.ckpt_bytes_}}, {{Tier::Host, host_buf, bytes}});
  if (ps.ckpt_partitioned()) {
    // The group puts the slices back together on the compute stream before the recompute.
    Task g = base(TaskKind::AllGather, Lane::Compute, Tier::Device, Tier::Device);
    g.bytes = ps.ckpt_bytes_;
    g.participants = static_cast<int>(ps.tensor_parallel_);
    ps.ckpt_load_task_[r] = ps.builder_.add(g, {ps.ckpt_load_task_[r]}, {}, {});
  }
}

// One transfer of run r's offloaded activations (its segment, all its bytes) for micro-batch mb.
Task activation_task(PlanState& ps, size_t r, int32_t mb, Phase phase, TaskKind kind, Lane lane, Tier from, Tier to) {
  Task t = make_task(kind, lane, Data::Activation, phase);
  t.activation = ps.runs_[r].segment;
  t.micro_batch = mb;
  t.from = from;
  t.to = to;
  t.bytes = ps.runs_[r].offload_bytes;
  return t;
}

// An offloaded run's activations leave the device after its last forward: copied to the host
// (and written to NVMe), or written to NVMe straight from the device over GPUDirect Storage.
void emit_activation_save(PlanState& ps, size_t r, int32_t mb, int32_t compute_task) {
  const auto& run = ps.runs_[r];
  const auto& seg = ps.segments_[static_cast<size_t>(run.segment)];
  const double bytes = run.offload_bytes;
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) { return activation_task(ps, r, mb, Phase::Forward, k, l, from, to); };
  const int64_t home = ps.builder_.buffer();
  int32_t t = -1;
  if (seg.gds) {
    t = ps.builder_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Device, Tier::Nvme), {compute_task},
               {{Tier::Nvme, home, bytes}}, {{Tier::Device, ps.act_buf_[r], bytes}});
  } else {
    t = ps.builder_.add(base(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host), {compute_task},
                        {{Tier::Host, home, bytes}}, {{Tier::Device, ps.act_buf_[r], bytes}});
    ps.act_home_buf_[r] = home;
    if (seg.tier == Tier::Nvme) {
      const int64_t nvme = ps.builder_.buffer();
      t = ps.builder_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Host, Tier::Nvme), {t},
                          {{Tier::Nvme, nvme, bytes}}, {{Tier::Host, home, bytes}});
      ps.act_home_buf_[r] = nvme;
    }
  }
  if (seg.gds) ps.act_home_buf_[r] = home;
  ps.act_save_task_[r] = t;
  ps.act_saves_.push_back(t);
}

// ... and come back into a new device buffer before its backward, which the run's last backward frees.
void emit_activation_load(PlanState& ps, size_t r, int32_t mb, int32_t prev_compute) {
  const auto& run = ps.runs_[r];
  const auto& seg = ps.segments_[static_cast<size_t>(run.segment)];
  const double bytes = run.offload_bytes;
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) { return activation_task(ps, r, mb, Phase::Backward, k, l, from, to); };
  int32_t t = ps.act_save_task_[r];
  int64_t home = ps.act_home_buf_[r];
  const int64_t dev = ps.builder_.buffer();
  if (seg.gds) {
    t = ps.builder_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Device), {prev_compute, t},
               {{Tier::Device, dev, bytes}}, {{Tier::Nvme, home, bytes}});
  } else {
    if (seg.tier == Tier::Nvme) {
      const int64_t staging = ps.builder_.buffer();
      t = ps.builder_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host), {prev_compute, t},
                 {{Tier::Host, staging, bytes}}, {{Tier::Nvme, home, bytes}});
      home = staging;
    }
    t = ps.builder_.add(base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device), {prev_compute, t},
                        {{Tier::Device, dev, bytes}}, {{Tier::Host, home, bytes}});
  }
  ps.act_buf_[r] = dev;
  ps.act_load_task_[r] = t;
}

// The compute step's part in its run's activations and checkpoints: the run's activation buffer,
// the next run's checkpoint, the loads it waits for and the saves that hold it back.
void run_memory_events(PlanState& ps, const Step& st, std::vector<int32_t>& deps, std::vector<MemEvent>& allocs,
                       std::vector<MemEvent>& frees) {
  const size_t ri = static_cast<size_t>(st.run);
  const auto& run = ps.runs_[ri];
  if (st.first_fwd_of_run || st.first_recompute) {
    ps.act_buf_[ri] = ps.builder_.buffer();
    allocs.push_back({Tier::Device, ps.act_buf_[ri], run.moving_bytes(), MemUse::ActivationKept});
    if (run.action == ActivationAction::Offload && ps.act_saves_.size() >= kActivationSavesInFlight)
      deps.push_back(ps.act_saves_[ps.act_saves_.size() - kActivationSavesInFlight]);
  }
  // Per-tensor choices: the tensors that stay beside an offloaded segment, and those recomputed by
  // their own operators, which leave after the forward and come back before the backward.
  if (st.first_fwd_of_run && run.staying_bytes() > 0) {
    ps.act_keep_buf_[ri] = ps.builder_.buffer();
    allocs.push_back({Tier::Device, ps.act_keep_buf_[ri], run.staying_bytes(), MemUse::ActivationKept});
  }
  if ((st.first_fwd_of_run || st.first_partial_recompute) && run.partial_bytes > 0) {
    ps.act_part_buf_[ri] = ps.builder_.buffer();
    allocs.push_back({Tier::Device, ps.act_part_buf_[ri], run.partial_bytes, MemUse::ActivationKept});
  }
  if (st.starts_bwd_of_run && run.action == ActivationAction::Offload) deps.push_back(ps.act_load_task_[ri]);
  if (st.first_recompute) deps.push_back(ps.ckpt_load_task_[ri]);
  if (ps.sync_ckpt_save_ >= 0) {
    deps.push_back(ps.sync_ckpt_save_);
    ps.sync_ckpt_save_ = -1;
  }
  const bool next_is_ckpt = ri + 1 < ps.runs_.size() && ps.runs_[ri + 1].recompute;
  if (st.last_fwd_of_run && next_is_ckpt) {
    if (ps.ckpt_saves_.size() >= kCheckpointSavesInFlight) deps.push_back(ps.ckpt_saves_[ps.ckpt_saves_.size() - kCheckpointSavesInFlight]);
    ps.ckpt_dev_buf_[ri + 1] = ps.builder_.buffer();
    allocs.push_back({Tier::Device, ps.ckpt_dev_buf_[ri + 1], ps.ckpt_bytes_, MemUse::Checkpoint});
  }
  if (st.last_fwd_of_run && run.recompute) frees.push_back({Tier::Device, ps.act_buf_[ri], run.act_bytes});
  if (st.last_fwd_of_run && run.no_backward) frees.push_back({Tier::Device, ps.act_buf_[ri], run.moving_bytes()});
  if (st.last_fwd_of_run && run.partial_bytes > 0) frees.push_back({Tier::Device, ps.act_part_buf_[ri], run.partial_bytes});
  if (run.grad_bytes > 0 && st.kind == TaskKind::Backward && ps.act_grad_buf_[ri] < 0) {
    ps.act_grad_buf_[ri] = ps.builder_.buffer();
    allocs.push_back({Tier::Device, ps.act_grad_buf_[ri], run.grad_bytes, MemUse::ActivationGrad});
  }
  if (st.last_bwd_of_run) {
    if (ps.act_grad_buf_[ri] >= 0) frees.push_back({Tier::Device, ps.act_grad_buf_[ri], run.grad_bytes});
    ps.act_grad_buf_[ri] = -1;
    frees.push_back({Tier::Device, ps.act_buf_[ri], run.moving_bytes()});
    if (run.staying_bytes() > 0) frees.push_back({Tier::Device, ps.act_keep_buf_[ri], run.staying_bytes()});
    if (run.partial_bytes > 0) frees.push_back({Tier::Device, ps.act_part_buf_[ri], run.partial_bytes});
    if (run.recompute) frees.push_back({Tier::Device, ps.ckpt_dev_buf_[ri], ps.ckpt_bytes_});
  }
}

}  // namespace

Task compute_task(const PlanState& ps, const Step& st) {
  const Operator& op = ps.graph_.ops[static_cast<size_t>(st.op)];
  const auto& run = ps.runs_[static_cast<size_t>(st.run)];
  Task t = make_task(st.kind, Lane::Compute, Data::Activation, st.kind == TaskKind::Forward ? Phase::Forward : Phase::Backward);
  t.op = st.op;
  t.micro_batch = st.mb;
  t.from = t.to = Tier::Device;
  double frac = 1.0;  // the tile's share of the operator
  if (st.tile >= 0) {
    const ParamUnit& u = ps.units_[static_cast<size_t>(ps.step_units_[st.units_begin])];
    frac = double(u.row_end - u.row_begin) / double(ps.graph_.params[static_cast<size_t>(u.group)].rows);
  }
  t.flops = (st.kind == TaskKind::Backward ? op.bwd_flops : op.fwd_flops) * frac;
  t.bytes = op.fwd_bytes * frac * (st.kind == TaskKind::Backward ? 2.0 : 1.0);
  if (op.m > 0)  // the efficiency curves' argument: an attention's head size, a linear's (tile's) intensity
    t.gemm_dim = op.kind == OpKind::Attention
                     ? std::min({op.m, op.n, op.k})
                     : std::lround(gemm_intensity_dim(double(op.m), std::max(1.0, double(op.n) * frac), double(op.k)));
  if (const int64_t capacity = ps.expert_capacity(op); capacity > 0) {
    // The experts compute every slot of their capacity, padding included; each local expert takes
    // the capacity of each of the E ranks of its group, so its GEMMs have E x capacity rows.
    t.flops *= double(op.experts * capacity) / (double(ps.graph_.tokens) * double(op.top_k));
    t.gemm_dim = std::lround(gemm_intensity_dim(double(capacity * ps.expert_parallel_), double(op.n), double(op.k)));
  }
  if (st.units_count > 0) t.unit = ps.step_units_[st.units_begin];
  t.tile = st.tile;
  if (run.recompute) t.checkpoint = run.checkpoint;
  return t;
}

void step_fetch_events(const PlanState& ps, size_t i, std::vector<int32_t>& deps, std::vector<MemEvent>& frees) {
  const Step& st = ps.steps_[i];
  for (uint32_t k = 0; k < st.units_count; ++k) {
    const int32_t f = ps.use_fetch_[st.units_begin + k];
    if (f < 0) continue;
    const Fetch& fe = ps.fetches_[static_cast<size_t>(f)];
    deps.push_back(fe.last_task);
    if (fe.release == static_cast<int32_t>(i) &&
        std::find_if(frees.begin(), frees.end(), [&](const MemEvent& e) { return e.buffer == fe.gathered_buf; }) ==
            frees.end())
      frees.push_back({Tier::Device, fe.gathered_buf,
                       ps.working_bytes_ * double(ps.gathered_elems(ps.units_[static_cast<size_t>(fe.unit)]))});
  }
}

// Expert parallelism: the all-to-all that brings a mixture's tokens to their experts before the
// experts operator runs (forward and recompute: the dispatch; backward: the combine's gradient) or
// back after it (the combine; the dispatch's gradient), among the E ranks of the group, on the
// compute stream as DeepSpeed-MoE's _AllToAll runs it. Returns the task that ends it (or `after`).
int32_t emit_expert_all_to_all(PlanState& ps, size_t i, int32_t after) {
  const Step& st = ps.steps_[i];
  const Operator& op = ps.graph_.ops[static_cast<size_t>(st.op)];
  if (ps.expert_capacity(op) <= 0) return after;
  Task a = make_task(TaskKind::AllToAll, Lane::Compute, Data::Activation,
                     st.kind == TaskKind::Forward ? Phase::Forward : Phase::Backward);
  a.op = st.op;
  a.micro_batch = st.mb;
  a.from = a.to = Tier::Device;
  a.bytes = ps.expert_all_to_all_bytes(op);
  a.participants = ps.expert_parallel_;
  return ps.builder_.add(a, {after}, {}, {});
}

namespace {

// Every per-step, per-run and per-unit record emit fills, sized and unset.
void reset_emit_records(PlanState& ps) {
  const size_t S = ps.steps_.size();
  ps.compute_task_.assign(S, -1);
  ps.grad_buf_.assign(ps.units_.size(), -1);
  ps.grad_store_.assign(ps.units_.size(), -1);
  ps.grad_reduce_.assign(ps.units_.size(), -1);
  ps.act_buf_.assign(ps.runs_.size(), -1);
  ps.act_grad_buf_.assign(ps.runs_.size(), -1);
  ps.ckpt_dev_buf_.assign(ps.runs_.size(), -1);
  ps.ckpt_home_buf_.assign(ps.runs_.size(), -1);
  ps.ckpt_save_task_.assign(ps.runs_.size(), -1);
  ps.ckpt_load_task_.assign(ps.runs_.size(), -1);
  ps.act_save_task_.assign(ps.runs_.size(), -1);
  ps.act_load_task_.assign(ps.runs_.size(), -1);
  ps.act_home_buf_.assign(ps.runs_.size(), -1);
  ps.act_keep_buf_.assign(ps.runs_.size(), -1);
  ps.act_part_buf_.assign(ps.runs_.size(), -1);
  ps.ckpt_copies_.assign(static_cast<size_t>(ps.plan_.micro_batches), {});
}

// The checkpointed runs, their blocks, and (filled by emit) the task that ends each one's forward;
// each micro-batch's backward start (filled by emit).
void state_checkpoint_runs(PlanState& ps) {
  ps.builder_.backward_starts().assign(static_cast<size_t>(ps.plan_.micro_batches), {});
  auto& ckpt_runs = ps.builder_.checkpoint_runs();
  ckpt_runs.clear();
  for (const auto& r : ps.runs_) {
    if (!r.recompute) continue;
    CheckpointRun c;
    c.id = r.checkpoint;
    c.first_block = std::numeric_limits<int32_t>::max();
    c.last_block = -1;
    for (int32_t o : r.ops) {
      const int32_t b = ps.graph_.ops[static_cast<size_t>(o)].block;
      if (b < 0) throw PlanError("internal: a checkpointed run holds an operator outside the blocks");
      c.first_block = std::min(c.first_block, b);
      c.last_block = std::max(c.last_block, b);
    }
    c.forward_end.assign(static_cast<size_t>(ps.plan_.micro_batches), -1);
    ckpt_runs.push_back(std::move(c));
  }
}

// The transfers issued before each step: fetch stages by stage, checkpoint and activation loads.
struct IssuedBefore {
  std::vector<std::vector<int32_t>> nc, h2d, ag, ckpt_load, act_load;
};

IssuedBefore issued_before_steps(const PlanState& ps) {
  const size_t S = ps.steps_.size();
  IssuedBefore at{std::vector<std::vector<int32_t>>(S), std::vector<std::vector<int32_t>>(S),
                  std::vector<std::vector<int32_t>>(S), std::vector<std::vector<int32_t>>(S),
                  std::vector<std::vector<int32_t>>(S)};
  for (size_t f = 0; f < ps.fetches_.size(); ++f) {
    at.nc[static_cast<size_t>(ps.fetches_[f].t_nc)].push_back(static_cast<int32_t>(f));
    at.h2d[static_cast<size_t>(ps.fetches_[f].t_h2d)].push_back(static_cast<int32_t>(f));
    at.ag[static_cast<size_t>(ps.fetches_[f].t_ag)].push_back(static_cast<int32_t>(f));
  }
  schedule_run_loads(ps, at.ckpt_load, at.act_load);
  return at;
}

struct StepEvents {
  std::vector<int32_t> deps;
  std::vector<MemEvent> allocs, frees;
};

// What step i's compute task waits for and allocates and frees: its units' fetches (a gathered
// buffer freed at its last use), its run's buffers, its micro-batch's checkpoint copies before
// its first backward, and the gradient buffer of each unit whose first backward use it is.
StepEvents step_events(PlanState& ps, size_t i, int32_t prev) {
  const Step& st = ps.steps_[i];
  StepEvents ev{{prev}, {}, {}};
  auto& [deps, allocs, frees] = ev;
  step_fetch_events(ps, i, deps, frees);
  run_memory_events(ps, st, deps, allocs, frees);
  if (st.kind != TaskKind::Backward) return ev;
  // A micro-batch's backward begins once its checkpoints are copied off the device, so that the
  // device copies can go (core::checkpoint_copy_waits: the backends' wait, stated here; emit
  // records the start in Program::backward_starts).
  if (ps.builder_.backward_starts()[static_cast<size_t>(st.mb)].task < 0) {
    const auto& copies = ps.ckpt_copies_[static_cast<size_t>(st.mb)];
    deps.insert(deps.end(), copies.begin(), copies.end());
  }
  // A gradient buffer lives from the first to the last backward use of its contribution (the uses of
  // a unit by one operator in one micro-batch). A later contribution of the same micro-batch (the
  // embedding's after the tied head's) starts once the one before is reduced: both are this unit's
  // gradient of this micro-batch, one buffer after the other.
  for (uint32_t k = 0; k < st.units_count; ++k) {
    const int32_t u = ps.step_units_[st.units_begin + k];
    const GradUse& use = ps.grad_use_[st.units_begin + k];
    if (use.starts) {
      const auto in_flight = static_cast<size_t>(ps.config_.gradient_stores_in_flight);
      if (ps.grad_stores_.size() >= in_flight) deps.push_back(ps.grad_stores_[ps.grad_stores_.size() - in_flight]);
      if (use.contribution > 0) deps.push_back(ps.grad_reduce_[static_cast<size_t>(u)]);
      ps.grad_buf_[static_cast<size_t>(u)] = ps.builder_.buffer();
      const auto& un = ps.units_[static_cast<size_t>(u)];
      const double gb = ps.owner_based() || !ps.grads_partitioned() ? ps.working_bytes_ * double(un.numel)
                                                              : ps.working_bytes_ * double(ps.gathered_elems(un));
      allocs.push_back({Tier::Device, ps.grad_buf_[static_cast<size_t>(u)], gb, MemUse::GradWorking});
    }
  }
  return ev;
}

// Tensor parallelism: the group all-reduces the operator's output (forward, recompute) or its
// input gradient (backward) after its last tile, on the compute stream, before anything uses it.
// Returns the task that ends step i on the compute stream.
int32_t emit_tensor_parallel_all_reduce(PlanState& ps, size_t i, int32_t computed) {
  const size_t S = ps.steps_.size();
  const Step& st = ps.steps_[i];
  const Operator& op = ps.graph_.ops[static_cast<size_t>(st.op)];
  const bool last_tile = i + 1 == S || ps.steps_[i + 1].op != st.op || ps.steps_[i + 1].kind != st.kind || ps.steps_[i + 1].mb != st.mb;
  const double ar = st.kind == TaskKind::Backward ? op.tp_bwd_allreduce_bytes : op.tp_fwd_allreduce_bytes;
  if (ps.tensor_parallel_ <= 1 || ar <= 0 || !last_tile) return computed;
  Task a = make_task(TaskKind::AllReduce, Lane::Compute, Data::Activation,
                     st.kind == TaskKind::Backward ? Phase::Backward : Phase::Forward);
  a.op = st.op;
  a.micro_batch = st.mb;
  a.from = a.to = Tier::Device;
  a.bytes = ar;
  a.participants = static_cast<int>(ps.tensor_parallel_);
  return ps.builder_.add(a, {computed}, {}, {});
}

// What follows step i: the next run's checkpoint save and this run's activation save after its
// last forward; after a forward of the last micro-batch, the optimizer states it reads ahead; after a
// backward, the reduction of each unit's gradient at its last use, and the optimizer's sub-groups
// that are ready when it overlaps backward.
void emit_after_step(PlanState& ps, size_t i, int32_t computed, int32_t prev) {
  const Step& st = ps.steps_[i];
  const size_t ri = static_cast<size_t>(st.run);
  const auto& run = ps.runs_[ri];
  if (st.last_fwd_of_run && ri + 1 < ps.runs_.size() && ps.runs_[ri + 1].recompute)
    emit_checkpoint_save(ps, static_cast<int32_t>(ri + 1), st.mb, prev);
  if (st.last_fwd_of_run && run.action == ActivationAction::Offload) emit_activation_save(ps, ri, st.mb, prev);
  if (st.kind == TaskKind::Forward && st.mb == ps.plan_.micro_batches - 1) {
    read_states_ahead(ps);
    return;
  }
  if (st.kind != TaskKind::Backward) return;
  for (const Reduction& r : reductions_at(ps, i)) emit_grad_reduction(ps, r, st.mb, computed);
  if (ps.config_.optimizer_timing == OptimizerTiming::OverlapBackward) pump_optimizer(ps, false);
}

}  // namespace

std::vector<Reduction> reductions_at(const PlanState& ps, size_t i) {
  const Step& st = ps.steps_[i];
  std::vector<Reduction> out;
  if (st.kind != TaskKind::Backward) return out;
  const auto mb = static_cast<size_t>(st.mb);
  const bool first_mb = st.mb == 0, last_mb = st.mb == ps.plan_.micro_batches - 1;
  for (uint32_t k = 0; k < st.units_count; ++k) {
    const int32_t u = ps.step_units_[st.units_begin + k];
    const GradUse& use = ps.grad_use_[st.units_begin + k];
    // the same unit twice in one step reduces once
    if (!use.ends || std::find_if(out.begin(), out.end(), [&](const Reduction& r) { return r.unit == u; }) != out.end())
      continue;
    const bool last_use = ps.last_bwd_[mb][static_cast<size_t>(u)] == static_cast<int32_t>(i);
    out.push_back({u, first_mb && use.contribution == 0, last_mb && last_use});
  }
  return out;
}

// What a DeepSpeed release's engine makes step i's compute wait for (DeepSpeedBehaviour): with a
// synchronizing fetch, when the step fetches a unit, every device task issued before the step's
// fetches (the device is idle when the module starts); without backward NVMe prefetch, the NVMe
// reads of backward fetches issued at this step (the thread reads them before it issues the step).
static void deepspeed_waits(const PlanState& ps, size_t i, const std::vector<int32_t>& reads_here,
                            const std::array<int32_t, 3>& device_before, std::vector<int32_t>& deps) {
  const auto& ds = ps.config_.deepspeed;
  const Step& st = ps.steps_[i];
  if (ds.fetch_syncs_device) {
    bool fetches = false;
    for (uint32_t k = 0; k < st.units_count; ++k) {
      const int32_t f = ps.use_fetch_[st.units_begin + k];
      fetches = fetches || (f >= 0 && ps.fetches_[static_cast<size_t>(f)].consumer == static_cast<int32_t>(i));
    }
    if (fetches) deps.insert(deps.end(), device_before.begin(), device_before.end());
  }
  if (!ds.backward_nvme_prefetch)
    for (int32_t f : reads_here) {
      const Fetch& fe = ps.fetches_[static_cast<size_t>(f)];
      if (ps.steps_[static_cast<size_t>(fe.consumer)].kind == TaskKind::Backward) deps.push_back(fe.nc_task);
    }
}

void emit(PlanState& ps) {
  if (ps.forward_only_) return emit_forward(ps);
  const size_t S = ps.steps_.size();
  reset_emit_records(ps);
  make_sub_groups(ps);
  state_checkpoint_runs(ps);
  const IssuedBefore at = issued_before_steps(ps);

  int32_t prev = -1;
  for (size_t i = 0; i < S; ++i) {
    const Step& st = ps.steps_[i];
    const std::array<int32_t, 3> device_before{ps.builder_.last_on(Lane::Comm), ps.builder_.last_on(Lane::H2D),
                                               ps.builder_.last_on(Lane::D2H)};
    for (int32_t f : at.nc[i]) emit_fetch_stage(ps, ps.fetches_[static_cast<size_t>(f)], 0, prev);
    for (int32_t f : at.h2d[i]) emit_fetch_stage(ps, ps.fetches_[static_cast<size_t>(f)], 1, prev);
    for (int32_t f : at.ag[i]) emit_fetch_stage(ps, ps.fetches_[static_cast<size_t>(f)], 2, prev);
    for (int32_t r : at.ckpt_load[i]) emit_checkpoint_load(ps, r, st.mb, prev);
    for (int32_t r : at.act_load[i]) emit_activation_load(ps, static_cast<size_t>(r), st.mb, prev);

    prev = emit_expert_all_to_all(ps, i, prev);
    const Task t = compute_task(ps, st);
    StepEvents ev = step_events(ps, i, prev);
    deepspeed_waits(ps, i, at.nc[i], device_before, ev.deps);
    const int32_t computed = ps.compute_task_[i] = ps.builder_.add(t, ev.deps, ev.allocs, ev.frees);
    if (auto& start = ps.builder_.backward_starts()[static_cast<size_t>(st.mb)];
        st.kind == TaskKind::Backward && start.task < 0)
      start = {computed, ps.ckpt_copies_[static_cast<size_t>(st.mb)]};
    const auto& run = ps.runs_[static_cast<size_t>(st.run)];
    if (st.kind == TaskKind::Forward && st.last_fwd_of_run && run.recompute)
      ps.builder_.checkpoint_runs()[static_cast<size_t>(run.checkpoint)].forward_end[static_cast<size_t>(st.mb)] =
          computed;
    prev = emit_expert_all_to_all(ps, i, emit_tensor_parallel_all_reduce(ps, i, computed));
    emit_after_step(ps, i, computed, prev);
  }
  ps.backward_done_ = prev;
  // Units that no backward step touched (none in a GPT, but a graph may have them) have no gradient.
  pump_optimizer(ps, true);
  for (const auto& s : ps.sg_)
    if (s.stage != 3)
      throw PlanError("internal: an optimizer sub-group was never scheduled (a unit's gradient is never produced)");
}

void finish_program(PlanState& ps) {
  ps.builder_.ranks() = ps.ranks_;
  ps.builder_.gpus_per_node() = ps.plan_.gpus_per_node;
  ps.builder_.tensor_parallel() = static_cast<int>(ps.tensor_parallel_);
  ps.builder_.expert_parallel() = ps.expert_parallel_;
  ps.builder_.partitioning() = ps.plan_.partitioning;
  ps.builder_.micro_batches() = static_cast<int>(ps.plan_.micro_batches);
  ps.builder_.units() = ps.units_;
  ps.builder_.op_order() = ps.order_;
  ps.builder_.budget() = ps.plan_.budget;
  ps.builder_.lane_slots() = lane_slots_for(ps.config_);
  // The passes are ZeRO-3's (partition_parameters.py): stages 0-2 reduce through stage2.py's buckets.
  ps.builder_.gather_device_passes() = ps.params_partitioned() ? ps.config_.deepspeed.gather_device_passes : 0;
  ps.builder_.reduce_device_passes() = ps.params_partitioned() ? ps.config_.deepspeed.reduce_device_passes : 0;
  ps.builder_.activations() = ps.segments_;
  ps.builder_.ops().clear();
  for (const auto& o : ps.graph_.ops) {
    OpInfo info;
    info.id = o.id;
    info.name = o.name;
    info.kind = to_string(o.kind);
    info.m = o.m;
    info.n = o.n;
    info.k = o.k;
    info.block = o.block;
    for (int32_t pg : o.param_groups) {
      const auto& us = ps.group_units_[static_cast<size_t>(pg)];
      if (us.size() > 1 && o.n > 0) info.n = ceil_div(o.n, static_cast<int64_t>(us.size()));
    }
    ps.builder_.ops().push_back(info);
  }
  if (ps.owner_based()) {
    ps.builder_.static_bytes().clear();
    for (int r = 0; r < ps.ranks_; ++r) ps.builder_.static_bytes().push_back(static_bytes_for(ps, r));
  } else {
    ps.builder_.static_bytes() = {static_bytes_for(ps, 0)};
  }
  ps.builder_.compute_ends() =
      compute_ends_of(ps.builder_.program().tasks(), ps.builder_.ops(), static_cast<int>(ps.plan_.micro_batches));
}

void account(PlanState& ps) {
  // Data moved by rank 0 (owner-based: summed over ranks, divided by ranks, is the mean).
  const int r = 0;
  for (const auto& t : ps.prog_.tasks()) {
    if (!ps.prog_.active(t, r)) continue;
    const bool moves = t.kind == TaskKind::NvmeRead || t.kind == TaskKind::CopyH2D || t.kind == TaskKind::NvmeWrite ||
                       t.kind == TaskKind::CopyD2H;
    if (t.data == Data::Param && t.phase != Phase::Optimizer) {
      // From the params tier: the first stage of each fetch.
      const bool first = (ps.plan_.params == Tier::Nvme && t.kind == TaskKind::NvmeRead) ||
                         (ps.plan_.params == Tier::Host && t.kind == TaskKind::CopyH2D) ||
                         (ps.plan_.params == Tier::Device && (t.kind == TaskKind::AllGather || t.kind == TaskKind::Broadcast));
      if (first) ps.plan_.param_bytes_fetched += t.kind == TaskKind::AllGather ? t.bytes / ps.unit_parts(ps.units_[static_cast<size_t>(t.unit)]) : t.bytes;
    }
    if (t.data == Data::Grad && t.phase == Phase::Backward && moves && t.to == ps.plan_.gradients) ps.plan_.grad_bytes_stored += t.bytes;
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeRead) ps.plan_.optimizer_bytes_read += t.bytes;
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeWrite) ps.plan_.optimizer_bytes_written += t.bytes;
    if (t.data == Data::Checkpoint && moves && t.phase == Phase::Forward && t.to == ps.plan_.checkpoints)
      ps.plan_.checkpoint_bytes_saved += t.bytes;
    if (t.data == Data::Checkpoint && moves && t.phase == Phase::Backward && t.from == ps.plan_.checkpoints)
      ps.plan_.checkpoint_bytes_loaded += t.bytes;
    if (t.data == Data::Activation && moves && t.from == Tier::Device) ps.plan_.activation_bytes_offloaded += t.bytes;
    if (t.data == Data::Activation && moves && t.to == Tier::Device) ps.plan_.activation_bytes_restored += t.bytes;
    if (t.kind == TaskKind::NvmeWrite) ps.plan_.nvme_bytes_written += t.bytes;
    if (t.kind == TaskKind::NvmeRead) ps.plan_.nvme_bytes_read += t.bytes;
  }
  int64_t space = 0;
  for (int rr = 0; rr < (ps.owner_based() ? ps.ranks_ : 1); ++rr) space = std::max(space, ps.prog_.shard_space(rr));
  ps.plan_.shard_numel = space;
}

void reset_emission(PlanState& ps) {
  ps.builder_.reset();
  ps.fetches_.clear();
  ps.sg_.clear();
  ps.sg_ready_order_.clear();
  ps.grad_stores_.clear();
  ps.ckpt_saves_.clear();
  ps.act_saves_.clear();
  ps.sync_ckpt_save_ = -1;
  ps.sg_cursor_ = 0;
  ps.backward_done_ = -1;
  ps.norm_task_ = -1;
}

}  // namespace zinf::core::planning
