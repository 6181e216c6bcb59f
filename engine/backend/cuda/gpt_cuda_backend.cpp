#include "engine/backend/cuda/gpt_cuda_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>

#include "engine/backend/cuda/cuda_check.hpp"
#include "engine/backend/cuda/kernels.hpp"
#include "engine/memory/staging_cache.hpp"

namespace zinf::engine::cuda {

using core::Data;
using core::Task;
using core::TaskKind;
using core::Tier;

namespace {

// The arena: the Program's device budget, when this GPU has that much free.
uint64_t arena_budget(const core::Program& program, int device) {
  size_t free = 0, total = 0;
  ZINF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return device_arena_bytes(program, uint64_t(free), fmt::format("CUDA device {}", device));
}

// The plan moves activations over GPUDirect Storage, which this build runs through pinned host
// memory: said once per process.
void warn_no_cufile() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::fprintf(stderr,
                 "zinf: the plan moves activations NVMe <-> GPU over GPUDirect Storage; the CUDA backend has no cuFile "
                 "path, so these transfers go through pinned host memory (a bounce buffer per transfer)\n");
  });
}

void wait_both(IoHandle a, IoHandle b) {
  for (IoHandle* h : {&a, &b})
    if (h->valid()) h->wait_or_throw();
}

}  // namespace

GptCudaBackend::GptCudaBackend(const core::Program& p, const core::Plan& pl, const Gpt2& mdl, int r, Collectives& c,
                               GptCudaBackendOptions o)
    : GptBackendBase(p, pl, mdl.graph(), r, c, std::move(o.base), "CUDA"), device_(o.device),
      adam_(AdamOptions::from_run_config(opt.config), opt.adam_threads) {
  // Its kernels are GPT-2's; the Llama family's (RMSNorm, rotary, grouped-query attention,
  // SwiGLU) are the CPU backend's only.
  if (mdl.spec().family != core::Family::Gpt2)
    throw std::invalid_argument(fmt::format("model {} is {}: the CUDA training backend has GPT-2's kernels only; "
                                            "train it with --backend cpu",
                                            mdl.spec().name, core::to_string(mdl.spec().family)));
  // Its kernels, copies and Adam are bf16's; fp16 and fp32 train on the CPU backend.
  if (const auto want = opt.config.precision; want && *want != core::Precision::Bf16)
    throw std::invalid_argument(fmt::format("precision {}: the CUDA training backend trains bf16 only (its kernels "
                                            "and copies are bf16's); train {} with --backend cpu",
                                            core::to_string(*want), core::to_string(*want)));
  // One stream and cuBLAS handle per lane: tasks of one lane running at once would share them.
  for (core::Lane l : {core::Lane::NvmeRead, core::Lane::NvmeWrite})
    if (P->lane_slots(l) > 1)
      throw std::invalid_argument(fmt::format(
          "the CUDA training backend runs one task per lane at a time, but the run config's aio.tasks_in_flight "
          "gives the {} lane {}; use aio.tasks_in_flight: 1",
          core::to_string(l), P->lane_slots(l)));
  ZINF_CUDA_CHECK(cudaSetDevice(device_));
  std::vector<CudaContext*> contexts{&main_ctx_};
  for (auto& l : lanes_) contexts.push_back(&l);
  for (CudaContext* ctx : contexts) {
    ZINF_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    ZINF_CUBLAS_CHECK(cublasCreate(&ctx->blas));
    ZINF_CUBLAS_CHECK(cublasSetStream(ctx->blas, ctx->stream));
  }
  if (std::any_of(P->activations().begin(), P->activations().end(), [](const core::ActivationSegment& a) { return a.gds; }))
    warn_no_cufile();
  arena_ = std::make_unique<CudaDeviceArena>(arena_budget(*P, device_));
  model_ = std::make_unique<GptCudaModel>(graph, *arena_);
  // The homes, on the tiers the plan puts them (set-up: the plan is read nowhere else).
  params_.init(*arena_, pl.params, space, store.get(), "params");
  if (!trains()) return;  // a forward pass alone reads the parameters, nothing else
  grads_.init(*arena_, pl.gradients, space, store.get(), "grads");
  master_.init(*arena_, pl.optimizer, space, store.get(), "master");
  m_.init(*arena_, pl.optimizer, space, store.get(), "adam_m");
  v_.init(*arena_, pl.optimizer, space, store.get(), "adam_v");
}

GptCudaBackend::~GptCudaBackend() {
  drop_activation_copies();  // pinned loans, before pinned_ goes
  cudaSetDevice(device_);
  std::vector<CudaContext*> contexts{&main_ctx_};
  for (auto& l : lanes_) contexts.push_back(&l);
  for (CudaContext* ctx : contexts) {
    if (ctx->blas) cublasDestroy(ctx->blas);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
  }
}

uint64_t GptCudaBackend::device_budget() const { return arena_->allocator().capacity(); }
int64_t GptCudaBackend::device_peak_bytes() const { return int64_t(arena_->allocator().peak()); }
void GptCudaBackend::reset_device_peak() { arena_->allocator().reset_peak(); }

void GptCudaBackend::bind_thread() { ZINF_CUDA_CHECK(cudaSetDevice(device_)); }  // the current device is per thread
void GptCudaBackend::sync(const CudaContext& ctx) const { ZINF_CUDA_CHECK(cudaStreamSynchronize(ctx.stream)); }

void GptCudaBackend::start_step(std::vector<Batch>& batches) {
  adam_.set_options(adam_options());  // the host optimizer's; the device's reads adam_options() itself
  if (acts_.size() != batches.size()) {
    acts_.clear();
    for (size_t i = 0; i < batches.size(); ++i) acts_.push_back(model_->make_activations());
  }
  for (size_t i = 0; i < batches.size(); ++i)
    model_->set_batch(acts_[i], batches[i].inputs, batches[i].targets, main_ctx_);
}

void GptCudaBackend::read_state(StateTensor which, int64_t off, int64_t n, float* dst) {
  state_home(which).read(off, n, dst, main_ctx_.stream);
}

void GptCudaBackend::write_state(int64_t off, int64_t n, StateTensor which, const float* src, bool params_too) {
  cudaStream_t s = main_ctx_.stream;
  Staging<bf16> rounded;  // page-aligned, as an NVMe home's write takes it
  if (params_too) {  // the bf16 parameters are the master weights rounded; the padding zero, as src's
    rounded = Staging<bf16>(size_t(core::shard_aligned(n)), bf16{});
    for (int64_t i = 0; i < n; ++i) rounded[size_t(i)] = engine::to_bf16(src[i]);
  }
  if (params_too && !trains()) return params_.write(off, n, rounded.data(), s);
  if (params_too) return wait_both(params_.write_async(off, n, rounded.data(), s), master_.write_async(off, n, src, s));
  state_home(which).write(off, n, src, s);
}

// ---- parameters ---------------------------------------------------------------------------------------

// The shard a gather stage sends: what the host-to-device copy staged (the Program's Task::source;
// owner-based, the copy fills the broadcast's own buffer), or (none) its home, on the device.
DeviceBlock GptCudaBackend::staged_shard(const Task& t, const core::ParamUnit& u) {
  if (t.source >= 0) return take(dev_param_, t.source, P->label(t) + ": the host-to-device copy of " + u.name);
  require_home(t, params_.tier, Tier::Device, "parameters");
  return {};
}

void GptCudaBackend::fetch(const Task& t) {
  const CudaContext& ctx = lane(t);
  const auto& u = unit(t.unit);
  const int64_t off = mine_offset(u), n = mine_count(u);
  const size_t bytes = size_t(n) * sizeof(bf16);
  switch (t.kind) {
    case TaskKind::NvmeRead: {
      PinnedLoan buf = pinned_.acquire(bytes);
      params_.read(off, n, buf.as<bf16>(), ctx.stream);
      return stage(host_param_, t.buffer, std::move(buf));
    }
    case TaskKind::CopyH2D: {
      PinnedLoan staged;
      const bf16* src = params_.host_ptr(off);
      if (t.source >= 0) {
        staged = take(host_param_, t.source, P->label(t) + ": the NVMe read of " + u.name);
        src = staged.as<bf16>();
      } else {
        require_home(t, params_.tier, t.from, "parameters");
      }
      DeviceBlock dst = arena_->allocate(bytes, "parameter shard " + u.name);
      ZINF_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, ctx.stream));
      sync(ctx);
      return stage(dev_param_, t.buffer, std::move(dst));
    }
    case TaskKind::AllGather: {
      DeviceBlock staged = staged_shard(t, u);
      const bf16* shard = staged ? staged.as<bf16>() : params_.device(off);
      DeviceBlock full = arena_->allocate(uint64_t(u.shard_numel) * uint64_t(P->data_parallel()) * sizeof(bf16),
                                          "gathered parameters " + u.name);
      comm.all_gather(shard, bytes, full.data(), u.name.c_str());
      return stage(gathered_, t.buffer, std::move(full));  // the buffer the Program names (Task::buffer)
    }
    case TaskKind::Broadcast: {
      DeviceBlock whole = arena_->allocate(uint64_t(u.numel) * sizeof(bf16), "gathered parameters " + u.name);
      if (u.owner == rank) {
        DeviceBlock staged = staged_shard(t, u);
        const bf16* src = staged ? staged.as<bf16>() : params_.device(off);
        ZINF_CUDA_CHECK(cudaMemcpyAsync(whole.data(), src, size_t(u.numel) * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                        ctx.stream));
        sync(ctx);
      }
      comm.broadcast(whole.data(), size_t(u.numel) * sizeof(bf16), u.owner, u.name.c_str());
      return stage(gathered_, t.buffer, std::move(whole));
    }
    case TaskKind::Alloc:
      return;  // the owner-based gathered buffer is filled by the broadcast
    default:
      throw std::logic_error(fmt::format("no parameter fetch of kind {}", core::to_string(t.kind)));
  }
}

const bf16* GptCudaBackend::gathered_for(const Task& t, int32_t u) {
  const auto buffers = gathered_buffers(t, u);
  std::lock_guard<std::mutex> lock(mu);
  for (int64_t b : buffers)
    if (auto it = gathered_.find(b); it != gathered_.end()) return it->second.as<bf16>();
  throw std::logic_error(fmt::format("{}: parameters of {} are not gathered", P->label(t), unit(u).name));
}

void GptCudaBackend::drop_gathered(int64_t buffer) {
  std::lock_guard<std::mutex> lock(mu);
  gathered_.erase(buffer);
}

// ---- compute ------------------------------------------------------------------------------------------

void GptCudaBackend::compute(const Task& t) {
  const CudaContext& ctx = lane(t);
  CudaActivations& a = acts_[size_t(t.micro_batch)];
  if (first_backward(t)) {
    drop_checkpoints(t, [&](int b) { a.x[size_t(b)].release(); });
    a.zero_grads(ctx.stream);
  }
  const std::vector<int32_t> units = compute_units(t);
  const int32_t tiled = tiled_unit(t);
  std::vector<const bf16*> pbufs;
  for (int32_t u : units) pbufs.push_back(gathered_for(t, u));
  if (t.kind == TaskKind::Backward) {
    std::vector<float*> gbufs;
    for (int32_t u : units) gbufs.push_back(grad_buffer(u, t.micro_batch, ctx));
    if (tiled >= 0) model_->backward_tile(t.op, unit(tiled).row_begin, unit(tiled).row_end, pbufs, gbufs, a, ctx);
    else model_->backward(t.op, pbufs, gbufs, a, ctx);
    return drop_after_backward(t, a, [](DeviceTensor& v) { v.release(); });  // the model synchronized the stream
  }
  if (tiled >= 0) model_->forward_tile(t.op, unit(tiled).row_begin, unit(tiled).row_end, pbufs, a, ctx);
  else model_->forward(t.op, pbufs, a, ctx);
  const bool loss = graph.ops[size_t(t.op)].kind == core::OpKind::Loss;
  if (loss && keep_logits_of() >= 0 && t.micro_batch == 0) {
    std::vector<float>& row = kept_logits_row();
    row.resize(size_t(graph.spec.vocab));
    ZINF_CUDA_CHECK(cudaMemcpyAsync(row.data(), a.logits.data() + keep_logits_of() * graph.spec.vocab,
                                    row.size() * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream));
    sync(ctx);
  }
  if (loss) set_loss(t.micro_batch, a.loss);
  if (t.kind == TaskKind::Forward && ends_run_forward(t)) drop_run(t.checkpoint, a);
  const auto release = [](DeviceTensor& v) { v.release(); };  // the model synchronized the stream
  drop_after_forward(t, a, release);
  if (loss && P->forward_only()) drop_head(a, release);
}

float* GptCudaBackend::grad_buffer(int32_t u, int32_t mb, const CudaContext& ctx) {
  std::lock_guard<std::mutex> lock(mu);
  DeviceBlock& g = grad_full_[{u, mb}];
  if (!g) {
    const uint64_t n = uint64_t(grad_buffer_count(unit(u)));
    g = arena_->allocate(n * sizeof(float), "gradients of " + unit(u).name);
    ZINF_CUDA_CHECK(cudaMemsetAsync(g.data(), 0, n * sizeof(float), ctx.stream));
  }
  return g.as<float>();
}

// After a checkpointed run's forward: its blocks' intermediates and inner inputs go.
void GptCudaBackend::drop_run(int32_t c, CudaActivations& a) {
  const int first = checkpoint_first_block(c);
  for (int b : checkpoint_blocks(c)) {
    a.drop_block(b);
    if (b != first) a.x[size_t(b)].release();
  }
}

// ---- offloaded activations -----------------------------------------------------------------------------

HostFloats GptCudaBackend::activation_host(size_t n) {
  auto owner = std::make_shared<PinnedLoan>(pinned_.acquire(std::max<size_t>(n, 1) * sizeof(float)));
  return HostFloats(owner, owner->as<float>());
}

// The copies are enqueued on the lane's stream; the tensors go back to the arena only once the
// stream has finished them.
void GptCudaBackend::save_activations(const Task& t, std::span<const ActivationRef> refs,
                                      std::span<const size_t> sizes, float* host) {
  const CudaContext& ctx = lane(t);
  for (size_t i = 0, at = 0; i < refs.size(); at += sizes[i++])
    if (sizes[i] > 0)
      ZINF_CUDA_CHECK(cudaMemcpyAsync(host + at, tensor(t.micro_batch, refs[i]).data(), sizes[i] * sizeof(float),
                                      cudaMemcpyDeviceToHost, ctx.stream));
  sync(ctx);
  for (const ActivationRef& r : refs) tensor(t.micro_batch, r).release();
}

void GptCudaBackend::restore_activations(const Task& t, std::span<const ActivationRef> refs,
                                         std::span<const size_t> sizes, const float* host) {
  const CudaContext& ctx = lane(t);
  for (size_t i = 0, at = 0; i < refs.size(); at += sizes[i++]) {
    DeviceTensor& v = tensor(t.micro_batch, refs[i]);
    if (sizes[i] == 0) {
      v.release();
      continue;
    }
    if (v.n != int64_t(sizes[i])) {
      v.block = arena_->allocate(sizes[i] * sizeof(float), "offloaded activations");
      v.n = int64_t(sizes[i]);
    }
    ZINF_CUDA_CHECK(cudaMemcpyAsync(v.data(), host + at, sizes[i] * sizeof(float), cudaMemcpyHostToDevice, ctx.stream));
  }
  sync(ctx);
}

// ---- activation checkpoints ---------------------------------------------------------------------------

void GptCudaBackend::checkpoint(const Task& t) {
  const CudaContext& ctx = lane(t);
  const Key key{t.checkpoint, t.micro_batch};
  DeviceTensor& x = acts_[size_t(t.micro_batch)].x[size_t(checkpoint_first_block(t.checkpoint))];
  const int64_t n = checkpoint_numel();
  const size_t bytes = size_t(n) * sizeof(float);
  if (t.kind == TaskKind::CopyD2H) {
    if (x.n != n) throw std::logic_error(fmt::format("{}: the checkpoint is not on the device", P->label(t)));
    PinnedLoan host = pinned_.acquire(bytes);
    ZINF_CUDA_CHECK(cudaMemcpyAsync(host.as<float>(), x.data(), bytes, cudaMemcpyDeviceToHost, ctx.stream));
    sync(ctx);
    stage(ckpt_host_, key, std::move(host));
    return checkpoint_saved(t.micro_batch);
  }
  if (t.kind == TaskKind::NvmeWrite) {
    PinnedLoan host = take(ckpt_host_, key, P->label(t) + ": the checkpoint");
    store->write(checkpoint_tensor(t.checkpoint, t.micro_batch, bytes), 0, host.as<float>(), bytes).wait_or_throw();
    return;
  }
  if (t.kind == TaskKind::NvmeRead) {
    PinnedLoan host = pinned_.acquire(bytes);
    store->read(checkpoint_tensor(t.checkpoint, t.micro_batch, 0), 0, host.as<float>(), bytes).wait_or_throw();
    return stage(ckpt_host_, key, std::move(host));
  }
  if (t.kind != TaskKind::CopyH2D)
    throw std::logic_error(fmt::format("no checkpoint transfer of kind {}", core::to_string(t.kind)));
  PinnedLoan host = take(ckpt_host_, key, P->label(t) + ": the checkpoint");
  checkpoint_restored(t.checkpoint, t.micro_batch, [&] {
    if (x.n != n) {
      x.block = arena_->allocate(bytes, "activation checkpoint");
      x.n = n;
    }
    ZINF_CUDA_CHECK(cudaMemcpyAsync(x.data(), host.as<float>(), bytes, cudaMemcpyHostToDevice, ctx.stream));
    sync(ctx);
  });
}

// ---- gradients ----------------------------------------------------------------------------------------

// The reduced micro-batch gradient added into the stored bf16 shard on the device, its squares
// summed there after the last micro-batch.
void GptCudaBackend::accumulate_device(bf16* home, const float* add, int64_t n, bool first, bool last,
                                       const CudaContext& ctx) {
  DeviceBlock ss;
  if (last) {
    ss = arena_->allocate(sizeof(double), "gradient norm");
    ZINF_CUDA_CHECK(cudaMemsetAsync(ss.data(), 0, sizeof(double), ctx.stream));
  }
  accumulate_grad(home, home, add, n, first, last ? ss.as<double>() : nullptr, ctx.stream);
  double part = 0;
  if (last) ZINF_CUDA_CHECK(cudaMemcpyAsync(&part, ss.data(), sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  sync(ctx);
  if (last) add_sumsq(part);
}

void GptCudaBackend::reduce_task(const Task& t, const Key& key, int64_t off, int64_t n) {
  const CudaContext& ctx = lane(t);
  const auto& u = unit(t.unit);
  DeviceBlock full = take(grad_full_, key, P->label(t) + ": the gradient");
  DeviceBlock shard = arena_->allocate(uint64_t(n) * sizeof(float), "reduced gradients of " + u.name);
  if (t.kind == TaskKind::ReduceScatter)
    comm.reduce_scatter(full.as<float>(), shard.as<float>(), size_t(n), u.name.c_str());
  else
    comm.reduce(full.as<float>(), shard.as<float>(), size_t(n), u.owner, u.name.c_str());
  full.reset();
  if (!holds(u)) return;
  scale(shard.as<float>(), grad_scale(), n, ctx.stream);
  if (!index.grad_moved_on.count(t.id)) {  // no copy takes it on: into the home
    require_home(t, grads_.tier, Tier::Device, "gradients");
    return accumulate_device(grads_.device(off), shard.as<float>(), n, first_micro_batch(t), last_micro_batch(t), ctx);
  }
  sync(ctx);
  stage(grad_shard_, key, std::move(shard));
}

PinnedLoan GptCudaBackend::shard_to_host(const Task& t, const Key& key, int64_t n, const CudaContext& ctx) {
  DeviceBlock shard = take(grad_shard_, key, P->label(t) + ": the reduced gradient");
  PinnedLoan host = pinned_.acquire(size_t(n) * sizeof(float));
  ZINF_CUDA_CHECK(cudaMemcpyAsync(host.as<float>(), shard.data(), size_t(n) * sizeof(float), cudaMemcpyDeviceToHost,
                                  ctx.stream));
  sync(ctx);
  return host;
}

void GptCudaBackend::gradient(const Task& t) {
  const CudaContext& ctx = lane(t);
  const auto& u = unit(t.unit);
  const Key key{t.unit, t.micro_batch};
  const int64_t off = mine_offset(u), n = mine_count(u);
  const bool first = first_micro_batch(t), last = last_micro_batch(t);
  if (t.kind == TaskKind::ReduceScatter || t.kind == TaskKind::Reduce) return reduce_task(t, key, off, n);
  if (t.kind == TaskKind::CopyD2H) {
    PinnedLoan host = shard_to_host(t, key, n, ctx);
    if (index.grad_moved_on.count(t.id)) return stage(grad_shard_host_, key, std::move(host));  // the NVMe write's
    require_home(t, grads_.tier, t.to, "gradients");
    return accumulate_host(u, grads_.host_ptr(off), grads_.host_ptr(off), host.as<float>(), n, first, last);
  }
  if (t.kind == TaskKind::NvmeRead) {
    PinnedLoan partial = pinned_.acquire(size_t(n) * sizeof(bf16));
    grads_.read(off, n, partial.as<bf16>(), ctx.stream);
    return stage(grad_partial_, key, std::move(partial));
  }
  if (t.kind == TaskKind::NvmeWrite) {
    PinnedLoan shard = take(grad_shard_host_, key, P->label(t) + ": the reduced gradient copied to the host");
    PinnedLoan partial;
    if (!first) partial = take(grad_partial_, key, P->label(t) + ": the partial gradient");
    PinnedLoan out = pinned_.acquire(size_t(n) * sizeof(bf16));
    accumulate_host(u, out.as<bf16>(), partial ? partial.as<bf16>() : nullptr, shard.as<float>(), n, first, last);
    grads_.write(off, n, out.as<bf16>(), ctx.stream);
    return;
  }
  if (t.kind == TaskKind::Free) {
    std::lock_guard<std::mutex> lock(mu);
    grad_full_.erase(key);
    return;
  }
  if (t.kind == TaskKind::AllReduce)
    throw std::logic_error("gradients all-reduced whole need ZeRO stage 0-1, which this backend does not run");
  throw std::logic_error(fmt::format("no gradient transfer of kind {}", core::to_string(t.kind)));
}

// ---- optimizer ----------------------------------------------------------------------------------------

void GptCudaBackend::optimizer(const Task& t) {
  const CudaContext& ctx = lane(t);
  const int32_t sg = t.sub_group;
  const int64_t off = t.sg_offset, n = t.sg_count;
  const size_t fbytes = size_t(n) * sizeof(float), hbytes = size_t(n) * sizeof(bf16);
  const bool state = t.data == Data::OptimizerState;
  if (state && t.kind == TaskKind::NvmeRead) {
    PinnedLoan a = pinned_.acquire(fbytes), b = pinned_.acquire(fbytes), c = pinned_.acquire(fbytes);
    IoHandle ha = master_.read_async(off, n, a.as<float>(), ctx.stream);
    IoHandle hb = m_.read_async(off, n, b.as<float>(), ctx.stream);
    IoHandle hc = v_.read_async(off, n, c.as<float>(), ctx.stream);
    for (IoHandle* h : {&ha, &hb, &hc})
      if (h->valid()) h->wait_or_throw();
    stage(sg_master_, sg, std::move(a));
    stage(sg_m_, sg, std::move(b));
    return stage(sg_v_, sg, std::move(c));
  }
  if (state && t.kind == TaskKind::NvmeWrite) {
    const std::string what = P->label(t) + ": optimizer states";
    PinnedLoan a = take(sg_master_, sg, what), b = take(sg_m_, sg, what), c = take(sg_v_, sg, what);
    IoHandle ha = master_.write_async(off, n, a.as<float>(), ctx.stream);
    IoHandle hb = m_.write_async(off, n, b.as<float>(), ctx.stream);
    IoHandle hc = v_.write_async(off, n, c.as<float>(), ctx.stream);
    for (IoHandle* h : {&ha, &hb, &hc})
      if (h->valid()) h->wait_or_throw();
    return;
  }
  if (t.data == Data::Grad) {  // gradients to where the optimizer runs
    if (t.kind == TaskKind::CopyH2D) {
      PinnedLoan staged;
      const bf16* src = nullptr;
      if (t.source >= 0) {  // what the NVMe read staged on the host (Task::source)
        src = (staged = take(opt_host_, t.source, P->label(t) + ": the gradients read from NVMe")).as<bf16>();
      } else {
        require_home(t, grads_.tier, t.from, "gradients");
        src = grads_.host_ptr(off);
      }
      DeviceBlock g = arena_->allocate(hbytes, "gradients for the device Adam");
      ZINF_CUDA_CHECK(cudaMemcpyAsync(g.data(), src, hbytes, cudaMemcpyHostToDevice, ctx.stream));
      sync(ctx);
      return stage(opt_dev_, t.buffer, std::move(g));
    }
    require_home(t, grads_.tier, t.from, "gradients");  // an NVMe read or a device-to-host copy of the home
    PinnedLoan g = pinned_.acquire(hbytes);
    grads_.read(off, n, g.as<bf16>(), ctx.stream);
    return stage(opt_host_, t.buffer, std::move(g));
  }
  if (t.kind == TaskKind::OptimizerStep) return t.from == Tier::Device ? adam_device(t) : adam_host(t);
  if (t.data != Data::Param) throw std::logic_error(fmt::format("{}: no optimizer task of this kind", P->label(t)));
  // Updated parameters on their way home, from the buffer the stage before filled (Task::source).
  if (t.source < 0) throw std::logic_error(fmt::format("{}: moves updated parameters from no buffer", P->label(t)));
  const std::string what = P->label(t) + ": the updated parameters";
  const bool from_device = t.from == Tier::Device;
  DeviceBlock dev;
  PinnedLoan host;
  const bf16* src = from_device ? (dev = take(opt_dev_, t.source, what)).as<bf16>()
                                : (host = take(opt_host_, t.source, what)).as<bf16>();
  if (t.buffer >= 0) {  // staged for the next stage, on the host (the planner stages nothing else)
    if (t.to != Tier::Host) throw std::logic_error(what + " are staged on the " + core::to_string(t.to) + " tier");
    PinnedLoan out = pinned_.acquire(hbytes);
    ZINF_CUDA_CHECK(cudaMemcpyAsync(out.as<bf16>(), src, hbytes, from_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost,
                                    ctx.stream));
    sync(ctx);
    return stage(opt_host_, t.buffer, std::move(out));
  }
  require_home(t, params_.tier, t.to, "parameters");
  if (!from_device) return params_.write(off, n, src, ctx.stream);  // to the device or NVMe home
  ZINF_CUDA_CHECK(cudaMemcpyAsync(params_.host_ptr(off), src, hbytes, cudaMemcpyDeviceToHost, ctx.stream));
  sync(ctx);
}

// CPU Adam where the states are on the host or staged from NVMe: gradients from what the stage
// before filled (Task::source) or their home on the host; parameters into a new host buffer
// (Task::buffer) or their home on the host.
void GptCudaBackend::adam_host(const Task& t) {
  const int32_t sg = t.sub_group;
  const int64_t off = t.sg_offset, n = t.sg_count;
  float* states[3] = {master_.host_ptr(off), m_.host_ptr(off), v_.host_ptr(off)};
  if (t.from == Tier::Nvme) {
    std::lock_guard<std::mutex> lock(mu);
    states[0] = sg_master_.at(sg).as<float>();
    states[1] = sg_m_.at(sg).as<float>();
    states[2] = sg_v_.at(sg).as<float>();
  } else {
    require_home(t, master_.tier, t.from, "optimizer states");
  }
  PinnedLoan gstage;
  const bf16* g = nullptr;
  if (t.source >= 0) {
    g = (gstage = take(opt_host_, t.source, P->label(t) + ": the gradients")).as<bf16>();
  } else {
    require_home(t, grads_.tier, Tier::Host, "gradients");
    g = grads_.host_ptr(off);
  }
  std::vector<bf16> scratch;
  g = clipped_host(g, n, scratch);
  if (t.buffer < 0) {
    require_home(t, params_.tier, Tier::Host, "parameters");
    return adam_.step(step(), size_t(n), states[0], states[1], states[2], g, params_.host_ptr(off));
  }
  PinnedLoan out = pinned_.acquire(size_t(n) * sizeof(bf16));
  adam_.step(step(), size_t(n), states[0], states[1], states[2], g, out.as<bf16>());
  stage(opt_host_, t.buffer, std::move(out));
}

AdamCoeffs GptCudaBackend::coeffs() const {
  const AdamOptions& o = adam_options();
  const double bc1 = 1.0 - std::pow(o.beta1, double(step())), bc2 = 1.0 - std::pow(o.beta2, double(step()));
  return {float(o.beta1),       float(1.0 - o.beta1),         float(o.beta2),
          float(1.0 - o.beta2), float(o.lr / bc1),            float(1.0 / std::sqrt(bc2)),
          float(o.eps),         o.decoupled_weight_decay ? float(o.lr * o.weight_decay) : 0.0f,
          o.decoupled_weight_decay ? 0.0f : float(o.weight_decay)};
}

// Adam on the device: states in the arena, gradients from what the stage before filled
// (Task::source) or their home on the device, the bf16 parameters written in the same pass into a
// new device buffer (Task::buffer) or their home on the device.
void GptCudaBackend::adam_device(const Task& t) {
  const CudaContext& ctx = lane(t);
  const int64_t off = t.sg_offset, n = t.sg_count;
  const size_t hbytes = size_t(n) * sizeof(bf16);
  require_home(t, master_.tier, Tier::Device, "optimizer states");
  DeviceBlock gdev, scaled, pout;
  const bf16* g = nullptr;
  if (t.source >= 0) {
    g = (gdev = take(opt_dev_, t.source, P->label(t) + ": the gradients")).as<bf16>();
  } else {
    require_home(t, grads_.tier, Tier::Device, "gradients");
    g = grads_.device(off);
  }
  if (clip_scale() != 1.0) {
    scaled = arena_->allocate(hbytes, "clipped gradients");
    scale_bf16(scaled.as<bf16>(), g, float(clip_scale()), n, ctx.stream);
    g = scaled.as<bf16>();
  }
  bf16* out = nullptr;
  if (t.buffer >= 0) {
    pout = arena_->allocate(hbytes, "updated parameters");
    out = pout.as<bf16>();
  } else {
    require_home(t, params_.tier, Tier::Device, "parameters");
    out = params_.device(off);
  }
  adam_step(coeffs(), master_.device(off), m_.device(off), v_.device(off), g, out, n, ctx.stream);
  sync(ctx);
  if (pout) stage(opt_dev_, t.buffer, std::move(pout));
}

}  // namespace zinf::engine::cuda
