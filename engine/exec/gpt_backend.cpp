#include "engine/exec/gpt_backend.hpp"

#include "engine/cpu/convert.hpp"
#include "engine/exec/activation_offload.hpp"
#include "engine/exec/gpt_program_index.hpp"
#include "engine/exec/home.hpp"

#include "engine/memory/device_arena.hpp"
#include "engine/memory/staging_cache.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

namespace zinf::engine {

using core::Data;
using core::Phase;
using core::Task;
using core::TaskKind;
using core::Tier;


// The Program read once (GptProgramIndex, shared with the CUDA backend), then the task logic.
struct GptCpuBackend::Impl : GptProgramIndex {
  const core::Program& P;
  const core::Plan& plan;
  const Gpt2& model;
  const core::ModelGraph& graph;
  int rank;
  Collectives& comm;
  GptBackendOptions opt;
  std::unique_ptr<NvmeStore> store;
  CpuAdam adam;
  bool owner_based;
  int64_t space = 0;   // elements of this rank's shard space

  // Every device buffer below is drawn from (or, for homes, charged to) this rank's device arena,
  // whose budget is the Program's: it is declared first so that it outlives them.
  DeviceArena arena;
  template <typename T>
  DeviceAllocator<T> device() {
    return DeviceAllocator<T>(&arena);
  }

  Home<bf16> params, grads;
  Home<float> master, m, v;

  // Backward task id -> block: the last backward task of that block in its micro-batch (lanes run
  // in id order), after which the block's intermediates and gradients are no longer needed.
  std::map<int32_t, int> last_backward_of_block;

  // Transient data, keyed by what the Program names. Guarded by mu; the vectors themselves are
  // touched only by the task that the Program orders after their producer.
  std::mutex mu;
  // Keyed by the task that staged them (two fetches of one unit may be in flight together: its
  // forward and backward fetches when gathered copies are not kept between them).
  std::map<int32_t, Staging<bf16>> host_param;               // by NVMe read task: on the host
  std::map<int32_t, DeviceVector<bf16>> dev_param;           // by host-to-device copy task: on the device
  std::map<int64_t, DeviceVector<float>> gathered;           // by buffer id of the gathered unit
  std::map<std::pair<int32_t, int32_t>, DeviceVector<float>> grad_full;   // (unit, mb)
  std::map<std::pair<int32_t, int32_t>, DeviceVector<float>> grad_shard;  // (unit, mb): reduced, on the device
  std::map<std::pair<int32_t, int32_t>, Staging<float>> grad_host;        // (unit, mb): copied to the host for NVMe
  std::map<std::pair<int32_t, int32_t>, Staging<bf16>> grad_partial;   // (unit, mb): earlier mbs' sum from NVMe
  std::map<std::pair<int32_t, int32_t>, Staging<float>> ckpt_host;     // (checkpoint, mb)
  std::map<std::pair<int32_t, int32_t>, NvmeStore::TensorId> ckpt_nvme;
  std::map<int32_t, Staging<float>> sg_master, sg_m, sg_v;             // by sub-group
  std::map<int32_t, Staging<bf16>> sg_grad, sg_param;
  std::vector<int> ckpt_saved;                                             // per mb, CopyD2H done
  std::set<std::pair<int32_t, int32_t>> ckpt_restored;                      // (checkpoint, mb) back on the device
  // (checkpoint, mb) copied off the device, and whose run's forward is done: an offloaded
  // checkpoint leaves the device when both are (the Program frees it after its copy; its run's
  // forward, which reads it too, counts it among that run's activations).
  std::set<std::pair<int32_t, int32_t>> ckpt_copied, ckpt_forward_done;

  std::vector<Gpt2Activations> acts;
  std::unique_ptr<ActivationOffloader> offloader;  // the Program's Data::Activation transfers
  std::vector<double> losses;
  int64_t step = 0;
  double sumsq = 0;     // this rank's part of the squared gradient norm
  std::atomic<int64_t> nonfinite{0};  // master weights this step's updates left NaN or infinite
  double clip_scale = 1.0;
  double global_norm = 0;

  Impl(const core::Program& p, const core::Plan& pl, const Gpt2& mdl, int r, Collectives& c, GptBackendOptions o)
      : GptProgramIndex(p, mdl.graph()), P(p), plan(pl), model(mdl), graph(mdl.graph()), rank(r), comm(c), opt(std::move(o)),
        adam(AdamOptions::from_run_config(opt.config), opt.adam_threads),
        owner_based(p.partitioning() == core::Partitioning::OwnerBased),
        arena(core::at(p.budget(), Tier::Device)) {
    if (plan.zero_stage != 3)
      throw std::invalid_argument(fmt::format(
          "the CPU training backend runs ZeRO stage 3 only (the run config asks for stage {}); use zero_stage: 3",
          plan.zero_stage));
    if (comm.size() != P.ranks() || comm.rank() != rank)
      throw std::invalid_argument(fmt::format("the Program is for {} ranks, but this process is rank {} of {}",
                                              P.ranks(), comm.rank(), comm.size()));
    space = P.shard_space(rank);
    const bool any_nvme = plan.params == Tier::Nvme || plan.gradients == Tier::Nvme ||
                          plan.optimizer == Tier::Nvme || plan.checkpoints == Tier::Nvme ||
                          std::any_of(P.activations().begin(), P.activations().end(),
                                      [](const core::ActivationSegment& s) { return s.tier == Tier::Nvme; });
    if (any_nvme) {
      if (opt.nvme_dir.empty())
        throw std::invalid_argument("the plan puts a state on NVMe: give an NVMe directory (--nvme-dir)");
      store = std::make_unique<NvmeStore>(NvmeStoreOptions::from_run_config(opt.config, opt.nvme_dir));
    }
    offloader = std::make_unique<ActivationOffloader>(P, graph, store.get());
    params.init(plan.params, space, store.get(), arena, "params");
    grads.init(plan.gradients, space, store.get(), arena, "grads");
    master.init(plan.optimizer, space, store.get(), arena, "master");
    m.init(plan.optimizer, space, store.get(), arena, "adam_m");
    v.init(plan.optimizer, space, store.get(), arena, "adam_v");

    ckpt_saved.assign(size_t(P.micro_batches()), 0);
    std::map<std::pair<int32_t, int>, int32_t> last_bwd;  // (micro-batch, block) -> task
    for (const auto& t : P.tasks())
      if (t.kind == TaskKind::Backward && graph.ops[size_t(t.op)].block >= 0) {
        auto& id = last_bwd[{t.micro_batch, graph.ops[size_t(t.op)].block}];
        id = std::max(id, t.id);
      }
    for (const auto& [key, id] : last_bwd) last_backward_of_block[id] = key.second;
  }

  const core::ParamUnit& unit(int32_t u) const { return P.units()[size_t(u)]; }
  // Where this rank's part of unit u lies in its shard space, and how many elements it holds.
  int64_t mine_offset(const core::ParamUnit& u) const { return owner_based ? u.owner_offset : u.shard_offset; }
  int64_t mine_count(const core::ParamUnit& u) const { return owner_based ? u.numel : u.shard_numel; }
  bool holds(const core::ParamUnit& u) const { return !owner_based || u.owner == rank; }

  // The unit's flat tensor (weight rows then their biases, or the whole group) from a group tensor.
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

  // ---- parameters ---------------------------------------------------------------------------

  // What the stage of kind `kind` upstream of fetch task t (same unit, through its dependencies)
  // staged in `from`.
  template <typename Buffer>
  Buffer take(std::map<int32_t, Buffer>& from, const Task& t, TaskKind kind, const char* what) {
    std::vector<int32_t> frontier(P.deps(t).begin(), P.deps(t).end());
    for (int depth = 0; depth < 3 && !frontier.empty(); ++depth) {
      std::vector<int32_t> next;
      for (int32_t d : frontier) {
        const Task& dt = P.task(d);
        if (dt.unit != t.unit) continue;
        if (dt.kind == kind) {
          std::lock_guard<std::mutex> lock(mu);
          auto it = from.find(d);
          if (it == from.end()) break;
          auto out = std::move(it->second);
          from.erase(it);
          return out;
        }
        next.insert(next.end(), P.deps(dt).begin(), P.deps(dt).end());
      }
      frontier = std::move(next);
    }
    throw std::logic_error(fmt::format("{}: {} of unit {} is not staged", P.label(t), what, unit(t.unit).name));
  }

  void fetch_task(const Task& t) {
    const auto& u = unit(t.unit);
    const int64_t off = mine_offset(u), n = mine_count(u);
    switch (t.kind) {
      case TaskKind::NvmeRead: {
        Staging<bf16> buf = staging<bf16>(n);
        params.read(off, n, buf.data());
        std::lock_guard<std::mutex> lock(mu);
        host_param[t.id] = std::move(buf);
        return;
      }
      case TaskKind::CopyH2D: {
        const bf16* src = params.mem.data() + off;
        Staging<bf16> host;
        if (plan.params == Tier::Nvme) {
          host = take(host_param, t, TaskKind::NvmeRead, "the NVMe read");
          src = host.data();
        }
        if (owner_based) {  // the owner's whole unit, straight into the gathered buffer it broadcasts
          std::memcpy(cpu::upper_half_as_bf16(gathered_data(t), u.numel), src, size_t(n) * sizeof(bf16));
          return;
        }
        DeviceVector<bf16> buf(size_t(n), device<bf16>());
        std::copy_n(src, n, buf.data());
        std::lock_guard<std::mutex> lock(mu);
        dev_param.insert_or_assign(t.id, std::move(buf));
        return;
      }
      case TaskKind::AllGather: {
        DeviceVector<bf16> held;
        const bf16* shard = params.mem.data() + off;
        if (plan.params != Tier::Device) {
          held = take(dev_param, t, TaskKind::CopyH2D, "the host-to-device copy");
          shard = held.data();
        }
        // The ranks' bf16 shards land in the upper half of the fp32 working copy, which is then
        // widened in place: the device holds the working size the Program counts, no bf16 copy.
        const int64_t padded = u.shard_numel * P.ranks();
        DeviceVector<float> full(size_t(padded), device<float>());
        comm.all_gather(shard, size_t(u.shard_numel) * sizeof(bf16), cpu::upper_half_as_bf16(full.data(), padded),
                        u.name.c_str());
        cpu::widen_upper_half_in_place(full.data(), padded);
        std::lock_guard<std::mutex> lock(mu);
        gathered.insert_or_assign(t.buffer, std::move(full));
        return;
      }
      case TaskKind::Broadcast: {
        float* whole = gathered_data(t);
        bf16* landing = cpu::upper_half_as_bf16(whole, u.numel);
        if (u.owner == rank && plan.params == Tier::Device)
          std::memcpy(landing, params.mem.data() + off, size_t(u.numel) * sizeof(bf16));
        comm.broadcast(landing, size_t(u.numel) * sizeof(bf16), u.owner, u.name.c_str());
        cpu::widen_upper_half_in_place(whole, u.numel);
        return;
      }
      case TaskKind::Alloc: {  // the owner-based gathered buffer, filled by the broadcast
        DeviceVector<float> whole(size_t(u.numel), device<float>());
        std::lock_guard<std::mutex> lock(mu);
        gathered.insert_or_assign(t.buffer, std::move(whole));
        return;
      }
      default:
        throw std::logic_error(fmt::format("no parameter fetch of kind {}", core::to_string(t.kind)));
    }
  }

  // The gathered buffer an owner-based fetch task fills (allocated by its Alloc task): the
  // Program names it (Task::buffer).
  float* gathered_data(const Task& t) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = gathered.find(t.buffer);
    if (it == gathered.end())
      throw std::logic_error(fmt::format("{}: its gathered buffer {} is not allocated", P.label(t), t.buffer));
    return it->second.data();
  }

  // The gathered fp32 copy of unit u that compute task t depends on.
  const DeviceVector<float>& gathered_for(const Task& t, int32_t u) {
    std::lock_guard<std::mutex> lock(mu);
    for (int32_t d : P.deps(t)) {
      const Task& dt = P.task(d);
      if (dt.unit != u || (dt.kind != TaskKind::AllGather && dt.kind != TaskKind::Broadcast)) continue;
      auto it = gathered.find(dt.buffer);
      if (it != gathered.end()) return it->second;
    }
    throw std::logic_error(fmt::format("{}: parameters of {} are not gathered", P.label(t), unit(u).name));
  }

  // Frees named by the task release the gathered copies they name.
  void release(const Task& t) {
    auto frees = P.frees(t, rank);
    if (frees.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& e : frees) gathered.erase(e.buffer);
  }

  // ---- compute ------------------------------------------------------------------------------

  void compute(const Task& t) {
    const auto& op = graph.ops[size_t(t.op)];
    Gpt2Activations& a = acts[size_t(t.micro_batch)];
    if (t.kind == TaskKind::Backward && first_backward_of_mb[size_t(t.micro_batch)] == t.id) begin_backward(t);

    // The operator's parameters: every unit of each group, or the one tile this task runs (the
    // Program's Task::tile, of unit t.unit).
    const int32_t tiled_unit = t.tile >= 0 ? t.unit : -1;
    std::vector<ParamBuf> pbufs;
    std::vector<int32_t> units;
    for (int32_t g : op.param_groups)
      units.push_back(tiled_unit >= 0 && unit(tiled_unit).group == g ? tiled_unit : group_units[size_t(g)][0]);
    std::vector<const DeviceVector<float>*> data;
    for (int32_t u : units) data.push_back(&gathered_for(t, u));
    for (size_t i = 0; i < units.size(); ++i) pbufs.push_back({data[i]->data(), unit(units[i]).numel});

    if (t.kind == TaskKind::Forward || t.kind == TaskKind::Recompute) {
      if (tiled_unit >= 0) {
        const auto& u = unit(tiled_unit);
        model.forward_tile(t.op, u.row_begin, u.row_end, pbufs[0], a);
      } else if (t.kind == TaskKind::Recompute) {
        model.recompute(t.op, pbufs, a);
      } else {
        model.forward(t.op, pbufs, a);
      }
      if (op.kind == core::OpKind::Loss) losses[size_t(t.micro_batch)] = a.loss;
      if (t.kind == TaskKind::Forward && last_forward_of_run.count(t.id)) drop_run(t.checkpoint, t.micro_batch, a);
      offloader->after_forward(t, a);
    } else {
      std::vector<GradBuf> gbufs;
      for (int32_t u : units) {
        auto& g = grad_buffer(u, t.micro_batch);
        gbufs.push_back({g.data(), unit(u).numel});
      }
      if (tiled_unit >= 0) {
        const auto& u = unit(tiled_unit);
        model.backward_tile(t.op, u.row_begin, u.row_end, pbufs[0], gbufs[0], a);
      } else {
        model.backward(t.op, pbufs, gbufs, a);
      }
      if (auto it = last_backward_of_block.find(t.id); it != last_backward_of_block.end()) drop_after_backward(it->second, a);
      if (op.block < 0) drop_outside_after_backward(op.kind, a);
    }
    release(t);
  }

  // After block b's backward: its recomputed intermediates and their gradients, its output and the
  // output's gradient go (the next use of each is the next step, which allocates them zeroed as
  // zero_grads would leave them), so backward holds one run's activations, not every block's.
  void drop_after_backward(int b, Gpt2Activations& a) {
    a.drop_block(b);
    Gpt2Activations::release(a.x[size_t(b)]);  // its input: only ln1's backward reads it
    Gpt2Activations::release(a.x[size_t(b) + 1]);
    Gpt2Activations::release(a.dx[size_t(b) + 1]);
  }

  // The same for the operators outside the blocks, at the Program's free points: after ln_f's
  // backward (the last of its run: lm_head and the loss precede it) the head's tensors go, after
  // the embedding's the first block's input gradient.
  static void drop_outside_after_backward(core::OpKind kind, Gpt2Activations& a) {
    if (kind == core::OpKind::LayerNorm)
      for (Activation* v : {&a.lnf, &a.lnf_mean, &a.lnf_rstd, &a.d_lnf, &a.logits, &a.probs, &a.losses, &a.d_logits})
        Gpt2Activations::release(*v);
    if (kind == core::OpKind::Embedding) {
      Gpt2Activations::release(a.x[0]);
      Gpt2Activations::release(a.dx[0]);
    }
  }

  DeviceVector<float>& grad_buffer(int32_t u, int32_t mb) {
    std::lock_guard<std::mutex> lock(mu);
    // Owner-based: the whole unit, reduced to its owner. Bandwidth-centric: padded to `ranks` equal
    // shards, as the reduce-scatter takes it.
    auto& g = grad_full.try_emplace({u, mb}, device<float>()).first->second;
    const auto& un = unit(u);
    if (g.empty()) g.assign(owner_based ? size_t(un.numel) : size_t(un.shard_numel) * size_t(P.ranks()), 0.0f);
    return g;
  }

  // After a checkpointed run's forward: its blocks' intermediates and inner inputs go; the run's
  // input (the checkpoint) and output stay.
  void drop_run(int32_t c, int32_t mb, Gpt2Activations& a) {
    const auto& blocks = ckpt_blocks[size_t(c)];
    const int first = ckpt_first_block[size_t(c)];
    for (int b : blocks) {
      a.drop_block(b);
      if (b != first) Gpt2Activations::release(a.x[size_t(b)]);
    }
    if (plan.checkpoints == Tier::Device) return;
    std::lock_guard<std::mutex> lock(mu);
    ckpt_forward_done.insert({c, mb});
    if (ckpt_copied.count({c, mb})) Gpt2Activations::release(a.x[size_t(first)]);
  }

  // Before a micro-batch's backward: offloaded checkpoints leave the device (their copies are
  // complete: the Program makes this task depend on them, core::checkpoint_copy_waits), and
  // activation gradients start at zero.
  void begin_backward(const Task& t) {
    const int32_t mb = t.micro_batch;
    Gpt2Activations& a = acts[size_t(mb)];
    if (plan.checkpoints != Tier::Device) {
      std::lock_guard<std::mutex> lock(mu);
      if (ckpt_saved[size_t(mb)] < ckpt_saves_per_mb[size_t(mb)])
        throw std::logic_error(fmt::format("{}: {} of the micro-batch's {} checkpoint copies are done; the Program must "
                                           "make its first backward depend on them",
                                           P.label(t), ckpt_saved[size_t(mb)], ckpt_saves_per_mb[size_t(mb)]));
      // A checkpoint the Program already brought back (loaded ahead of its recompute) stays.
      for (size_t c = 0; c < ckpt_first_block.size(); ++c)
        if (!ckpt_restored.count({int32_t(c), mb})) Gpt2Activations::release(a.x[size_t(ckpt_first_block[c])]);
    }
    a.zero_grads();
  }

  // ---- activation checkpoints ----------------------------------------------------------------

  void checkpoint_task(const Task& t) {
    Gpt2Activations& a = acts[size_t(t.micro_batch)];
    const auto key = std::make_pair(t.checkpoint, t.micro_batch);
    auto& x = a.x[size_t(ckpt_first_block[size_t(t.checkpoint)])];
    switch (t.kind) {
      case TaskKind::CopyD2H: {
        Staging<float> copy(x.begin(), x.end());
        std::lock_guard<std::mutex> lock(mu);
        ckpt_host[key] = std::move(copy);
        ckpt_copied.insert(key);
        if (ckpt_forward_done.count(key)) Gpt2Activations::release(x);
        ++ckpt_saved[size_t(t.micro_batch)];
        return;
      }
      case TaskKind::NvmeWrite: {
        Staging<float> host;
        {
          std::lock_guard<std::mutex> lock(mu);
          host = std::move(ckpt_host.at(key));
          ckpt_host.erase(key);
        }
        NvmeStore::TensorId id;
        {
          std::lock_guard<std::mutex> lock(mu);
          auto it = ckpt_nvme.find(key);
          if (it == ckpt_nvme.end())
            it = ckpt_nvme.emplace(key, store->create(fmt::format("ckpt_{}_mb{}", t.checkpoint, t.micro_batch),
                                                      host.size() * sizeof(float))).first;
          id = it->second;
        }
        store->write(id, 0, host.data(), host.size() * sizeof(float)).wait_or_throw();
        return;
      }
      case TaskKind::NvmeRead: {
        Staging<float> host(size_t(graph.tokens * graph.spec.hidden));
        NvmeStore::TensorId id;
        {
          std::lock_guard<std::mutex> lock(mu);
          id = ckpt_nvme.at(key);
        }
        store->read(id, 0, host.data(), host.size() * sizeof(float)).wait_or_throw();
        std::lock_guard<std::mutex> lock(mu);
        ckpt_host[key] = std::move(host);
        return;
      }
      case TaskKind::CopyH2D: {
        std::lock_guard<std::mutex> lock(mu);
        const auto& h = ckpt_host.at(key);
        x.assign(h.begin(), h.end());
        ckpt_host.erase(key);
        ckpt_restored.insert(key);
        return;
      }
      default:
        throw std::logic_error(fmt::format("no checkpoint transfer of kind {}", core::to_string(t.kind)));
    }
  }

  // ---- gradients ------------------------------------------------------------------------------

  // Gradients are the mean over all ranks' micro-batches: scaled once, at the reduction.
  float grad_scale() const { return 1.0f / float(P.ranks() * P.micro_batches()); }

  // Adds a reduced micro-batch gradient into the stored bf16 shard: the same rounding on every tier.
  void accumulate(bf16* home, const bf16* partial, const float* add, int64_t n, bool first, bool last) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float prev = first ? 0.0f : to_float(partial[i]);
      home[i] = to_bf16(prev + add[i]);
      if (last) {
        const double g = to_float(home[i]);
        ss += g * g;
      }
    }
    if (last) {
      std::lock_guard<std::mutex> lock(mu);
      sumsq += ss;
    }
  }

  void grad_task(const Task& t) {
    const auto& u = unit(t.unit);
    const auto key = std::make_pair(t.unit, t.micro_batch);
    const int64_t off = mine_offset(u), n = mine_count(u);
    const bool first = t.micro_batch == 0, last = t.micro_batch == P.micro_batches() - 1;
    switch (t.kind) {
      case TaskKind::ReduceScatter:
      case TaskKind::Reduce: {
        DeviceVector<float> full;
        {
          std::lock_guard<std::mutex> lock(mu);
          full = std::move(grad_full.at(key));
          grad_full.erase(key);
        }
        DeviceVector<float> shard(static_cast<size_t>(n), device<float>());
        if (t.kind == TaskKind::ReduceScatter) comm.reduce_scatter(full.data(), shard.data(), size_t(n), u.name.c_str());
        else comm.reduce(full.data(), shard.data(), size_t(n), u.owner, u.name.c_str());
        if (!holds(u)) return;
        for (float& g : shard) g *= grad_scale();
        if (plan.gradients == Tier::Device) {
          accumulate(grads.mem.data() + off, grads.mem.data() + off, shard.data(), n, first, last);
        } else {
          std::lock_guard<std::mutex> lock(mu);
          grad_shard.insert_or_assign(key, std::move(shard));
        }
        return;
      }
      case TaskKind::CopyD2H: {
        DeviceVector<float> shard;
        {
          std::lock_guard<std::mutex> lock(mu);
          shard = std::move(grad_shard.at(key));
          grad_shard.erase(key);
        }
        if (plan.gradients == Tier::Host) {
          accumulate(grads.mem.data() + off, grads.mem.data() + off, shard.data(), n, first, last);
          return;
        }
        Staging<float> host(shard.begin(), shard.end());  // on its way to NVMe, staged on the host
        std::lock_guard<std::mutex> lock(mu);
        grad_host.insert_or_assign(key, std::move(host));
        return;
      }
      case TaskKind::NvmeRead: {
        Staging<bf16> partial = staging<bf16>(n);
        grads.read(off, n, partial.data());
        std::lock_guard<std::mutex> lock(mu);
        grad_partial[key] = std::move(partial);
        return;
      }
      case TaskKind::NvmeWrite: {
        Staging<float> shard;
        Staging<bf16> partial;
        {
          std::lock_guard<std::mutex> lock(mu);
          shard = std::move(grad_host.at(key));
          grad_host.erase(key);
          if (!first) {
            partial = std::move(grad_partial.at(key));
            grad_partial.erase(key);
          }
        }
        Staging<bf16> out = staging<bf16>(n);
        accumulate(out.data(), partial.data(), shard.data(), n, first, last);
        grads.write(off, n, out.data());
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

  // ---- optimizer ------------------------------------------------------------------------------

  void optimizer_task(const Task& t) {
    const int32_t sg = t.sub_group;
    const int64_t off = t.sg_offset, n = t.sg_count;
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeRead) {
      Staging<float> a = staging<float>(n), b = staging<float>(n), c = staging<float>(n);
      wait_all({master.read_async(off, n, a.data()), m.read_async(off, n, b.data()), v.read_async(off, n, c.data())});
      std::lock_guard<std::mutex> lock(mu);
      sg_master[sg] = std::move(a);
      sg_m[sg] = std::move(b);
      sg_v[sg] = std::move(c);
      return;
    }
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeWrite) {
      Staging<float> a, b, c;
      {
        std::lock_guard<std::mutex> lock(mu);
        a = std::move(sg_master.at(sg));
        b = std::move(sg_m.at(sg));
        c = std::move(sg_v.at(sg));
        sg_master.erase(sg);
        sg_m.erase(sg);
        sg_v.erase(sg);
      }
      wait_all({master.write_async(off, n, a.data()), m.write_async(off, n, b.data()), v.write_async(off, n, c.data())});
      return;
    }
    if (t.data == Data::Grad) {  // gradients to where the optimizer runs
      if (t.kind != TaskKind::NvmeRead && plan.gradients == Tier::Nvme) return;  // staged by the NVMe read
      Staging<bf16> g = staging<bf16>(n);
      if (t.kind == TaskKind::NvmeRead) grads.read(off, n, g.data());
      else std::copy_n(grads.mem.data() + off, n, g.data());
      std::lock_guard<std::mutex> lock(mu);
      sg_grad[sg] = std::move(g);
      return;
    }
    if (t.kind == TaskKind::OptimizerStep) {
      adam_step(t);
      return;
    }
    if (t.data == Data::Param) {  // updated parameters back to their tier
      Staging<bf16> p;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = sg_param.find(sg);
        if (it == sg_param.end()) throw std::logic_error(fmt::format("{}: no updated parameters staged", P.label(t)));
        if (t.kind == TaskKind::CopyD2H && plan.params == Tier::Nvme) return;  // staged for the NVMe write
        p = std::move(it->second);
        sg_param.erase(it);
      }
      params.write(off, n, p.data());
      return;
    }
    throw std::logic_error(fmt::format("{}: no optimizer task of this kind", P.label(t)));
  }

  void adam_step(const Task& t) {
    const int32_t sg = t.sub_group;
    const int64_t off = t.sg_offset, n = t.sg_count;
    float *pm, *pmm, *pv;
    Staging<float>* staged_master = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (plan.optimizer == Tier::Nvme) {
        staged_master = &sg_master.at(sg);
        pm = staged_master->data();
        pmm = sg_m.at(sg).data();
        pv = sg_v.at(sg).data();
      } else {
        pm = master.resident(off);
        pmm = m.resident(off);
        pv = v.resident(off);
      }
    }
    Staging<bf16> gstage;
    const bf16* g;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = sg_grad.find(sg);
      if (it != sg_grad.end()) {
        gstage = std::move(it->second);
        sg_grad.erase(it);
        g = gstage.data();
      } else {
        g = grads.resident(off);
      }
    }
    if (!g) throw std::logic_error(fmt::format("{}: gradients are not staged", P.label(t)));
    std::vector<bf16> scaled;
    if (clip_scale != 1.0) {
      scaled.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) scaled[size_t(i)] = to_bf16(to_float(g[i]) * float(clip_scale));
      g = scaled.data();
    }
    const bool params_here = (plan.params == Tier::Host && plan.optimizer != Tier::Device) ||
                             (plan.params == Tier::Device && plan.optimizer == Tier::Device);
    if (params_here) {
      adam.step(step, size_t(n), pm, pmm, pv, g, params.resident(off));
      count_nonfinite(pm, n);
    } else {
      Staging<bf16> out = staging<bf16>(n);
      adam.step(step, size_t(n), pm, pmm, pv, g, out.data());
      count_nonfinite(pm, n);
      std::lock_guard<std::mutex> lock(mu);
      sg_param[sg] = std::move(out);
    }
  }

  // Master weights the update left NaN or infinite (a diverging run, a poisoned state): counted so
  // the trainer stops before such weights reach a checkpoint.
  void count_nonfinite(const float* w, int64_t n) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(w[i]);
    if (bad) nonfinite.fetch_add(bad, std::memory_order_relaxed);
  }

  void norm_task(const Task& t) {
    if (t.kind == TaskKind::GradNorm) return;  // the squares were summed as each shard became final
    std::vector<double> s{sumsq};
    comm.all_reduce(s.data(), 1, "gradient norm");
    global_norm = std::sqrt(s[0]);
    const double clip = opt.config.grad_clip;
    clip_scale = clip > 0 && global_norm > clip ? clip / (global_norm + 1e-6) : 1.0;
  }
};

GptCpuBackend::GptCpuBackend(const core::Program& program, const core::Plan& plan, const Gpt2& model, int rank,
                             Collectives& comm, GptBackendOptions options)
    : impl_(std::make_unique<Impl>(program, plan, model, rank, comm, std::move(options))) {}

GptCpuBackend::~GptCpuBackend() = default;

void GptCpuBackend::load_state(const FullState& full) {
  Impl& I = *impl_;
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
  auto reader = [](const Gpt2Params& p) -> GroupReader {
    if (p.empty()) return {};
    return [&p](int32_t g, std::vector<float>& out) { out = p[size_t(g)]; };
  };
  load_state(reader(full.master), reader(full.m), reader(full.v));
}

void GptCpuBackend::load_state(const GroupReader& master, const GroupReader& m, const GroupReader& v) {
  Impl& I = *impl_;
  std::vector<float> group;
  const auto& units = I.P.units();  // in group order, a group's tiles together
  size_t next_unit = 0;
  for (const auto& pg : I.graph.params) {
    const size_t first_unit = next_unit;
    while (next_unit < units.size() && units[next_unit].group == pg.id) ++next_unit;
    // One state at a time, in the order a checkpoint holds them: host memory holds one group's
    // tensor and one unit's slice of it, never the three states together.
    const std::tuple<const GroupReader*, Home<float>*, const char*> states[] = {
        {&master, &I.master, "master weights"}, {&m, &I.m, "Adam m"}, {&v, &I.v, "Adam v"}};
    for (const auto& [reader, home, what] : states) {
      group.clear();
      if (*reader) {
        (*reader)(pg.id, group);
        if (int64_t(group.size()) != pg.numel)
          throw std::invalid_argument(
              fmt::format("{}: group {} has {} elements, the model's has {}", what, pg.name, group.size(), pg.numel));
      }
      for (size_t k = first_unit; k < next_unit; ++k) {
        const auto& u = units[k];
        if (!I.holds(u)) continue;
        const int64_t begin = I.owner_based ? 0 : int64_t(I.rank) * u.shard_numel;
        const int64_t off = I.mine_offset(u), cnt = I.mine_count(u);
        // This rank's slice of the unit, zero past the unit's end and in the aligned padding, so
        // that an NVMe home's padded span is written whole; zero throughout for absent moments.
        auto slice = staging<float>(cnt);
        std::fill(slice.begin(), slice.begin() + cnt, 0.0f);
        if (!group.empty()) {
          std::vector<float> tile;
          if (u.tiles > 1) tile = I.unit_from_group(u, group);
          const float* flat = u.tiles > 1 ? tile.data() : group.data();
          for (int64_t i = 0; i < cnt && begin + i < u.numel; ++i) slice[size_t(i)] = flat[begin + i];
        }
        if (home == &I.master) {  // the bf16 parameters are the master weights rounded
          auto params = staging<bf16>(cnt);
          for (int64_t i = 0; i < cnt; ++i) params[size_t(i)] = to_bf16(slice[size_t(i)]);
          wait_all({I.params.write_async(off, cnt, params.data()), I.master.write_async(off, cnt, slice.data())});
        } else {
          home->write(off, cnt, slice.data());
        }
      }
    }
  }
  if (next_unit != units.size())
    throw std::logic_error("gpt backend: the Program's units are not in parameter-group order");
}

GptCpuBackend::FullState GptCpuBackend::gather_state() {
  FullState out;
  for (const auto& pg : impl_->graph.params) {
    out.master.emplace_back();
    out.m.emplace_back();
    out.v.emplace_back();
    gather_group(pg.id, StateTensor::Master, out.master.back());
    gather_group(pg.id, StateTensor::AdamM, out.m.back());
    gather_group(pg.id, StateTensor::AdamV, out.v.back());
  }
  return out;
}

void GptCpuBackend::gather_group(int32_t group, StateTensor which, std::vector<float>& out) {
  Impl& I = *impl_;
  if (group < 0 || size_t(group) >= I.graph.params.size())
    throw std::invalid_argument(fmt::format("gather_group: no parameter group {}", group));
  const Home<float>& home = which == StateTensor::Master ? I.master : which == StateTensor::AdamM ? I.m : I.v;
  const int64_t numel = I.graph.params[size_t(group)].numel;
  out.resize(size_t(numel));
  std::vector<float> tile;
  for (int32_t id : I.group_units[size_t(group)]) {
    const auto& u = I.unit(id);
    const int64_t off = I.mine_offset(u), cnt = I.mine_count(u);
    Staging<float> mine;
    if (I.holds(u)) {
      mine = staging<float>(cnt);
      home.read(off, cnt, mine.data());
    }
    // An untiled unit is its whole group: gathered in place (with the ranks' padding, dropped after).
    std::vector<float>& flat = u.tiles == 1 ? out : tile;
    if (I.owner_based) {
      flat.resize(size_t(u.numel));
      if (u.owner == I.rank) std::copy_n(mine.data(), u.numel, flat.data());
      I.comm.broadcast(flat.data(), flat.size() * sizeof(float), u.owner, u.name.c_str());
    } else {
      flat.resize(size_t(u.shard_numel) * size_t(I.P.ranks()));
      I.comm.all_gather(mine.data(), size_t(u.shard_numel) * sizeof(float), flat.data(), u.name.c_str());
    }
    if (u.tiles > 1) I.unit_into_group(u, flat.data(), out);
  }
  out.resize(size_t(numel));
}

int64_t GptCpuBackend::device_peak_bytes() const { return impl_->arena.peak(); }

void GptCpuBackend::reset_device_peak() { impl_->arena.reset_peak(); }

void GptCpuBackend::begin_step(int64_t step, std::vector<Batch> batches) {
  Impl& I = *impl_;
  if (int(batches.size()) != I.P.micro_batches())
    throw std::invalid_argument(fmt::format("{} micro-batches given, the Program has {}", batches.size(),
                                            I.P.micro_batches()));
  I.step = step;
  I.sumsq = 0;
  I.nonfinite.store(0, std::memory_order_relaxed);
  I.clip_scale = 1.0;
  I.global_norm = 0;
  // Activations are reused from step to step (their tensors keep their sizes); only what a step
  // dropped is allocated again.
  if (I.acts.size() != batches.size()) {
    I.acts.clear();
    for (size_t i = 0; i < batches.size(); ++i) I.acts.push_back(I.model.make_activations(&I.arena));
  }
  I.losses.assign(batches.size(), 0.0);
  std::fill(I.ckpt_saved.begin(), I.ckpt_saved.end(), 0);
  I.ckpt_restored.clear();
  I.ckpt_copied.clear();
  I.ckpt_forward_done.clear();
  for (size_t i = 0; i < batches.size(); ++i) I.model.set_batch(I.acts[i], batches[i].inputs, batches[i].targets);
}

void GptCpuBackend::run(const Task& t) {
  Impl& I = *impl_;
  if (core::is_compute(t.kind)) return I.compute(t);
  switch (t.data) {
    case Data::Param:
      if (t.phase == Phase::Optimizer) return I.optimizer_task(t);
      I.fetch_task(t);
      return I.release(t);
    case Data::Checkpoint: return I.checkpoint_task(t);
    case Data::Activation: return I.offloader->run(t, I.acts[size_t(t.micro_batch)]);
    case Data::Grad:
      if (t.phase == Phase::Optimizer) return I.optimizer_task(t);
      return I.grad_task(t);
    case Data::OptimizerState: return I.optimizer_task(t);
    case Data::Scalar:
      I.norm_task(t);
      grad_norm_ = I.global_norm;
      return;
    default:
      if (t.kind == TaskKind::Alloc || t.kind == TaskKind::Free) return I.release(t);
      throw std::logic_error(fmt::format("{}: no handler for this task", I.P.label(t)));
  }
}

std::optional<TrainingBackend::LocalGradCheck> GptCpuBackend::local_grad_check() const {
  return LocalGradCheck{impl_->sumsq, impl_->nonfinite.load(std::memory_order_relaxed)};
}

std::vector<core::TaskWait> GptCpuBackend::waits() const { return core::checkpoint_copy_waits(impl_->P); }

double GptCpuBackend::loss() const {
  double s = 0;
  for (double l : impl_->losses) s += l;
  return impl_->losses.empty() ? 0.0 : s / double(impl_->losses.size());
}

}  // namespace zinf::engine
