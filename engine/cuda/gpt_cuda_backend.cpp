#include "engine/cuda/gpt_cuda_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_arena.hpp"
#include "engine/cuda/gpt_cuda_model.hpp"
#include "engine/cuda/kernels.hpp"
#include "engine/cuda/pinned_host.hpp"
#include "engine/exec/gpt_program_index.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/optim/cpu_adam.hpp"

namespace zinf::engine::cuda {

using core::Data;
using core::Phase;
using core::Task;
using core::TaskKind;
using core::Tier;

namespace {

// A home that survives between steps: a flat array of a rank's shard space on the device (arena),
// in pinned host memory, or in a tensor of the NVMe store. read/write move ranges to and from host
// memory and return when done.
template <typename T>
struct Home {
  Tier tier = Tier::Device;
  DeviceBlock dev;
  PinnedArray<T> host;
  NvmeStore* store = nullptr;
  NvmeStore::TensorId id = 0;

  void init(DeviceArena& arena, Tier t, int64_t n, NvmeStore* s, const std::string& name) {
    tier = t;
    if (t == Tier::Nvme) {
      store = s;
      id = s->create(name, uint64_t(n) * sizeof(T));
    } else if (t == Tier::Host) {
      host = PinnedArray<T>(size_t(n));
    } else {
      dev = arena.allocate(uint64_t(std::max<int64_t>(n, 1)) * sizeof(T), name + " (device home)");
      ZINF_CUDA_CHECK(cudaMemset(dev.data(), 0, size_t(n) * sizeof(T)));
    }
  }
  T* device(int64_t off) const { return tier == Tier::Device ? dev.as<T>() + off : nullptr; }
  T* host_ptr(int64_t off) const { return tier == Tier::Host ? host.data() + off : nullptr; }

  void read(int64_t off, int64_t n, T* dst, cudaStream_t s) const {
    if (tier == Tier::Nvme) {
      store->read(id, uint64_t(off) * sizeof(T), dst, uint64_t(n) * sizeof(T)).wait_or_throw();
    } else if (tier == Tier::Host) {
      std::copy_n(host.data() + off, n, dst);
    } else {
      ZINF_CUDA_CHECK(cudaMemcpyAsync(dst, device(off), size_t(n) * sizeof(T), cudaMemcpyDeviceToHost, s));
      ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
    }
  }
  void write(int64_t off, int64_t n, const T* src, cudaStream_t s) {
    if (tier == Tier::Nvme) {
      store->write(id, uint64_t(off) * sizeof(T), src, uint64_t(n) * sizeof(T)).wait_or_throw();
    } else if (tier == Tier::Host) {
      std::copy_n(src, n, host.data() + off);
    } else {
      ZINF_CUDA_CHECK(cudaMemcpyAsync(device(off), src, size_t(n) * sizeof(T), cudaMemcpyHostToDevice, s));
      ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
    }
  }
  // NVMe transfers are submitted and their handle returned, so a sub-group's three states move together.
  IoHandle read_async(int64_t off, int64_t n, T* dst, cudaStream_t s) const {
    if (tier == Tier::Nvme) return store->read(id, uint64_t(off) * sizeof(T), dst, uint64_t(n) * sizeof(T));
    read(off, n, dst, s);
    return {};
  }
  IoHandle write_async(int64_t off, int64_t n, const T* src, cudaStream_t s) {
    if (tier == Tier::Nvme) return store->write(id, uint64_t(off) * sizeof(T), src, uint64_t(n) * sizeof(T));
    write(off, n, src, s);
    return {};
  }
};

void wait_all(std::initializer_list<IoHandle> handles) {
  for (const auto& h : handles)
    if (h.valid()) h.wait_or_throw();
}

using Key = std::pair<int32_t, int32_t>;

template <class M, class K>
typename M::mapped_type take_from(std::mutex& mu, M& map, const K& key, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = map.find(key);
  if (it == map.end()) throw std::logic_error(what + " is not staged");
  auto out = std::move(it->second);
  map.erase(it);
  return out;
}

uint64_t arena_budget(uint64_t asked) {
  if (asked) return asked;
  size_t free = 0, total = 0;
  ZINF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  // Leave room for cuBLAS workspaces, NCCL buffers and the CUDA context's own growth.
  const uint64_t reserve = std::max<uint64_t>(uint64_t(1) << 30, uint64_t(free) / 20);
  return free > reserve ? free - reserve : 0;
}

}  // namespace

// The Program read once (GptProgramIndex, shared with the CPU backend), then the task logic.
struct GptCudaBackend::Impl : GptProgramIndex {
  const core::Program& P;
  const core::Plan& plan;
  const core::ModelGraph& graph;
  int rank;
  Collectives& comm;
  GptCudaBackendOptions opt;
  int device;
  std::array<CudaContext, core::kLaneCount> lanes{};
  CudaContext main_ctx{};  // between steps, from the calling thread
  std::unique_ptr<DeviceArena> arena;
  std::unique_ptr<GptCudaModel> model;
  std::unique_ptr<NvmeStore> store;
  PinnedCache pinned;
  CpuAdam adam;
  AdamOptions adam_options;
  bool owner_based;
  int64_t space = 0;

  Home<bf16> params, grads;
  Home<float> master, m, v;


  // Transient data, keyed by what the Program names; the maps are guarded by mu.
  std::mutex mu;
  std::map<int32_t, PinnedLoan> host_param;          // by unit: NVMe read -> host
  std::map<int32_t, DeviceBlock> dev_param;          // by unit: host -> device
  std::map<int64_t, DeviceBlock> gathered;           // by buffer id: the gathered bf16 unit
  std::map<Key, DeviceBlock> grad_full;              // (unit, mb): fp32, padded to ranks x shard
  std::map<Key, DeviceBlock> grad_shard;             // (unit, mb): reduced fp32 shard, on the device
  std::map<Key, PinnedLoan> grad_shard_host;         // (unit, mb): reduced fp32 shard, on the host
  std::map<Key, PinnedLoan> grad_partial;            // (unit, mb): earlier micro-batches' bf16 sum from NVMe
  std::map<Key, PinnedLoan> ckpt_host;               // (checkpoint, mb): fp32
  std::map<Key, NvmeStore::TensorId> ckpt_nvme;
  std::map<int32_t, PinnedLoan> sg_master, sg_m, sg_v, sg_grad, sg_param;  // by sub-group, on the host
  std::vector<int> ckpt_saved;
  std::set<Key> ckpt_restored;

  std::vector<CudaActivations> acts;
  std::vector<double> losses;
  int64_t step = 0;
  double sumsq = 0;
  double clip_scale = 1.0;
  double global_norm = 0;

  Impl(const core::Program& p, const core::Plan& pl, const Gpt2& mdl, int r, Collectives& c, GptCudaBackendOptions o)
      : GptProgramIndex(p, mdl.graph()), P(p), plan(pl), graph(mdl.graph()), rank(r), comm(c), opt(std::move(o)), device(opt.device),
        adam(AdamOptions::from_run_config(opt.base.config), opt.base.adam_threads),
        adam_options(AdamOptions::from_run_config(opt.base.config)),
        owner_based(p.partitioning() == core::Partitioning::OwnerBased) {
    if (plan.zero_stage != 3)
      throw std::invalid_argument(fmt::format(
          "the CUDA training backend runs ZeRO stage 3 only (the run config asks for stage {}); use zero_stage: 3",
          plan.zero_stage));
    if (comm.size() != P.ranks() || comm.rank() != rank)
      throw std::invalid_argument(fmt::format("the Program is for {} ranks, but this process is rank {} of {}",
                                              P.ranks(), comm.rank(), comm.size()));
    // One stream and cuBLAS handle per lane: tasks of one lane running at once would share them.
    for (core::Lane lane : {core::Lane::NvmeRead, core::Lane::NvmeWrite})
      if (P.lane_slots(lane) > 1)
        throw std::invalid_argument(fmt::format(
            "the CUDA training backend runs one task per lane at a time, but the run config's aio.tasks_in_flight "
            "gives the {} lane {}; use aio.tasks_in_flight: 1",
            core::to_string(lane), P.lane_slots(lane)));
    ZINF_CUDA_CHECK(cudaSetDevice(device));
    for (CudaContext* ctx : all_contexts()) {
      ZINF_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
      ZINF_CUBLAS_CHECK(cublasCreate(&ctx->blas));
      ZINF_CUBLAS_CHECK(cublasSetStream(ctx->blas, ctx->stream));
    }
    arena = std::make_unique<DeviceArena>(arena_budget(opt.device_memory));
    model = std::make_unique<GptCudaModel>(graph, *arena);
    space = P.shard_space(rank);
    const bool any_nvme = plan.params == Tier::Nvme || plan.gradients == Tier::Nvme ||
                          plan.optimizer == Tier::Nvme || plan.checkpoints == Tier::Nvme;
    if (any_nvme) {
      if (opt.base.nvme_dir.empty())
        throw std::invalid_argument("the plan puts a state on NVMe: give an NVMe directory (--nvme-dir)");
      store = std::make_unique<NvmeStore>(NvmeStoreOptions::from_run_config(opt.base.config, opt.base.nvme_dir));
    }
    params.init(*arena, plan.params, space, store.get(), "params");
    grads.init(*arena, plan.gradients, space, store.get(), "grads");
    master.init(*arena, plan.optimizer, space, store.get(), "master");
    m.init(*arena, plan.optimizer, space, store.get(), "adam_m");
    v.init(*arena, plan.optimizer, space, store.get(), "adam_v");
    ckpt_saved.assign(size_t(P.micro_batches()), 0);
  }

  ~Impl() {
    cudaSetDevice(device);
    for (CudaContext* ctx : all_contexts()) {
      if (ctx->blas) cublasDestroy(ctx->blas);
      if (ctx->stream) cudaStreamDestroy(ctx->stream);
    }
  }

  std::vector<CudaContext*> all_contexts() {
    std::vector<CudaContext*> out{&main_ctx};
    for (auto& l : lanes) out.push_back(&l);
    return out;
  }


  const core::ParamUnit& unit(int32_t u) const { return P.units()[size_t(u)]; }
  int64_t mine_offset(const core::ParamUnit& u) const { return owner_based ? u.owner_offset : u.shard_offset; }
  int64_t mine_count(const core::ParamUnit& u) const { return owner_based ? u.numel : u.shard_numel; }
  bool holds(const core::ParamUnit& u) const { return !owner_based || u.owner == rank; }

  std::vector<float> unit_from_group(const core::ParamUnit& u, const std::vector<float>& g) const {
    if (u.tiles == 1) return g;
    const auto& pg = graph.params[size_t(u.group)];
    const int64_t rows = u.row_end - u.row_begin, cols = pg.cols;
    std::vector<float> out(size_t(u.numel));
    std::copy_n(g.data() + u.row_begin * cols, rows * cols, out.data());
    std::copy_n(g.data() + pg.rows * cols + u.row_begin, rows, out.data() + rows * cols);
    return out;
  }
  void unit_into_group(const core::ParamUnit& u, const float* src, std::vector<float>& g) const {
    if (u.tiles == 1) {
      std::copy_n(src, u.numel, g.data());
      return;
    }
    const auto& pg = graph.params[size_t(u.group)];
    const int64_t rows = u.row_end - u.row_begin, cols = pg.cols;
    std::copy_n(src, rows * cols, g.data() + u.row_begin * cols);
    std::copy_n(src + rows * cols, rows, g.data() + pg.rows * cols + u.row_begin);
  }

  void sync(const CudaContext& ctx) { ZINF_CUDA_CHECK(cudaStreamSynchronize(ctx.stream)); }

  // ---- parameters ------------------------------------------------------------------------------

  void fetch_task(const Task& t, const CudaContext& ctx) {
    const auto& u = unit(t.unit);
    const int64_t off = mine_offset(u), n = mine_count(u);
    const size_t bytes = size_t(n) * sizeof(bf16);
    switch (t.kind) {
      case TaskKind::NvmeRead: {
        PinnedLoan buf = pinned.acquire(bytes);
        params.read(off, n, buf.as<bf16>(), ctx.stream);
        std::lock_guard<std::mutex> lock(mu);
        host_param[t.unit] = std::move(buf);
        return;
      }
      case TaskKind::CopyH2D: {
        PinnedLoan staged;
        const bf16* src = params.host_ptr(off);
        if (plan.params == Tier::Nvme) {
          staged = take_from(mu, host_param, t.unit, "the NVMe read of " + u.name);
          src = staged.as<bf16>();
        }
        if (!src) throw std::logic_error(fmt::format("{}: parameters on the {} tier are not copied to the device",
                                                     P.label(t), core::to_string(plan.params)));
        DeviceBlock dst = arena->allocate(bytes, "parameter shard " + u.name);
        ZINF_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src, bytes, cudaMemcpyHostToDevice, ctx.stream));
        sync(ctx);
        std::lock_guard<std::mutex> lock(mu);
        dev_param[t.unit] = std::move(dst);
        return;
      }
      case TaskKind::AllGather: {
        DeviceBlock staged;
        const bf16* shard = params.device(off);
        if (plan.params != Tier::Device) {
          staged = take_from(mu, dev_param, t.unit, "the host-to-device copy of " + u.name);
          shard = staged.as<bf16>();
        }
        DeviceBlock full = arena->allocate(uint64_t(u.shard_numel) * uint64_t(P.ranks()) * sizeof(bf16),
                                           "gathered parameters " + u.name);
        comm.all_gather(shard, bytes, full.data(), u.name.c_str());
        publish_gathered(t, std::move(full));
        return;
      }
      case TaskKind::Broadcast: {
        DeviceBlock whole = arena->allocate(uint64_t(u.numel) * sizeof(bf16), "gathered parameters " + u.name);
        if (u.owner == rank) {
          DeviceBlock staged;
          const bf16* src = params.device(off);
          if (plan.params != Tier::Device) {
            staged = take_from(mu, dev_param, t.unit, "the host-to-device copy of " + u.name);
            src = staged.as<bf16>();
          }
          ZINF_CUDA_CHECK(cudaMemcpyAsync(whole.data(), src, size_t(u.numel) * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                          ctx.stream));
          sync(ctx);
        }
        comm.broadcast(whole.data(), size_t(u.numel) * sizeof(bf16), u.owner, u.name.c_str());
        publish_gathered(t, std::move(whole));
        return;
      }
      case TaskKind::Alloc:
        return;  // the owner-based gathered buffer is filled by the broadcast
      default:
        throw std::logic_error(fmt::format("no parameter fetch of kind {}", core::to_string(t.kind)));
    }
  }

  void publish_gathered(const Task& t, DeviceBlock block) {
    std::lock_guard<std::mutex> lock(mu);
    gathered[t.buffer] = std::move(block);  // the buffer the Program names (Task::buffer)
  }

  const bf16* gathered_for(const Task& t, int32_t u) {
    std::lock_guard<std::mutex> lock(mu);
    for (int32_t d : P.deps(t)) {
      const Task& dt = P.task(d);
      if (dt.unit != u || (dt.kind != TaskKind::AllGather && dt.kind != TaskKind::Broadcast)) continue;
      auto it = gathered.find(dt.buffer);
      if (it != gathered.end()) return it->second.as<bf16>();
    }
    throw std::logic_error(fmt::format("{}: parameters of {} are not gathered", P.label(t), unit(u).name));
  }

  void release(const Task& t) {
    auto frees = P.frees(t, rank);
    if (frees.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : frees) gathered.erase(e.buffer);
  }

  // ---- compute ---------------------------------------------------------------------------------

  void compute(const Task& t, const CudaContext& ctx) {
    const auto& op = graph.ops[size_t(t.op)];
    CudaActivations& a = acts[size_t(t.micro_batch)];
    if (t.kind == TaskKind::Backward && first_backward_of_mb[size_t(t.micro_batch)] == t.id) begin_backward(t, ctx);
    // Every unit of each group, or the one tile this task runs (the Program's Task::tile, of t.unit).
    const int32_t tiled_unit = t.tile >= 0 ? t.unit : -1;
    std::vector<int32_t> units;
    for (int32_t g : op.param_groups)
      units.push_back(tiled_unit >= 0 && unit(tiled_unit).group == g ? tiled_unit : group_units[size_t(g)][0]);
    std::vector<const bf16*> pbufs;
    for (int32_t u : units) pbufs.push_back(gathered_for(t, u));

    if (t.kind == TaskKind::Forward || t.kind == TaskKind::Recompute) {
      if (tiled_unit >= 0) {
        const auto& u = unit(tiled_unit);
        model->forward_tile(t.op, u.row_begin, u.row_end, pbufs[0], a, ctx);
      } else {
        model->forward(t.op, pbufs, a, ctx);
      }
      if (op.kind == core::OpKind::Loss) losses[size_t(t.micro_batch)] = a.loss;
      if (t.kind == TaskKind::Forward && last_forward_of_run.count(t.id)) drop_run(t.checkpoint, a);
    } else {
      std::vector<float*> gbufs;
      for (int32_t u : units) gbufs.push_back(grad_buffer(u, t.micro_batch, ctx));
      if (tiled_unit >= 0) {
        const auto& u = unit(tiled_unit);
        model->backward_tile(t.op, u.row_begin, u.row_end, pbufs[0], gbufs[0], a, ctx);
      } else {
        model->backward(t.op, pbufs, gbufs, a, ctx);
      }
    }
    release(t);
  }

  float* grad_buffer(int32_t u, int32_t mb, const CudaContext& ctx) {
    std::lock_guard<std::mutex> lock(mu);
    auto& g = grad_full[{u, mb}];
    if (!g) {
      const auto& un = unit(u);
      const uint64_t n = owner_based ? uint64_t(un.numel) : uint64_t(un.shard_numel) * uint64_t(P.ranks());
      g = arena->allocate(n * sizeof(float), "gradients of " + un.name);
      ZINF_CUDA_CHECK(cudaMemsetAsync(g.data(), 0, n * sizeof(float), ctx.stream));
    }
    return g.as<float>();
  }

  void drop_run(int32_t c, CudaActivations& a) {
    const int first = ckpt_first_block[size_t(c)];
    for (int b : ckpt_blocks[size_t(c)]) {
      a.drop_block(b);
      if (b != first) a.x[size_t(b)].release();
    }
  }

  void begin_backward(const Task& t, const CudaContext& ctx) {
    const int32_t mb = t.micro_batch;
    CudaActivations& a = acts[size_t(mb)];
    if (plan.checkpoints != Tier::Device) {  // the copies are done: a Program dependency (core::checkpoint_copy_waits)
      std::lock_guard<std::mutex> lock(mu);
      if (ckpt_saved[size_t(mb)] < ckpt_saves_per_mb[size_t(mb)])
        throw std::logic_error(fmt::format("{}: {} of the micro-batch's {} checkpoint copies are done; the Program must "
                                           "make its first backward depend on them",
                                           P.label(t), ckpt_saved[size_t(mb)], ckpt_saves_per_mb[size_t(mb)]));
      for (size_t c = 0; c < ckpt_first_block.size(); ++c)
        if (!ckpt_restored.count({int32_t(c), mb})) a.x[size_t(ckpt_first_block[c])].release();
    }
    a.zero_grads(ctx.stream);
  }

  // ---- activation checkpoints ------------------------------------------------------------------

  void checkpoint_task(const Task& t, const CudaContext& ctx) {
    CudaActivations& a = acts[size_t(t.micro_batch)];
    const Key key{t.checkpoint, t.micro_batch};
    DeviceTensor& x = a.x[size_t(ckpt_first_block[size_t(t.checkpoint)])];
    const int64_t n = graph.tokens * graph.spec.hidden;
    const size_t bytes = size_t(n) * sizeof(float);
    switch (t.kind) {
      case TaskKind::CopyD2H: {
        if (x.n != n) throw std::logic_error(fmt::format("{}: the checkpoint is not on the device", P.label(t)));
        PinnedLoan host = pinned.acquire(bytes);
        ZINF_CUDA_CHECK(cudaMemcpyAsync(host.as<float>(), x.data(), bytes, cudaMemcpyDeviceToHost, ctx.stream));
        sync(ctx);
        std::lock_guard<std::mutex> lock(mu);
        ckpt_host[key] = std::move(host);
        ++ckpt_saved[size_t(t.micro_batch)];
        return;
      }
      case TaskKind::NvmeWrite: {
        PinnedLoan host = take_from(mu, ckpt_host, key, P.label(t) + ": the checkpoint");
        NvmeStore::TensorId id;
        {
          std::lock_guard<std::mutex> lock(mu);
          auto it = ckpt_nvme.find(key);
          if (it == ckpt_nvme.end())
            it = ckpt_nvme.emplace(key, store->create(fmt::format("ckpt_{}_mb{}", t.checkpoint, t.micro_batch), bytes)).first;
          id = it->second;
        }
        store->write(id, 0, host.as<float>(), bytes).wait_or_throw();
        return;
      }
      case TaskKind::NvmeRead: {
        PinnedLoan host = pinned.acquire(bytes);
        NvmeStore::TensorId id;
        {
          std::lock_guard<std::mutex> lock(mu);
          id = ckpt_nvme.at(key);
        }
        store->read(id, 0, host.as<float>(), bytes).wait_or_throw();
        std::lock_guard<std::mutex> lock(mu);
        ckpt_host[key] = std::move(host);
        return;
      }
      case TaskKind::CopyH2D: {
        PinnedLoan host = take_from(mu, ckpt_host, key, P.label(t) + ": the checkpoint");
        if (x.n != n) {
          x.block = arena->allocate(bytes, "activation checkpoint");
          x.n = n;
        }
        ZINF_CUDA_CHECK(cudaMemcpyAsync(x.data(), host.as<float>(), bytes, cudaMemcpyHostToDevice, ctx.stream));
        sync(ctx);
        std::lock_guard<std::mutex> lock(mu);
        ckpt_restored.insert(key);
        return;
      }
      default:
        throw std::logic_error(fmt::format("no checkpoint transfer of kind {}", core::to_string(t.kind)));
    }
  }

  // ---- gradients -------------------------------------------------------------------------------

  float grad_scale() const { return 1.0f / float(P.ranks() * P.micro_batches()); }

  // As the CPU backend: the reduced micro-batch gradient added into the stored bf16 shard.
  void accumulate_host(bf16* home, const bf16* partial, const float* add, int64_t n, bool first, bool last) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float prev = first ? 0.0f : engine::to_float(partial[i]);
      home[i] = engine::to_bf16(prev + add[i]);
      if (last) {
        const double g = engine::to_float(home[i]);
        ss += g * g;
      }
    }
    if (last) {
      std::lock_guard<std::mutex> lock(mu);
      sumsq += ss;
    }
  }

  void accumulate_device(bf16* home, const float* add, int64_t n, bool first, bool last, const CudaContext& ctx) {
    DeviceBlock ss;
    if (last) {
      ss = arena->allocate(sizeof(double), "gradient norm");
      ZINF_CUDA_CHECK(cudaMemsetAsync(ss.data(), 0, sizeof(double), ctx.stream));
    }
    accumulate_grad(home, home, add, n, first, last ? ss.as<double>() : nullptr, ctx.stream);
    double part = 0;
    if (last) ZINF_CUDA_CHECK(cudaMemcpyAsync(&part, ss.data(), sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
    sync(ctx);
    if (last) {
      std::lock_guard<std::mutex> lock(mu);
      sumsq += part;
    }
  }

  void grad_task(const Task& t, const CudaContext& ctx) {
    const auto& u = unit(t.unit);
    const Key key{t.unit, t.micro_batch};
    const int64_t off = mine_offset(u), n = mine_count(u);
    const bool first = t.micro_batch == 0, last = t.micro_batch == P.micro_batches() - 1;
    switch (t.kind) {
      case TaskKind::ReduceScatter:
      case TaskKind::Reduce: {
        DeviceBlock full = take_from(mu, grad_full, key, P.label(t) + ": the gradient");
        DeviceBlock shard = arena->allocate(uint64_t(n) * sizeof(float), "reduced gradients of " + u.name);
        if (t.kind == TaskKind::ReduceScatter)
          comm.reduce_scatter(full.as<float>(), shard.as<float>(), size_t(n), u.name.c_str());
        else
          comm.reduce(full.as<float>(), shard.as<float>(), size_t(n), u.owner, u.name.c_str());
        full.reset();
        if (!holds(u)) return;
        scale(shard.as<float>(), grad_scale(), n, ctx.stream);
        if (plan.gradients == Tier::Device) {
          accumulate_device(grads.device(off), shard.as<float>(), n, first, last, ctx);
        } else {
          sync(ctx);
          std::lock_guard<std::mutex> lock(mu);
          grad_shard[key] = std::move(shard);
        }
        return;
      }
      case TaskKind::CopyD2H: {
        PinnedLoan host = shard_to_host(t, key, n, ctx);
        if (plan.gradients == Tier::Host) {
          bf16* home = grads.host_ptr(off);
          accumulate_host(home, home, host.as<float>(), n, first, last);
        } else {
          std::lock_guard<std::mutex> lock(mu);
          grad_shard_host[key] = std::move(host);  // on its way to NVMe
        }
        return;
      }
      case TaskKind::NvmeRead: {
        PinnedLoan partial = pinned.acquire(size_t(n) * sizeof(bf16));
        grads.read(off, n, partial.as<bf16>(), ctx.stream);
        std::lock_guard<std::mutex> lock(mu);
        grad_partial[key] = std::move(partial);
        return;
      }
      case TaskKind::NvmeWrite: {
        PinnedLoan shard;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (auto it = grad_shard_host.find(key); it != grad_shard_host.end()) {
            shard = std::move(it->second);
            grad_shard_host.erase(it);
          }
        }
        if (!shard) shard = shard_to_host(t, key, n, ctx);  // no copy task before the write
        PinnedLoan partial;
        if (!first) partial = take_from(mu, grad_partial, key, P.label(t) + ": the partial gradient");
        PinnedLoan out = pinned.acquire(size_t(n) * sizeof(bf16));
        accumulate_host(out.as<bf16>(), partial ? partial.as<bf16>() : nullptr, shard.as<float>(), n, first, last);
        grads.write(off, n, out.as<bf16>(), ctx.stream);
        return;
      }
      case TaskKind::AllReduce:
        throw std::logic_error("gradients all-reduced whole need ZeRO stage 0-1, which this backend does not run");
      case TaskKind::Free: {
        std::lock_guard<std::mutex> lock(mu);
        grad_full.erase(key);
        return;
      }
      default:
        throw std::logic_error(fmt::format("no gradient transfer of kind {}", core::to_string(t.kind)));
    }
  }

  PinnedLoan shard_to_host(const Task& t, const Key& key, int64_t n, const CudaContext& ctx) {
    DeviceBlock shard = take_from(mu, grad_shard, key, P.label(t) + ": the reduced gradient");
    PinnedLoan host = pinned.acquire(size_t(n) * sizeof(float));
    ZINF_CUDA_CHECK(cudaMemcpyAsync(host.as<float>(), shard.data(), size_t(n) * sizeof(float), cudaMemcpyDeviceToHost,
                                    ctx.stream));
    sync(ctx);
    return host;
  }

  // ---- optimizer -------------------------------------------------------------------------------

  void optimizer_task(const Task& t, const CudaContext& ctx) {
    const int32_t sg = t.sub_group;
    const int64_t off = t.sg_offset, n = t.sg_count;
    const size_t fbytes = size_t(n) * sizeof(float), hbytes = size_t(n) * sizeof(bf16);
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeRead) {
      PinnedLoan a = pinned.acquire(fbytes), b = pinned.acquire(fbytes), c = pinned.acquire(fbytes);
      wait_all({master.read_async(off, n, a.as<float>(), ctx.stream), m.read_async(off, n, b.as<float>(), ctx.stream),
                v.read_async(off, n, c.as<float>(), ctx.stream)});
      std::lock_guard<std::mutex> lock(mu);
      sg_master[sg] = std::move(a);
      sg_m[sg] = std::move(b);
      sg_v[sg] = std::move(c);
      return;
    }
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeWrite) {
      const std::string what = P.label(t) + ": optimizer states";
      PinnedLoan a = take_from(mu, sg_master, sg, what), b = take_from(mu, sg_m, sg, what), c = take_from(mu, sg_v, sg, what);
      wait_all({master.write_async(off, n, a.as<float>(), ctx.stream), m.write_async(off, n, b.as<float>(), ctx.stream),
                v.write_async(off, n, c.as<float>(), ctx.stream)});
      return;
    }
    if (t.data == Data::Grad) {  // gradients to where the optimizer runs
      if (t.kind != TaskKind::NvmeRead && plan.gradients == Tier::Nvme) return;  // staged by the NVMe read
      PinnedLoan g = pinned.acquire(hbytes);
      grads.read(off, n, g.as<bf16>(), ctx.stream);
      std::lock_guard<std::mutex> lock(mu);
      sg_grad[sg] = std::move(g);
      return;
    }
    if (t.kind == TaskKind::OptimizerStep) {
      if (plan.optimizer == Tier::Device) adam_device(t, ctx);
      else adam_host(t, ctx);
      return;
    }
    if (t.data == Data::Param) {  // updated parameters back to their tier
      PinnedLoan p;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = sg_param.find(sg);
        if (it == sg_param.end()) throw std::logic_error(fmt::format("{}: no updated parameters staged", P.label(t)));
        if (t.kind == TaskKind::CopyD2H && plan.params == Tier::Nvme) return;  // staged for the NVMe write
        p = std::move(it->second);
        sg_param.erase(it);
      }
      params.write(off, n, p.as<bf16>(), ctx.stream);
      return;
    }
    throw std::logic_error(fmt::format("{}: no optimizer task of this kind", P.label(t)));
  }

  PinnedLoan take_optional(std::map<int32_t, PinnedLoan>& from, int32_t key) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = from.find(key);
    if (it == from.end()) return {};
    PinnedLoan out = std::move(it->second);
    from.erase(it);
    return out;
  }

  // CPU Adam on states in pinned host memory or staged from NVMe, as the CPU backend.
  void adam_host(const Task& t, const CudaContext& ctx) {
    const int32_t sg = t.sub_group;
    const int64_t off = t.sg_offset, n = t.sg_count;
    float *pm, *pmm, *pv;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (plan.optimizer == Tier::Nvme) {
        pm = sg_master.at(sg).as<float>();
        pmm = sg_m.at(sg).as<float>();
        pv = sg_v.at(sg).as<float>();
      } else {
        pm = master.host_ptr(off);
        pmm = m.host_ptr(off);
        pv = v.host_ptr(off);
      }
    }
    PinnedLoan gstage = take_optional(sg_grad, sg);
    if (!gstage && plan.gradients != Tier::Host) {
      gstage = pinned.acquire(size_t(n) * sizeof(bf16));
      grads.read(off, n, gstage.as<bf16>(), ctx.stream);
    }
    const bf16* g = gstage ? gstage.as<bf16>() : grads.host_ptr(off);
    std::vector<bf16> scaled;
    if (clip_scale != 1.0) {
      scaled.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) scaled[size_t(i)] = engine::to_bf16(engine::to_float(g[i]) * float(clip_scale));
      g = scaled.data();
    }
    if (plan.params == Tier::Host) {
      adam.step(step, size_t(n), pm, pmm, pv, g, params.host_ptr(off));
    } else {
      PinnedLoan out = pinned.acquire(size_t(n) * sizeof(bf16));
      adam.step(step, size_t(n), pm, pmm, pv, g, out.as<bf16>());
      std::lock_guard<std::mutex> lock(mu);
      sg_param[sg] = std::move(out);
    }
  }

  AdamCoeffs coeffs() const {
    const AdamOptions& o = adam_options;
    const double bc1 = 1.0 - std::pow(o.beta1, double(step)), bc2 = 1.0 - std::pow(o.beta2, double(step));
    return {float(o.beta1),       float(1.0 - o.beta1),         float(o.beta2),
            float(1.0 - o.beta2), float(o.lr / bc1),            float(1.0 / std::sqrt(bc2)),
            float(o.eps),         o.decoupled_weight_decay ? float(o.lr * o.weight_decay) : 0.0f,
            o.decoupled_weight_decay ? 0.0f : float(o.weight_decay)};
  }

  // Adam on the device: states in the arena, the bf16 parameters written in the same pass.
  void adam_device(const Task& t, const CudaContext& ctx) {
    const int32_t sg = t.sub_group;
    const int64_t off = t.sg_offset, n = t.sg_count;
    const size_t hbytes = size_t(n) * sizeof(bf16);
    DeviceBlock gdev, scaled, pout;
    const bf16* g = grads.device(off);
    if (PinnedLoan staged = take_optional(sg_grad, sg); staged || !g) {
      if (!staged) {
        staged = pinned.acquire(hbytes);
        grads.read(off, n, staged.as<bf16>(), ctx.stream);
      }
      gdev = arena->allocate(hbytes, "gradients for the device Adam");
      ZINF_CUDA_CHECK(cudaMemcpyAsync(gdev.data(), staged.as<bf16>(), hbytes, cudaMemcpyHostToDevice, ctx.stream));
      sync(ctx);
      g = gdev.as<bf16>();
    }
    if (clip_scale != 1.0) {
      scaled = arena->allocate(hbytes, "clipped gradients");
      scale_bf16(scaled.as<bf16>(), g, float(clip_scale), n, ctx.stream);
      g = scaled.as<bf16>();
    }
    bf16* out = params.device(off);
    if (!out) {
      pout = arena->allocate(hbytes, "updated parameters");
      out = pout.as<bf16>();
    }
    adam_step(coeffs(), master.device(off), m.device(off), v.device(off), g, out, n, ctx.stream);
    if (pout) {
      PinnedLoan host = pinned.acquire(hbytes);
      ZINF_CUDA_CHECK(cudaMemcpyAsync(host.as<bf16>(), out, hbytes, cudaMemcpyDeviceToHost, ctx.stream));
      sync(ctx);
      std::lock_guard<std::mutex> lock(mu);
      sg_param[sg] = std::move(host);
      return;
    }
    sync(ctx);
  }

  void norm_task(const Task& t) {
    if (t.kind == TaskKind::GradNorm) return;  // the squares were summed as each shard became final
    double s = sumsq;
    comm.all_reduce(&s, 1, "gradient norm");
    global_norm = std::sqrt(s);
    const double clip = opt.base.config.grad_clip;
    clip_scale = clip > 0 && global_norm > clip ? clip / (global_norm + 1e-6) : 1.0;
  }
};

GptCudaBackend::GptCudaBackend(const core::Program& program, const core::Plan& plan, const Gpt2& model, int rank,
                               Collectives& comm, GptCudaBackendOptions options)
    : impl_(std::make_unique<Impl>(program, plan, model, rank, comm, std::move(options))) {}

GptCudaBackend::~GptCudaBackend() = default;

uint64_t GptCudaBackend::device_budget() const { return impl_->arena->allocator().capacity(); }
int64_t GptCudaBackend::device_peak_bytes() const { return int64_t(impl_->arena->allocator().peak()); }
void GptCudaBackend::reset_device_peak() { impl_->arena->allocator().reset_peak(); }

void GptCudaBackend::load_state(const FullState& full) {
  Impl& I = *impl_;
  ZINF_CUDA_CHECK(cudaSetDevice(I.device));
  const size_t groups = I.graph.params.size();
  auto check = [&](const Gpt2Params& p, const char* what, bool optional) {
    if (optional && p.empty()) return;
    if (p.size() != groups)
      throw std::invalid_argument(fmt::format("{}: {} parameter groups given, the model has {}", what, p.size(), groups));
    for (size_t g = 0; g < groups; ++g)
      if (int64_t(p[g].size()) != I.graph.params[g].numel)
        throw std::invalid_argument(fmt::format("{}: group {} has {} elements, the model's has {}", what,
                                                I.graph.params[g].name, p[g].size(), I.graph.params[g].numel));
  };
  check(full.master, "master weights", false);
  check(full.m, "Adam m", true);
  check(full.v, "Adam v", true);
  const int64_t n = I.space;
  std::vector<bf16> params(size_t(n), bf16{});
  std::vector<float> master(size_t(n), 0.0f), m(size_t(n), 0.0f), v(size_t(n), 0.0f);
  for (const auto& u : I.P.units()) {
    if (!I.holds(u)) continue;
    const int64_t begin = I.owner_based ? 0 : int64_t(I.rank) * u.shard_numel;
    const int64_t off = I.mine_offset(u), cnt = I.mine_count(u);
    auto scatter = [&](const Gpt2Params& src, std::vector<float>& dst) {
      if (src.empty()) return;
      std::vector<float> flat = I.unit_from_group(u, src[size_t(u.group)]);
      for (int64_t i = 0; i < cnt; ++i) dst[size_t(off + i)] = begin + i < u.numel ? flat[size_t(begin + i)] : 0.0f;
    };
    scatter(full.master, master);
    scatter(full.m, m);
    scatter(full.v, v);
  }
  for (int64_t i = 0; i < n; ++i) params[size_t(i)] = engine::to_bf16(master[size_t(i)]);
  cudaStream_t s = I.main_ctx.stream;
  I.params.write(0, n, params.data(), s);
  I.master.write(0, n, master.data(), s);
  I.m.write(0, n, m.data(), s);
  I.v.write(0, n, v.data(), s);
}

GptCudaBackend::FullState GptCudaBackend::gather_state() {
  Impl& I = *impl_;
  ZINF_CUDA_CHECK(cudaSetDevice(I.device));
  FullState out;
  auto gather = [&](const Home<float>& home, Gpt2Params& dst) {
    std::vector<float> mine(size_t(I.space));
    home.read(0, I.space, mine.data(), I.main_ctx.stream);
    for (const auto& pg : I.graph.params) dst.emplace_back(size_t(pg.numel), 0.0f);
    for (const auto& u : I.P.units()) {
      std::vector<float> flat;
      if (I.owner_based) {
        flat.assign(size_t(u.numel), 0.0f);
        if (u.owner == I.rank) std::copy_n(mine.data() + u.owner_offset, u.numel, flat.data());
        I.comm.broadcast(flat.data(), flat.size() * sizeof(float), u.owner, u.name.c_str());
      } else {
        flat.assign(size_t(u.shard_numel) * size_t(I.P.ranks()), 0.0f);
        I.comm.all_gather(mine.data() + u.shard_offset, size_t(u.shard_numel) * sizeof(float), flat.data(),
                          u.name.c_str());
      }
      I.unit_into_group(u, flat.data(), dst[size_t(u.group)]);
    }
  };
  gather(I.master, out.master);
  gather(I.m, out.m);
  gather(I.v, out.v);
  return out;
}

void GptCudaBackend::begin_step(int64_t step, std::vector<Batch> batches) {
  Impl& I = *impl_;
  ZINF_CUDA_CHECK(cudaSetDevice(I.device));
  if (int(batches.size()) != I.P.micro_batches())
    throw std::invalid_argument(fmt::format("{} micro-batches given, the Program has {}", batches.size(),
                                            I.P.micro_batches()));
  I.step = step;
  I.sumsq = 0;
  I.clip_scale = 1.0;
  I.global_norm = 0;
  if (I.acts.size() != batches.size()) {
    I.acts.clear();
    for (size_t i = 0; i < batches.size(); ++i) I.acts.push_back(I.model->make_activations());
  }
  I.losses.assign(batches.size(), 0.0);
  std::fill(I.ckpt_saved.begin(), I.ckpt_saved.end(), 0);
  I.ckpt_restored.clear();
  for (size_t i = 0; i < batches.size(); ++i)
    I.model->set_batch(I.acts[i], batches[i].inputs, batches[i].targets, I.main_ctx);
}

void GptCudaBackend::run(const Task& t) {
  Impl& I = *impl_;
  ZINF_CUDA_CHECK(cudaSetDevice(I.device));  // the current device is per thread
  const CudaContext& ctx = I.lanes[size_t(t.lane)];
  if (core::is_compute(t.kind)) return I.compute(t, ctx);
  switch (t.data) {
    case Data::Param:
      if (t.phase == Phase::Optimizer) return I.optimizer_task(t, ctx);
      I.fetch_task(t, ctx);
      return I.release(t);
    case Data::Checkpoint: return I.checkpoint_task(t, ctx);
    case Data::Grad:
      if (t.phase == Phase::Optimizer) return I.optimizer_task(t, ctx);
      return I.grad_task(t, ctx);
    case Data::OptimizerState: return I.optimizer_task(t, ctx);
    case Data::Scalar:
      I.norm_task(t);
      grad_norm_ = I.global_norm;
      return;
    default:
      if (t.kind == TaskKind::Alloc || t.kind == TaskKind::Free) return I.release(t);
      throw std::logic_error(fmt::format("{}: no handler for this task", I.P.label(t)));
  }
}

std::vector<core::TaskWait> GptCudaBackend::waits() const { return core::checkpoint_copy_waits(impl_->P); }

double GptCudaBackend::loss() const {
  double s = 0;
  for (double l : impl_->losses) s += l;
  return impl_->losses.empty() ? 0.0 : s / double(impl_->losses.size());
}

}  // namespace zinf::engine::cuda
