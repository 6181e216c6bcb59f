#include "engine/backend/cpu/gpt_cpu_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "engine/backend/cpu/convert.hpp"
#include "engine/memory/staging_cache.hpp"

namespace zinf::engine {

using core::Data;
using core::Task;
using core::TaskKind;
using core::Tier;

template <class S>
GptCpuBackendOf<S>::GptCpuBackendOf(const core::Program& p, const core::Plan& pl, const Gpt2& mdl, int r, Collectives& c,
                             GptBackendOptions o)
    : GptBackendBase(p, pl, mdl.graph(), r, c, std::move(o), "CPU"), model_(mdl),
      adam_(AdamOptions::from_run_config(opt.config), opt.adam_threads), arena_(core::at(p.budget(), Tier::Device)) {
  // The Program counts the homes and buffers at the bytes core gives the run's precision
  // (core::param_bytes): the storage type must be that precision's.
  const core::Precision want = opt.config.precision.value_or(core::Precision::Bf16);
  if (want != precision_of<S>() || core::param_bytes(opt.config) != double(sizeof(S)))
    throw std::logic_error(fmt::format("a CPU backend storing {} was made for a run in {} (make_gpt_cpu_backend "
                                       "picks the storage type)",
                                       core::to_string(precision_of<S>()), core::to_string(want)));
  // The homes, on the tiers the plan puts them (set-up: the plan is read nowhere else).
  params_.init(pl.params, space, store.get(), arena_, "params");
  if (!trains()) return;  // a forward pass alone reads the parameters, nothing else
  grads_.init(pl.gradients, space, store.get(), arena_, "grads");
  master_.init(pl.optimizer, space, store.get(), arena_, "master");
  m_.init(pl.optimizer, space, store.get(), arena_, "adam_m");
  v_.init(pl.optimizer, space, store.get(), arena_, "adam_v");
}

template <class S>
GptCpuBackendOf<S>::~GptCpuBackendOf() = default;

template <class S>
void GptCpuBackendOf<S>::start_step(std::vector<Batch>& batches) {
  // Activations are reused from step to step (their tensors keep their sizes); only what a step
  // dropped is allocated again.
  if (acts_.size() != batches.size()) {
    acts_.clear();
    for (size_t i = 0; i < batches.size(); ++i) acts_.push_back(model_.make_activations(&arena_));
  }
  adam_.set_options(adam_options());
  ckpt_copied_.clear();
  ckpt_forward_done_.clear();
  for (size_t i = 0; i < batches.size(); ++i) model_.set_batch(acts_[i], batches[i].inputs, batches[i].targets);
}

// ---- the optimizer state's homes ------------------------------------------------------------------

template <class S>
void GptCpuBackendOf<S>::read_state(StateTensor which, int64_t off, int64_t n, float* dst) {
  state_home(which).read(off, n, dst);
}

template <class S>
void GptCpuBackendOf<S>::write_state(int64_t off, int64_t n, StateTensor which, const float* src, bool params_too) {
  if (!params_too) return state_home(which).write(off, n, src);
  Staging<S> rounded(size_t(core::shard_aligned(n)), S{});  // the padding zero, as src's
  cpu::narrow(rounded.data(), src, n);
  if (!trains()) return params_.write(off, n, rounded.data());
  wait_all({params_.write_async(off, n, rounded.data()), master_.write_async(off, n, src)});
}

// ---- parameters -------------------------------------------------------------------------------------

template <class S>
void GptCpuBackendOf<S>::fetch(const Task& t) {
  const auto& u = unit(t.unit);
  const int64_t off = mine_offset(u), n = mine_count(u);
  switch (t.kind) {
    case TaskKind::NvmeRead: {
      Staging<S> buf = staging<S>(n);
      params_.read(off, n, buf.data());
      return stage(host_param_, t.buffer, std::move(buf));
    }
    case TaskKind::CopyH2D: {
      const S* src = params_.mem.data() + off;
      Staging<S> host;
      if (t.source >= 0) {  // the NVMe read's staging (Task::source), not the home on the host
        host = take(host_param_, t.source, P->label(t) + ": the NVMe read of " + u.name);
        src = host.data();
      } else {
        require_home(t, params_.tier, t.from, "parameters");
      }
      if (owner_based) {  // the owner's whole unit, straight into the gathered buffer it broadcasts
        std::memcpy(cpu::landing_for<S>(gathered_data(t), u.numel), src, size_t(n) * sizeof(S));
        return;
      }
      DeviceVector<S> buf(size_t(n), device<S>());
      std::copy_n(src, n, buf.data());
      return stage(dev_param_, t.buffer, std::move(buf));
    }
    case TaskKind::AllGather: {
      DeviceVector<S> held;
      const S* shard = params_.mem.data() + off;
      if (t.source >= 0) {  // the host-to-device copy's shard (Task::source), not the home on the device
        held = take(dev_param_, t.source, P->label(t) + ": the host-to-device copy of " + u.name);
        shard = held.data();
      } else {
        require_home(t, params_.tier, Tier::Device, "parameters");
      }
      // The ranks' 16-bit shards land in the upper half of the fp32 working copy, which is then
      // widened in place: the device holds the working size the Program counts, no 16-bit copy
      // (fp32 shards land on the working copy itself).
      // One rank's shard is the whole unit: widened straight from it, with no gather.
      const int64_t padded = u.shard_numel * P->data_parallel();
      DeviceVector<float> full(size_t(padded), device<float>());
      if (comm.size() == 1) {
        cpu::widen(full.data(), shard, padded);
      } else {
        comm.all_gather(shard, size_t(u.shard_numel) * sizeof(S), cpu::landing_for<S>(full.data(), padded),
                        u.name.c_str());
        cpu::widen_in_place<S>(full.data(), padded);
      }
      return stage(gathered_, t.buffer, std::move(full));
    }
    case TaskKind::Broadcast: {
      float* whole = gathered_data(t);
      S* landing = cpu::landing_for<S>(whole, u.numel);
      if (u.owner == rank && t.source < 0) {  // no copy filled the buffer (Task::source): the owner's home
        require_home(t, params_.tier, Tier::Device, "parameters");
        std::memcpy(landing, params_.mem.data() + off, size_t(u.numel) * sizeof(S));
      }
      comm.broadcast(landing, size_t(u.numel) * sizeof(S), u.owner, u.name.c_str());
      cpu::widen_in_place<S>(whole, u.numel);
      return;
    }
    case TaskKind::Alloc:  // the owner-based gathered buffer, filled by the broadcast
      return stage(gathered_, t.buffer, DeviceVector<float>(size_t(u.numel), device<float>()));
    default:
      throw std::logic_error(fmt::format("no parameter fetch of kind {}", core::to_string(t.kind)));
  }
}

// The gathered buffer an owner-based fetch task fills (allocated by its Alloc task): the Program
// names it (Task::buffer).
template <class S>
float* GptCpuBackendOf<S>::gathered_data(const Task& t) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = gathered_.find(t.buffer);
  if (it == gathered_.end())
    throw std::logic_error(fmt::format("{}: its gathered buffer {} is not allocated", P->label(t), t.buffer));
  return it->second.data();
}

template <class S>
const DeviceVector<float>& GptCpuBackendOf<S>::gathered_for(const Task& t, int32_t u) {
  const auto buffers = gathered_buffers(t, u);
  std::lock_guard<std::mutex> lock(mu);
  for (int64_t b : buffers)
    if (auto it = gathered_.find(b); it != gathered_.end()) return it->second;
  throw std::logic_error(fmt::format("{}: parameters of {} are not gathered", P->label(t), unit(u).name));
}

template <class S>
void GptCpuBackendOf<S>::drop_gathered(int64_t buffer) {
  std::lock_guard<std::mutex> lock(mu);
  gathered_.erase(buffer);
}

// ---- compute --------------------------------------------------------------------------------------

template <class S>
void GptCpuBackendOf<S>::compute(const Task& t) {
  const auto& op = graph.ops[size_t(t.op)];
  Gpt2Activations& a = acts_[size_t(t.micro_batch)];
  if (first_backward(t)) begin_backward(t);
  const std::vector<int32_t> units = compute_units(t);
  const int32_t tiled = tiled_unit(t);
  std::vector<ParamBuf> pbufs;
  for (int32_t u : units) pbufs.push_back({gathered_for(t, u).data(), unit(u).numel});

  if (t.kind == TaskKind::Forward || t.kind == TaskKind::Recompute) {
    if (tiled >= 0) model_.forward_tile(t.op, unit(tiled).row_begin, unit(tiled).row_end, pbufs, a);
    else if (t.kind == TaskKind::Recompute) model_.recompute(t.op, pbufs, a);
    else model_.forward(t.op, pbufs, a);
    if (op.kind == core::OpKind::Loss) {
      if (keep_logits_of() >= 0 && t.micro_batch == 0) {
        const float* row = a.logits.data() + keep_logits_of() * graph.spec.vocab;
        kept_logits_row().assign(row, row + graph.spec.vocab);
      }
      set_loss(t.micro_batch, a.loss);
    }
    if (t.kind == TaskKind::Forward && ends_run_forward(t)) drop_run(t.checkpoint, t.micro_batch, a);
    const auto release = [](Activation& v) { Gpt2Activations::release(v); };
    drop_after_forward(t, a, release);
    if (P->forward_only() && op.kind == core::OpKind::Loss && graph.tensor_parallel <= 1) drop_head(a, release);
    return;
  }
  std::vector<GradBuf> gbufs;
  for (int32_t u : units) gbufs.push_back({grad_buffer(u, t.micro_batch).data(), unit(u).numel});
  if (tiled >= 0) model_.backward_tile(t.op, unit(tiled).row_begin, unit(tiled).row_end, pbufs, gbufs, a);
  else model_.backward(t.op, pbufs, gbufs, a);
  drop_after_backward(t, a, [](Activation& v) { Gpt2Activations::release(v); });
}

template <class S>
void GptCpuBackendOf<S>::tensor_parallel_all_reduce(const Task& t) {
  Gpt2Activations& a = acts_[size_t(t.micro_batch)];
  model_.tensor_parallel_all_reduce(t.op, t.phase == core::Phase::Backward, a);
  if (graph.ops[size_t(t.op)].kind != core::OpKind::Loss) return;
  set_loss(t.micro_batch, a.loss);
  if (P->forward_only()) drop_head(a, [](Activation& v) { Gpt2Activations::release(v); });
}

template <class S>
DeviceVector<float>& GptCpuBackendOf<S>::grad_buffer(int32_t u, int32_t mb) {
  std::lock_guard<std::mutex> lock(mu);
  auto& g = grad_full_.try_emplace({u, mb}, device<float>()).first->second;
  if (g.empty()) g.assign(size_t(grad_buffer_count(unit(u))), 0.0f);
  return g;
}

// After a checkpointed run's forward: its blocks' intermediates and inner inputs go; the run's
// input (the checkpoint) and output stay.
template <class S>
void GptCpuBackendOf<S>::drop_run(int32_t c, int32_t mb, Gpt2Activations& a) {
  const int first = checkpoint_first_block(c);
  for (int b : checkpoint_blocks(c)) {
    a.drop_block(b);
    if (b != first) Gpt2Activations::release(a.x[size_t(b)]);
  }
  if (!index.ckpt_copied_off.count({c, mb})) return;  // the checkpoint stays on the device
  std::lock_guard<std::mutex> lock(mu);
  ckpt_forward_done_.insert({c, mb});
  if (ckpt_copied_.count({c, mb})) Gpt2Activations::release(a.x[size_t(first)]);
}

// Before a micro-batch's backward: offloaded checkpoints leave the device (their copies are
// complete: the Program makes this task depend on them, core::checkpoint_copy_waits), and
// activation gradients start at zero.
template <class S>
void GptCpuBackendOf<S>::begin_backward(const Task& t) {
  Gpt2Activations& a = acts_[size_t(t.micro_batch)];
  drop_checkpoints(t, [&](int b) { Gpt2Activations::release(a.x[size_t(b)]); });
  a.zero_grads();
}

// ---- offloaded activations ------------------------------------------------------------------------

template <class S>
HostFloats GptCpuBackendOf<S>::activation_host(size_t n) {
  auto owner = std::make_shared<Staging<float>>(staging<float>(int64_t(n)));
  return HostFloats(owner, owner->data());
}

template <class S>
void GptCpuBackendOf<S>::save_activations(const Task& t, std::span<const ActivationRef> refs, std::span<const size_t> sizes,
                                     float* host) {
  for (size_t i = 0; i < refs.size(); ++i) {
    Activation& v = tensor(t.micro_batch, refs[i]);
    std::copy_n(v.begin(), sizes[i], host);
    host += sizes[i];
    Gpt2Activations::release(v);
  }
}

template <class S>
void GptCpuBackendOf<S>::restore_activations(const Task& t, std::span<const ActivationRef> refs,
                                        std::span<const size_t> sizes, const float* host) {
  for (size_t i = 0; i < refs.size(); ++i) {
    tensor(t.micro_batch, refs[i]).assign(host, host + sizes[i]);
    host += sizes[i];
  }
}

// ---- activation checkpoints -----------------------------------------------------------------------

// Partitioned checkpoints (activation_checkpoint.partitioned under tensor parallelism): each rank of
// the group keeps slice r of k = ceil(n / t) elements of the n-element checkpoint (zero-padded) off
// the device; brought back, the slice goes to its place and the Program's all-gather over the group
// puts the whole checkpoint together before the recompute.
template <class S>
int64_t GptCpuBackendOf<S>::checkpoint_slice() const {
  const int64_t n = checkpoint_numel(), t = model_.tensor_parallel();
  return opt.config.checkpoints_partitioned && t > 1 ? (n + t - 1) / t : n;
}

template <class S>
void GptCpuBackendOf<S>::checkpoint(const Task& t) {
  Gpt2Activations& a = acts_[size_t(t.micro_batch)];
  const Key key{t.checkpoint, t.micro_batch};
  auto& x = a.x[size_t(checkpoint_first_block(t.checkpoint))];
  // This rank's elements of the checkpoint: [at, at + mine), all of them unless partitioned.
  const int64_t n = checkpoint_numel(), k = checkpoint_slice();
  const int64_t at = k == n ? 0 : std::min(n, k * model_.tensor_parallel_rank()), mine = std::min(n - at, k);
  switch (t.kind) {
    case TaskKind::CopyD2H: {
      Staging<float> copy(static_cast<size_t>(k), 0.0f);
      std::copy_n(x.begin() + at, mine, copy.begin());
      {
        std::lock_guard<std::mutex> lock(mu);
        ckpt_host_[key] = std::move(copy);
        ckpt_copied_.insert(key);
        if (ckpt_forward_done_.count(key)) Gpt2Activations::release(x);
      }
      return checkpoint_saved(t.micro_batch);
    }
    case TaskKind::NvmeWrite: {
      Staging<float> host = take(ckpt_host_, key, P->label(t) + ": the checkpoint");
      const auto id = checkpoint_tensor(t.checkpoint, t.micro_batch, host.size() * sizeof(float));
      store->write(id, 0, host.data(), host.size() * sizeof(float)).wait_or_throw();
      return;
    }
    case TaskKind::NvmeRead: {
      Staging<float> host(static_cast<size_t>(k));
      const auto id = checkpoint_tensor(t.checkpoint, t.micro_batch, 0);
      store->read(id, 0, host.data(), host.size() * sizeof(float)).wait_or_throw();
      return stage(ckpt_host_, key, std::move(host));
    }
    case TaskKind::CopyH2D: {
      Staging<float> host = take(ckpt_host_, key, P->label(t) + ": the checkpoint");
      return checkpoint_restored(t.checkpoint, t.micro_batch, [&] {
        x.assign(size_t(n), 0.0f);
        std::copy_n(host.begin(), mine, x.begin() + at);
      });
    }
    case TaskKind::AllGather: {  // the group's slices into the whole checkpoint (compute lane)
      if (int64_t(x.size()) != n)
        throw std::logic_error(fmt::format("{}: the checkpoint's slice was not brought back first", P->label(t)));
      std::vector<float> slice(size_t(k), 0.0f), whole(size_t(k * model_.tensor_parallel()));
      std::copy_n(x.begin() + at, mine, slice.begin());
      model_.tensor_parallel_group().all_gather(slice.data(), slice.size() * sizeof(float), whole.data(), "checkpoint slices");
      std::copy_n(whole.begin(), n, x.begin());
      return;
    }
    default:
      throw std::logic_error(fmt::format("no checkpoint transfer of kind {}", core::to_string(t.kind)));
  }
}

// ---- gradients ------------------------------------------------------------------------------------

template <class S>
void GptCpuBackendOf<S>::reduce_task(const Task& t, const Key& key, int64_t off, int64_t n) {
  const auto& u = unit(t.unit);
  DeviceVector<float> full = take(grad_full_, key, P->label(t) + ": the gradient");
  DeviceVector<float> shard;
  if (comm.size() == 1 && int64_t(full.size()) == n) {
    shard = std::move(full);  // one rank keeps its whole gradient: no reduction, no copy
  } else {
    shard = DeviceVector<float>(static_cast<size_t>(n), device<float>());
    if (t.kind == TaskKind::ReduceScatter) comm.reduce_scatter(full.data(), shard.data(), size_t(n), u.name.c_str());
    else comm.reduce(full.data(), shard.data(), size_t(n), u.owner, u.name.c_str());
  }
  if (!holds(u)) return;
  if (const float s = grad_scale(); s != 1.0f)  // one rank, one micro-batch: nothing to scale
    for (float& g : shard) g *= s;
  if (index.grad_moved_on.count(t.id)) return stage(grad_shard_, key, std::move(shard));  // a copy takes it on
  require_home(t, grads_.tier, Tier::Device, "gradients");
  accumulate_host(u, grads_.mem.data() + off, grads_.mem.data() + off, shard.data(), n, first_micro_batch(t),
                  last_micro_batch(t));
}

template <class S>
void GptCpuBackendOf<S>::gradient(const Task& t) {
  const auto& u = unit(t.unit);
  const Key key{t.unit, t.micro_batch};
  const int64_t off = mine_offset(u), n = mine_count(u);
  const bool first = first_micro_batch(t), last = last_micro_batch(t);
  switch (t.kind) {
    case TaskKind::ReduceScatter:
    case TaskKind::Reduce: return reduce_task(t, key, off, n);
    case TaskKind::CopyD2H: {
      DeviceVector<float> shard = take(grad_shard_, key, P->label(t) + ": the reduced gradient");
      if (index.grad_moved_on.count(t.id))  // on its way to NVMe: the write takes it
        return stage(grad_host_, key, Staging<float>(shard.begin(), shard.end()));
      require_home(t, grads_.tier, t.to, "gradients");
      return accumulate_host(u, grads_.mem.data() + off, grads_.mem.data() + off, shard.data(), n, first, last);
    }
    case TaskKind::NvmeRead: {
      Staging<S> partial = staging<S>(n);
      grads_.read(off, n, partial.data());
      return stage(grad_partial_, key, std::move(partial));
    }
    case TaskKind::NvmeWrite: {
      Staging<float> shard = take(grad_host_, key, P->label(t) + ": the reduced gradient");
      Staging<S> partial;
      if (!first) partial = take(grad_partial_, key, P->label(t) + ": the partial gradient");
      Staging<S> out = staging<S>(n);
      accumulate_host(u, out.data(), partial.data(), shard.data(), n, first, last);
      grads_.write(off, n, out.data());
      return;
    }
    case TaskKind::AllReduce:
      throw std::logic_error("gradients all-reduced whole need ZeRO stage 0-1, which this backend does not run");
    case TaskKind::Free: {
      std::lock_guard<std::mutex> lock(mu);
      grad_full_.erase(key);
      return;
    }
    default:
      throw std::logic_error(fmt::format("no gradient transfer of kind {}", core::to_string(t.kind)));
  }
}

// ---- optimizer ------------------------------------------------------------------------------------

template <class S>
void GptCpuBackendOf<S>::optimizer(const Task& t) {
  const int32_t sg = t.sub_group;
  const int64_t off = t.sg_offset, n = t.sg_count;
  if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeRead) {
    Staging<float> a = staging<float>(n), b = staging<float>(n), c = staging<float>(n);
    wait_all({master_.read_async(off, n, a.data()), m_.read_async(off, n, b.data()), v_.read_async(off, n, c.data())});
    std::lock_guard<std::mutex> lock(mu);
    sg_master_[sg] = std::move(a);
    sg_m_[sg] = std::move(b);
    sg_v_[sg] = std::move(c);
    return;
  }
  if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeWrite) {
    const std::string what = P->label(t) + ": optimizer states";
    Staging<float> a = take(sg_master_, sg, what), b = take(sg_m_, sg, what), c = take(sg_v_, sg, what);
    wait_all(
        {master_.write_async(off, n, a.data()), m_.write_async(off, n, b.data()), v_.write_async(off, n, c.data())});
    return;
  }
  if (t.data == Data::Grad) {  // gradients to where the optimizer runs
    if (t.kind == TaskKind::CopyH2D) {
      DeviceVector<S> g(size_t(n), device<S>());
      if (t.source >= 0) {  // what the NVMe read staged on the host (Task::source)
        Staging<S> host = take(opt_host_, t.source, P->label(t) + ": the gradients read from NVMe");
        std::copy_n(host.data(), n, g.data());
      } else {
        require_home(t, grads_.tier, t.from, "gradients");
        grads_.read(off, n, g.data());
      }
      return stage(opt_dev_, t.buffer, std::move(g));
    }
    require_home(t, grads_.tier, t.from, "gradients");  // an NVMe read or a device-to-host copy of the home
    Staging<S> g = staging<S>(n);
    grads_.read(off, n, g.data());
    return stage(opt_host_, t.buffer, std::move(g));
  }
  if (t.kind == TaskKind::OptimizerStep) return adam_step(t);
  if (t.data == Data::Param) {  // updated parameters on their way home, from the buffer the stage before filled
    if (t.source < 0) throw std::logic_error(fmt::format("{}: moves updated parameters from no buffer", P->label(t)));
    const std::string what = P->label(t) + ": the updated parameters";
    Staging<S> host;
    DeviceVector<S> dev;
    const S* src = nullptr;
    if (t.from == Tier::Device) src = (dev = take(opt_dev_, t.source, what)).data();
    else src = (host = take(opt_host_, t.source, what)).data();
    if (t.buffer >= 0) return put(t.to, t.buffer, src, n);  // staged for the next stage
    require_home(t, params_.tier, t.to, "parameters");
    params_.write(off, n, src);
    return;
  }
  throw std::logic_error(fmt::format("{}: no optimizer task of this kind", P->label(t)));
}

// n updated parameters into a new buffer of the optimizer's pipeline on `tier`, under the Program's id.
template <class S>
void GptCpuBackendOf<S>::put(Tier tier, int64_t buffer, const S* src, int64_t n) {
  if (tier == Tier::Device) {
    DeviceVector<S> d(size_t(n), device<S>());
    std::copy_n(src, n, d.data());
    return stage(opt_dev_, buffer, std::move(d));
  }
  Staging<S> h = staging<S>(n);
  std::copy_n(src, n, h.data());
  stage(opt_host_, buffer, std::move(h));
}

// Adam over one sub-group where the task runs (the device when its states are there, else the host):
// states from their home or (on NVMe) what the read staged; gradients from what the stage before
// filled (Task::source) or their home; the parameters into a new buffer (Task::buffer) or their home.
template <class S>
void GptCpuBackendOf<S>::adam_step(const Task& t) {
  const int32_t sg = t.sub_group;
  const int64_t off = t.sg_offset, n = t.sg_count;
  const Tier where = t.from == Tier::Device ? Tier::Device : Tier::Host;
  float *pm, *pmm, *pv;
  if (t.from == Tier::Nvme) {
    std::lock_guard<std::mutex> lock(mu);
    pm = sg_master_.at(sg).data();
    pmm = sg_m_.at(sg).data();
    pv = sg_v_.at(sg).data();
  } else {
    require_home(t, master_.tier, t.from, "optimizer states");
    pm = master_.resident(off);
    pmm = m_.resident(off);
    pv = v_.resident(off);
  }
  Staging<S> ghost;
  DeviceVector<S> gdev;
  const S* g = nullptr;
  const std::string what = P->label(t) + ": the gradients";
  if (t.source < 0) {
    require_home(t, grads_.tier, where, "gradients");
    g = grads_.resident(off);
  } else if (where == Tier::Device) {
    g = (gdev = take(opt_dev_, t.source, what)).data();
  } else {
    g = (ghost = take(opt_host_, t.source, what)).data();
  }
  if (t.buffer < 0) {
    require_home(t, params_.tier, where, "parameters");
    return update(g, n, pm, pmm, pv, params_.resident(off));
  }
  if (where == Tier::Device) {
    DeviceVector<S> out(size_t(n), device<S>());
    update(g, n, pm, pmm, pv, out.data());
    return stage(opt_dev_, t.buffer, std::move(out));
  }
  Staging<S> out = staging<S>(n);
  update(g, n, pm, pmm, pv, out.data());
  stage(opt_host_, t.buffer, std::move(out));
}

template <class S>
void GptCpuBackendOf<S>::update(const S* g, int64_t n, float* master, float* m, float* v, S* out) {
  if (overflowed()) {  // a skipped fp16 step: the states stay, the parameters are what they were
    cpu::narrow(out, master, n);
    return;
  }
  if constexpr (std::is_same_v<S, bf16>) {
    std::vector<bf16> scaled;
    adam_.step(step(), size_t(n), master, m, v, clipped_host(g, n, scaled), out);
  } else {
    std::vector<float> unscaled;
    adam_.step(step(), size_t(n), master, m, v, unscaled_host(g, n, unscaled), nullptr);
    cpu::narrow(out, master, n);
  }
  count_nonfinite(master, n);
}

template class GptCpuBackendOf<bf16>;
template class GptCpuBackendOf<fp16>;
template class GptCpuBackendOf<float>;

std::unique_ptr<GptBackendBase> make_gpt_cpu_backend(const core::Program& program, const core::Plan& plan,
                                                     const Gpt2& model, int rank, Collectives& comm,
                                                     GptBackendOptions options) {
  switch (options.config.precision.value_or(core::Precision::Bf16)) {
    case core::Precision::Fp16:
      return std::make_unique<GptCpuBackendOf<fp16>>(program, plan, model, rank, comm, std::move(options));
    case core::Precision::Fp32:
      return std::make_unique<GptCpuBackendOf<float>>(program, plan, model, rank, comm, std::move(options));
    case core::Precision::Bf16: break;
  }
  return std::make_unique<GptCpuBackendOf<bf16>>(program, plan, model, rank, comm, std::move(options));
}

}  // namespace zinf::engine
