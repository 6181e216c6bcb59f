#include "engine/backend/gpt_backend_base.hpp"

#include "core/units.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>

#include "engine/backend/cpu/convert.hpp"
#include "engine/memory/staging_cache.hpp"

namespace zinf::engine {

using core::Data;
using core::Phase;
using core::Task;
using core::TaskKind;
using core::Tier;

uint64_t device_arena_bytes(const core::Program& program, uint64_t device_free, const std::string& device) {
  const double budget = core::at(program.budget(), Tier::Device);
  if (!(budget > 0))
    throw std::invalid_argument(fmt::format("the Program gives {} no device budget", device));
  if (budget > double(device_free))
    throw std::runtime_error(fmt::format(
        "{} has {} free, less than the Program's device budget of {} (the hwprofile's node.gpu.memory less its "
        "reserve): lower --device-memory or the profile's gpu memory, or free the device",
        device, core::format_bytes(double(device_free)), core::format_bytes(budget)));
  return uint64_t(budget);
}

GptBackendBase::GptBackendBase(const core::Program& program, const core::Plan& pl, const core::ModelGraph& g, int r,
                               Collectives& c, GptBackendOptions options, const char* device_name)
    : P(&program), graph(g), rank(r), comm(c), opt(std::move(options)),
      owner_based(program.partitioning() == core::Partitioning::OwnerBased), space(program.shard_space(r)),
      index(program, g), built_for_(program), adam_options_(AdamOptions::from_run_config(opt.config)) {
  if (pl.zero_stage != 3)
    throw std::invalid_argument(fmt::format(
        "the {} training backend runs ZeRO stage 3 only (the run config asks for stage {}); use zero_stage: 3",
        device_name, pl.zero_stage));
  if (comm.size() != P->data_parallel() || comm.rank() != rank)
    throw std::invalid_argument(fmt::format("the Program is for {} ranks, but this process is rank {} of {}",
                                            P->data_parallel(), comm.rank(), comm.size()));
  if (uses_nvme(pl)) {
    if (opt.nvme_dir.empty())
      throw std::invalid_argument("the plan puts a state on NVMe: give an NVMe directory (--nvme-dir)");
    store = std::make_unique<NvmeStore>(NvmeStoreOptions::from_run_config(opt.config, opt.nvme_dir));
  }
  offloader_ = std::make_unique<ActivationOffloader>(program, graph, store.get(), static_cast<ActivationDevice&>(*this));  // calls no device method yet
  ckpt_saved_.assign(size_t(P->micro_batches()), 0);
}

GptBackendBase::~GptBackendBase() = default;

bool GptBackendBase::uses_nvme(const core::Plan& plan) const {
  if (!trains()) return plan.params == Tier::Nvme;  // the parameters are all it keeps
  return plan.params == Tier::Nvme || plan.gradients == Tier::Nvme || plan.optimizer == Tier::Nvme ||
         plan.checkpoints == Tier::Nvme ||
         std::any_of(P->activations().begin(), P->activations().end(),
                     [](const core::ActivationSegment& s) { return s.tier == Tier::Nvme; });
}

// ---- a step ---------------------------------------------------------------------------------------

void GptBackendBase::set_step_rates(const core::StepRates& rates) {
  adam_options_.lr = rates.lr;
  adam_options_.beta1 = rates.beta1;
  adam_options_.beta2 = rates.beta2;
}

void GptBackendBase::use_program(const core::Program& program) {
  if (P == &program) return;
  P = &program;
  index = GptProgramIndex(program, graph);
}

void GptBackendBase::start(std::vector<Batch>& batches) {
  if (int(batches.size()) != P->micro_batches())
    throw std::invalid_argument(
        fmt::format("{} micro-batches given, the Program has {}", batches.size(), P->micro_batches()));
  sumsq_ = 0;
  nonfinite_.store(0, std::memory_order_relaxed);
  clip_scale_ = 1.0;
  global_norm_ = 0;
  overflow_ = false;
  losses_.assign(batches.size(), 0.0);
  ckpt_saved_.assign(batches.size(), 0);
  ckpt_restored_.clear();
  start_step(batches);
}

void GptBackendBase::begin_step(int64_t step, std::vector<Batch> batches) {
  bind_thread();
  if (!trains())
    throw std::logic_error("this backend was built for a forward-only Program: it keeps no gradients or optimizer "
                           "states, so it runs forward passes only (begin_forward)");
  use_program(built_for_);
  step_ = step;
  keep_logits_of_ = -1;
  start(batches);
}

void GptBackendBase::begin_forward(const core::Program& forward, std::vector<Batch> batches, int64_t keep_logits_of) {
  bind_thread();
  if (!forward.forward_only())
    throw std::invalid_argument("begin_forward takes a forward-only Program (core::make_forward_plan)");
  // The forward pass reads the parameters' homes, laid out by the units of the Program they were
  // built for: the two must agree unit by unit (core::forward_config plans it so).
  const auto& mine = built_for_.units();
  const auto& theirs = forward.units();
  bool same = mine.size() == theirs.size() && forward.data_parallel() == built_for_.data_parallel() &&
              forward.partitioning() == built_for_.partitioning() && forward.shard_space(rank) == space;
  for (size_t u = 0; same && u < mine.size(); ++u)
    same = mine[u].numel == theirs[u].numel && mine[u].shard_offset == theirs[u].shard_offset &&
           mine[u].owner == theirs[u].owner && mine[u].owner_offset == theirs[u].owner_offset && mine[u].group == theirs[u].group;
  if (!same)
    throw std::invalid_argument("the forward-only Program's units or shards differ from those of the Program this "
                                "backend keeps its parameters for: plan it with core::forward_config of that plan");
  if (keep_logits_of >= 0 && graph.tensor_parallel > 1)
    throw std::invalid_argument("keeping a token's logits needs tensor_parallel 1: each rank of a tensor-parallel "
                                "group holds a slice of the vocabulary");
  if (keep_logits_of >= graph.tokens)
    throw std::invalid_argument(fmt::format("token {} of a micro-batch of {} tokens", keep_logits_of, graph.tokens));
  use_program(forward);
  keep_logits_of_ = keep_logits_of;
  kept_logits_.clear();
  start(batches);
}

void GptBackendBase::run(const Task& t) {
  bind_thread();
  if (core::is_compute(t.kind)) {
    compute(t);
    offloader_->after_forward(t);
    return release(t);
  }
  if (t.kind == TaskKind::AllReduce && t.data == Data::Activation) return tensor_parallel_all_reduce(t);
  switch (t.data) {
    case Data::Param:
      if (t.phase == Phase::Optimizer) return optimizer(t);
      fetch(t);
      return release(t);
    case Data::Checkpoint: return checkpoint(t);
    case Data::Activation: return offloader_->run(t);
    case Data::Grad:
      if (t.phase == Phase::Optimizer) return optimizer(t);
      return gradient(t);
    case Data::OptimizerState: return optimizer(t);
    case Data::Scalar: return norm_task(t);
    default:
      if (t.kind == TaskKind::Alloc || t.kind == TaskKind::Free) return release(t);
      throw std::logic_error(fmt::format("{}: no handler for this task", P->label(t)));
  }
}

std::vector<core::TaskWait> GptBackendBase::waits(const core::Program& program) const {
  return core::checkpoint_copy_waits(program);
}

double GptBackendBase::loss() const {
  double s = 0;
  for (double l : losses_) s += l;
  return losses_.empty() ? 0.0 : s / double(losses_.size());
}

std::optional<TrainingBackend::LocalGradCheck> GptBackendBase::local_grad_check() const {
  // The stored gradients carry the loss scale: their norm is reported without it.
  return LocalGradCheck{sumsq_ / (loss_scale_ * loss_scale_), nonfinite_.load(std::memory_order_relaxed)};
}

void GptBackendBase::set_loss_scale(double scale) {
  if (!(scale > 0) || !std::isfinite(scale))
    throw std::invalid_argument(fmt::format("loss scale {}: it must be positive and finite", scale));
  const core::Precision p = opt.config.precision.value_or(core::Precision::Bf16);
  if (scale != 1.0 && p != core::Precision::Fp16)
    throw std::invalid_argument(fmt::format("a loss scale of {} in precision {}: only fp16 scales its loss", scale,
                                            core::to_string(p)));
  loss_scale_ = scale;
}

// ---- what the handlers share ------------------------------------------------------------------------

std::vector<int32_t> GptBackendBase::compute_units(const Task& t) const {
  const int32_t tiled = tiled_unit(t);
  std::vector<int32_t> units;
  for (int32_t g : graph.ops[size_t(t.op)].param_groups)
    units.push_back(tiled >= 0 && unit(tiled).group == g ? tiled : index.group_units[size_t(g)][0]);
  return units;
}

bool GptBackendBase::first_backward(const Task& t) const {
  return t.kind == TaskKind::Backward && P->backward_starts()[size_t(t.micro_batch)].task == t.id;
}

std::vector<int64_t> GptBackendBase::gathered_buffers(const Task& t, int32_t u) const {
  std::vector<int64_t> out;
  for (int32_t d : P->deps(t)) {
    const Task& dt = P->task(d);
    if (dt.unit == u && (dt.kind == TaskKind::AllGather || dt.kind == TaskKind::Broadcast)) out.push_back(dt.buffer);
  }
  return out;
}

void GptBackendBase::release(const Task& t) {
  for (const auto& e : P->frees(t, rank)) drop_gathered(e.buffer);
}

void GptBackendBase::drop_checkpoints(const Task& t, const std::function<void(int block)>& drop) {
  const int32_t mb = t.micro_batch;
  const size_t copies = P->backward_starts()[size_t(mb)].checkpoint_copies.size();
  if (copies == 0) return;  // the Program copies no checkpoint off the device: they stay
  std::lock_guard<std::mutex> lock(mu);
  if (size_t(ckpt_saved_[size_t(mb)]) < copies)
    throw std::logic_error(fmt::format("{}: {} of the micro-batch's {} checkpoint copies are done; the Program must "
                                       "make its first backward depend on them",
                                       P->label(t), ckpt_saved_[size_t(mb)], copies));
  // A checkpoint the Program already brought back (loaded ahead of its recompute) stays.
  for (size_t c = 0; c < index.ckpt_first_block.size(); ++c)
    if (!ckpt_restored_.count({int32_t(c), mb})) drop(index.ckpt_first_block[c]);
}

void GptBackendBase::require_home(const Task& t, Tier home, Tier stated, const char* what) const {
  if (home != stated)
    throw std::logic_error(fmt::format("{}: reads or writes the {} at their home as if it were on the {} tier, but it "
                                       "is on the {} tier: the Program states no transfer between them",
                                       P->label(t), what, core::to_string(stated), core::to_string(home)));
}

NvmeStore::TensorId GptBackendBase::checkpoint_tensor(int32_t c, int32_t mb, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = ckpt_nvme_.find({c, mb});
  if (it == ckpt_nvme_.end() && bytes == 0)
    throw std::logic_error(
        fmt::format("checkpoint {} of micro-batch {} is read from NVMe before it is written", c, mb));
  if (it == ckpt_nvme_.end())
    it = ckpt_nvme_.emplace(std::make_pair(c, mb), store->create(fmt::format("ckpt_{}_mb{}", c, mb), bytes)).first;
  return it->second;
}

std::pair<int64_t, int64_t> GptBackendBase::replicated_in_mine(const core::ParamUnit& u) const {
  if (graph.tensor_parallel <= 1) return {0, 0};
  const auto& g = graph.params[size_t(u.group)];
  // A tile holds its rows' bias entries at its end; an untiled group its replicated tail.
  const int64_t k = u.tiles == 1 ? g.tp_replicated : (g.tp_replicated > 0 ? u.row_end - u.row_begin : 0);
  const int64_t start = owner_based ? 0 : int64_t(rank) * u.shard_numel, n = mine_count(u);
  const int64_t b = std::clamp<int64_t>(u.numel - k - start, 0, n), e = std::clamp<int64_t>(u.numel - start, 0, n);
  return {b, std::max(b, e)};
}

template <class S>
void GptBackendBase::accumulate_host(const core::ParamUnit& u, S* home, const S* partial, const float* add, int64_t n,
                                     bool first, bool last) {
  // In chunks that stay in cache: the sum, then (at the last micro-batch) the squares of what was
  // stored, the tensor-parallel replicated range [rb, re) apart. Separate loops, so that neither
  // waits on the other's branches (one fused scalar loop took 1.0-1.5 ns per element).
  constexpr int64_t kChunk = 4096;
  double ss = 0, replicated = 0;
  const auto [rb, re] = last ? replicated_in_mine(u) : std::pair<int64_t, int64_t>{0, 0};
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t e = std::min(n, b + kChunk);
    if (first) {
      for (int64_t i = b; i < e; ++i) home[i] = from_float<S>(0.0f + add[i]);  // as a zero partial's sum: -0 becomes +0
    } else {
      for (int64_t i = b; i < e; ++i) home[i] = from_float<S>(to_float(partial[i]) + add[i]);
    }
    if (!last) continue;
    const int64_t r0 = std::clamp(rb, b, e), r1 = std::clamp(re, b, e);
    ss += cpu::sum_of_squares(home + b, r0 - b) + cpu::sum_of_squares(home + r1, e - r1);
    replicated += cpu::sum_of_squares(home + r0, r1 - r0);
  }
  if (last) add_sumsq(ss + replicated / double(std::max<int64_t>(1, graph.tensor_parallel)));
}
template void GptBackendBase::accumulate_host(const core::ParamUnit&, bf16*, const bf16*, const float*, int64_t, bool,
                                              bool);
template void GptBackendBase::accumulate_host(const core::ParamUnit&, fp16*, const fp16*, const float*, int64_t, bool,
                                              bool);
template void GptBackendBase::accumulate_host(const core::ParamUnit&, float*, const float*, const float*, int64_t,
                                              bool, bool);

void GptBackendBase::count_nonfinite(const float* w, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(w[i]);
  if (bad) nonfinite_.fetch_add(bad, std::memory_order_relaxed);
}

const bf16* GptBackendBase::clipped_host(const bf16* g, int64_t n, std::vector<bf16>& scratch) const {
  if (clip_scale_ == 1.0) return g;
  scratch.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) scratch[size_t(i)] = to_bf16(to_float(g[i]) * float(clip_scale_));
  return scratch.data();
}

template <class S>
const float* GptBackendBase::unscaled_host(const S* g, int64_t n, std::vector<float>& scratch) const {
  const double scale = clip_scale_ / loss_scale_;
  if constexpr (std::is_same_v<S, float>)
    if (scale == 1.0) return g;
  scratch.resize(size_t(n));
  const float f = float(scale);
  for (int64_t i = 0; i < n; ++i) scratch[size_t(i)] = to_float(g[i]) * f;
  return scratch.data();
}
template const float* GptBackendBase::unscaled_host(const fp16*, int64_t, std::vector<float>&) const;
template const float* GptBackendBase::unscaled_host(const float*, int64_t, std::vector<float>&) const;

void GptBackendBase::norm_task(const Task& t) {
  if (t.kind == TaskKind::GradNorm) return;  // the squares were summed as each shard became final
  double s = sumsq_;
  (opt.norm_comm ? *opt.norm_comm : comm).all_reduce(&s, 1, "gradient norm");
  // fp16: a gradient that overflowed its storage on any rank makes every rank's sum infinite or
  // NaN, so every rank skips the step together (DeepSpeed's overflow check, all-reduced).
  overflow_ = opt.config.precision == core::Precision::Fp16 && !std::isfinite(s);
  global_norm_ = std::sqrt(s) / loss_scale_;
  const double clip = opt.config.grad_clip;
  clip_scale_ = clip > 0 && global_norm_ > clip ? clip / (global_norm_ + 1e-6) : 1.0;
}

// ---- the optimizer state in and out ------------------------------------------------------------------

void GptBackendBase::check_state(const Gpt2Params& p, const char* what, bool optional) const {
  if (optional && p.empty()) return;
  const size_t groups = graph.params.size();
  if (p.size() != groups)
    throw std::invalid_argument(fmt::format("{}: {} parameter groups given, the model has {}", what, p.size(), groups));
  for (size_t g = 0; g < groups; ++g)
    if (int64_t(p[g].size()) != graph.params[g].numel)
      throw std::invalid_argument(fmt::format("{}: group {} has {} elements, the model's has {}", what,
                                              graph.params[g].name, p[g].size(), graph.params[g].numel));
}

void GptBackendBase::load_state(const FullState& full) {
  check_state(full.master, "master weights", false);
  check_state(full.m, "Adam m", true);
  check_state(full.v, "Adam v", true);
  auto reader = [](const Gpt2Params& p) -> GroupReader {
    if (p.empty()) return {};
    return [&p](int32_t g, std::vector<float>& out) { out = p[size_t(g)]; };
  };
  load_state(reader(full.master), reader(full.m), reader(full.v));
}

namespace {

// The unit's flat tensor (weight rows then their biases, or the whole group) from a group tensor,
// and back. A tiled weight without a bias (the embedding's vocabulary tiles) is its rows alone.
bool has_bias(const core::ParamGroup& pg) { return pg.numel > pg.rows * pg.cols; }

std::vector<float> unit_from_group(const core::ModelGraph& graph, const core::ParamUnit& u,
                                   const std::vector<float>& g) {
  if (u.tiles == 1) return g;
  const auto& pg = graph.params[size_t(u.group)];
  const int64_t rows = u.row_end - u.row_begin, cols = pg.cols;
  std::vector<float> out(size_t(u.numel));
  std::copy_n(g.data() + u.row_begin * cols, rows * cols, out.data());
  if (has_bias(pg)) std::copy_n(g.data() + pg.rows * cols + u.row_begin, rows, out.data() + rows * cols);
  return out;
}

void unit_into_group(const core::ModelGraph& graph, const core::ParamUnit& u, const float* src,
                     std::vector<float>& g) {
  if (u.tiles == 1) {
    std::copy_n(src, u.numel, g.data());
    return;
  }
  const auto& pg = graph.params[size_t(u.group)];
  const int64_t rows = u.row_end - u.row_begin, cols = pg.cols;
  std::copy_n(src, rows * cols, g.data() + u.row_begin * cols);
  if (has_bias(pg)) std::copy_n(src + rows * cols, rows, g.data() + pg.rows * cols + u.row_begin);
}

}  // namespace

void GptBackendBase::load_state(const GroupReader& master, const GroupReader& m, const GroupReader& v) {
  bind_thread();
  std::vector<float> group;
  const auto& units = P->units();  // in group order, a group's tiles together
  size_t next_unit = 0;
  for (const auto& pg : graph.params) {
    const size_t first_unit = next_unit;
    while (next_unit < units.size() && units[next_unit].group == pg.id) ++next_unit;
    // One state at a time, in the order a checkpoint holds them: host memory holds one group's
    // tensor and one unit's slice of it, never the three states together.
    const std::tuple<const GroupReader*, StateTensor, const char*> states[] = {
        {&master, StateTensor::Master, "master weights"}, {&m, StateTensor::AdamM, "Adam m"},
        {&v, StateTensor::AdamV, "Adam v"}};
    for (const auto& [reader, which, what] : states) {
      if (!trains() && which != StateTensor::Master) continue;  // no moments to keep
      group.clear();
      if (*reader) {
        (*reader)(pg.id, group);
        if (int64_t(group.size()) != pg.numel)
          throw std::invalid_argument(
              fmt::format("{}: group {} has {} elements, the model's has {}", what, pg.name, group.size(), pg.numel));
      }
      for (size_t k = first_unit; k < next_unit; ++k) {
        const auto& u = units[k];
        if (!holds(u)) continue;
        const int64_t begin = owner_based ? 0 : int64_t(rank) * u.shard_numel;
        const int64_t off = mine_offset(u), cnt = mine_count(u);
        // This rank's slice of the unit, zero past the unit's end and in the aligned padding, so
        // that an NVMe home's padded span is written whole; zero throughout for absent moments.
        Staging<float> slice(size_t(core::shard_aligned(cnt)), 0.0f);
        if (!group.empty()) {
          std::vector<float> tile;
          if (u.tiles > 1) tile = unit_from_group(graph, u, group);
          const float* flat = u.tiles > 1 ? tile.data() : group.data();
          for (int64_t i = 0; i < cnt && begin + i < u.numel; ++i) slice[size_t(i)] = flat[begin + i];
        }
        // The parameters are the master weights rounded (by the device, to the run's precision).
        write_state(off, cnt, which, slice.data(), which == StateTensor::Master);
      }
    }
  }
  if (next_unit != units.size())
    throw std::logic_error("gpt backend: the Program's units are not in parameter-group order");
}

TrainingBackend::FullState GptBackendBase::gather_state() {
  FullState out;
  for (const auto& pg : graph.params) {
    out.master.emplace_back();
    out.m.emplace_back();
    out.v.emplace_back();
    gather_group(pg.id, StateTensor::Master, out.master.back());
    gather_group(pg.id, StateTensor::AdamM, out.m.back());
    gather_group(pg.id, StateTensor::AdamV, out.v.back());
  }
  return out;
}

void GptBackendBase::gather_group(int32_t group, StateTensor which, std::vector<float>& out) {
  bind_thread();
  if (!trains())
    throw std::logic_error("this backend was built for a forward-only Program: it keeps the parameters alone, no "
                           "optimizer state to gather");
  if (group < 0 || size_t(group) >= graph.params.size())
    throw std::invalid_argument(fmt::format("gather_group: no parameter group {}", group));
  const int64_t numel = graph.params[size_t(group)].numel;
  out.resize(size_t(numel));
  std::vector<float> tile;
  for (int32_t id : index.group_units[size_t(group)]) {
    const auto& u = unit(id);
    const int64_t off = mine_offset(u), cnt = mine_count(u);
    Staging<float> mine;
    if (holds(u)) {
      mine.resize(size_t(core::shard_aligned(cnt)));
      read_state(which, off, cnt, mine.data());
    }
    // An untiled unit is its whole group: gathered in place (with the ranks' padding, dropped after).
    std::vector<float>& flat = u.tiles == 1 ? out : tile;
    if (owner_based) {
      flat.resize(size_t(u.numel));
      if (u.owner == rank) std::copy_n(mine.data(), u.numel, flat.data());
      comm.broadcast(flat.data(), flat.size() * sizeof(float), u.owner, u.name.c_str());
    } else {
      flat.resize(size_t(u.shard_numel) * size_t(P->data_parallel()));
      comm.all_gather(mine.data(), size_t(u.shard_numel) * sizeof(float), flat.data(), u.name.c_str());
    }
    if (u.tiles > 1) unit_into_group(graph, u, flat.data(), out);
  }
  out.resize(size_t(numel));
}

}  // namespace zinf::engine
