// The planner (core/plan.hpp). It works in four passes:
//  1. decide: budgets per rank, parameter units (groups split into tiles), owners, placement of each
//     state (fixed or `auto`), the tiling factor (fixed or `auto`);
//  2. sequence: the forward order (graph or recorded) cut into runs (segments of `ci` blocks that are
//     checkpointed and recomputed, and the rest), the compute steps of every micro-batch, and the
//     parameter fetches those steps need (with reuse-distance retention);
//  3. schedule prefetch: for each fetch, the compute step before which each of its stages (NVMe
//     read, host->device copy, all-gather or broadcast) is issued, from the prefetch distances and
//     the live-bytes bound;
//  4. emit: tasks in one pass over the steps, each after its dependencies (so ids are a topological
//     order and every lane's order is too), then the optimizer sub-groups, pipelined, either after
//     backward or as their gradients are ready.
// Finally the peak of each tier is found by the idealized list scheduler and checked.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <limits>
#include <queue>

#include "core/activation_pass.hpp"
#include "core/errors.hpp"
#include "core/kernel_activations.hpp"
#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "core/units.hpp"

namespace zinf::core {

class ProgramBuilder {
public:
  explicit ProgramBuilder(Program& p) : p_(p) {}

  int32_t add(Task t, std::initializer_list<int32_t> deps, std::initializer_list<MemEvent> allocs = {},
              std::initializer_list<MemEvent> frees = {}) {
    return add(t, std::vector<int32_t>(deps), std::vector<MemEvent>(allocs), std::vector<MemEvent>(frees));
  }

  int32_t add(Task t, std::vector<int32_t> deps, const std::vector<MemEvent>& allocs,
              const std::vector<MemEvent>& frees) {
    t.id = static_cast<int32_t>(p_.tasks_.size());
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    t.deps_begin = static_cast<uint32_t>(p_.deps_.size());
    for (int32_t d : deps)
      if (d >= 0) p_.deps_.push_back(d);
    t.deps_count = static_cast<uint32_t>(p_.deps_.size()) - t.deps_begin;
    t.allocs_begin = static_cast<uint32_t>(p_.events_.size());
    p_.events_.insert(p_.events_.end(), allocs.begin(), allocs.end());
    t.allocs_count = static_cast<uint32_t>(allocs.size());
    t.frees_begin = static_cast<uint32_t>(p_.events_.size());
    p_.events_.insert(p_.events_.end(), frees.begin(), frees.end());
    t.frees_count = static_cast<uint32_t>(frees.size());
    p_.tasks_.push_back(t);
    return t.id;
  }

  int64_t buffer() { return next_buffer_++; }
  void reset() {
    p_ = Program{};
    next_buffer_ = 0;
  }
  // The Program's fields the planner fills in directly.
  auto& op_order() { return p_.op_order_; }
  auto& shard_space() { return p_.shard_space_; }
  auto& sub_groups() { return p_.sub_groups_; }
  auto& ranks() { return p_.ranks_; }
  auto& gpus_per_node() { return p_.gpus_per_node_; }
  auto& tensor_parallel() { return p_.tensor_parallel_; }
  auto& partitioning() { return p_.partitioning_; }
  auto& micro_batches() { return p_.micro_batches_; }
  auto& units() { return p_.units_; }
  auto& budget() { return p_.budget_; }
  auto& ops() { return p_.ops_; }
  auto& activations() { return p_.activations_; }
  auto& static_bytes() { return p_.static_bytes_; }
  auto& peak() { return p_.peak_; }
  auto& lane_slots() { return p_.lane_slots_; }
  Program& program() { return p_; }

private:
  Program& p_;
  int64_t next_buffer_ = 0;
};

namespace {

constexpr double kParamBytes = 2.0;   // bf16 parameter
constexpr double kGradBytes = 2.0;    // bf16 gradient
constexpr double kStateBytes = 12.0;  // fp32 master weight, Adam m and v
constexpr double kAdamFlopsPerParam = 12.0;
constexpr int kOptimizerPipelineDepth = 3;  // sub-groups in flight: NVMe read, CPU Adam, NVMe write
// Backpressure, so that memory stays bounded however fast or slow each lane runs: a backward step
// that starts new gradients waits until the gradient stored this many reductions ago is stored, and
// a forward step that starts a new checkpoint waits for the save of the one this many before.
constexpr size_t kGradStoresInFlight = 4;
constexpr size_t kCheckpointSavesInFlight = 2;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string bytes_text(double b) { return format_bytes(b); }

struct Run {
  std::vector<int32_t> ops;  // forward order
  bool recompute = false;    // checkpointed at its input and recomputed in backward
  int32_t checkpoint = -1;   // checkpoint index within a micro-batch
  double act_bytes = 0;      // activation working memory while it runs
  double grad_bytes = 0;     // activation gradients during its backward (fp32 working precision only)
  ActivationAction action = ActivationAction::Keep;  // the activation pass's choice (policy not `none`)
  int32_t segment = -1;      // its activation segment when offloaded
  int64_t prefetch_runs = 0; // offloaded: loaded when the backward of the run this many after it begins
};

struct Step {
  TaskKind kind = TaskKind::Forward;
  int32_t op = 0;
  int32_t tile = -1;  // tile of the op's tiled group, -1 when untiled
  int32_t mb = 0;
  int32_t run = 0;
  uint32_t units_begin = 0, units_count = 0;
  // run bookkeeping
  bool first_fwd_of_run = false, last_fwd_of_run = false, first_recompute = false, last_bwd_of_run = false;
  bool starts_bwd_of_run = false;  // first backward-phase step (recompute or backward) of its run
};

struct Fetch {
  int32_t unit = 0;
  int32_t consumer = 0;  // first step using it
  int32_t release = 0;   // last step using it (reuse chain)
  int32_t t_nc = 0, t_h2d = 0, t_ag = 0;
  int32_t last_task = -1;     // the stage that makes the gathered parameter available
  int64_t gathered_buf = -1;  // device buffer of the whole unit
  int32_t nc_task = -1, h2d_task = -1;
  int64_t host_buf = -1, shard_buf = -1;
};

class Planner {
public:
  Planner(const ModelGraph& g, const HwProfile& hw, const RunConfig& c, int ranks, const std::vector<int32_t>& order)
      : g_(g), hw_(hw), c_(c), R_(ranks), T_(std::max<int64_t>(1, g.tensor_parallel)), D_(std::max(1, ranks / static_cast<int>(T_))),
        recorded_(order), wb_(double(hw.node.gpu.working_bytes)) {}

  PlanResult run();

private:
  // pass 1
  void basics();
  void make_units(int64_t tiles);
  PerTier static_bytes_for(int rank) const;
  PerTier max_static() const;
  void place();
  void choose_tiling();
  double device_working_estimate() const;
  // pass 2
  void make_runs();
  void make_steps();
  void make_fetches();
  // pass 3
  void schedule_prefetch();
  // pass 4
  void emit();
  void schedule_run_loads(std::vector<std::vector<int32_t>>& ckpt_load_at, std::vector<std::vector<int32_t>>& act_load_at) const;
  void run_memory_events(const Step& st, std::vector<int32_t>& deps, std::vector<MemEvent>& allocs,
                         std::vector<MemEvent>& frees);
  void emit_fetch_stage(Fetch& f, int stage, int32_t prev_compute);
  void emit_grad_reduction(int32_t unit, int32_t mb, int32_t compute_task);
  void emit_checkpoint_save(int32_t run, int32_t mb, int32_t compute_task);
  void emit_checkpoint_load(int32_t run, int32_t mb, int32_t prev_compute);
  Task activation_task(size_t run, int32_t mb, Phase phase, TaskKind kind, Lane lane, Tier from, Tier to);
  void emit_activation_save(size_t run, int32_t mb, int32_t compute_task);
  void emit_activation_load(size_t run, int32_t mb, int32_t prev_compute);
  // the activation pass (core/activation_pass.hpp): its inputs from this plan, its choices applied to the runs
  void apply_activation_pass(double device_bytes);
  bool activation_policy_on() const { return c_.activation_policy != ActivationPolicy::None; }
  void make_sub_groups();
  void pump_optimizer(bool backward_done);
  bool advance_sub_group(int32_t sg);
  // finish
  void finish_program();
  void reset_emission();
  PerTier schedule_peak() const;
  void account();

  Tier optim_compute_tier() const { return plan_.optimizer == Tier::Device ? Tier::Device : Tier::Host; }
  bool params_partitioned() const { return c_.zero_stage >= 3; }
  bool grads_partitioned() const { return c_.zero_stage >= 2; }
  bool owner_based() const { return plan_.partitioning == Partitioning::OwnerBased; }
  // Bytes of one checkpoint kept in its tier by one rank: a 1/T_ slice when the tensor-parallel
  // group partitions it (and all-gathers it back on the device before the recompute).
  bool ckpt_partitioned() const { return c_.checkpoints_partitioned && T_ > 1; }
  double ckpt_home_bytes() const { return ckpt_partitioned() ? ckpt_bytes_ / double(T_) : ckpt_bytes_; }
  // Elements of `u` that one rank keeps of a partitioned state (owner-based: the owner, all of it).
  int64_t shard_elems(const ParamUnit& u) const { return owner_based() ? u.numel : u.shard_numel; }
  int32_t owner_of(const ParamUnit& u) const { return owner_based() ? u.owner : -1; }
  double unit_bytes(int32_t u) const { return kParamBytes * double(units_[static_cast<size_t>(u)].numel); }

  const ModelGraph& g_;
  const HwProfile& hw_;
  const RunConfig& c_;
  int R_;
  int64_t T_;  // tensor-parallel degree: ranks that split each layer (the graph is one rank's share)
  int D_;      // data-parallel degree, R_ / T_: the ranks a ZeRO partition is split over
  std::vector<int32_t> recorded_;
  // Bytes per element of the device's working tensors (activations, gathered parameters, gradients
  // before their reduction): HwProfile's working precision. Transfers keep their own sizes.
  double wb_;
  std::vector<int32_t> order_;  // forward operator order the program follows
  Plan plan_;
  Program prog_;
  ProgramBuilder b_{prog_};

  std::vector<ParamUnit> units_;
  std::vector<std::vector<int32_t>> group_units_;  // param group -> its units
  std::vector<int64_t> owned_elems_;               // owner-based: each rank's shard space (aligned)
  int64_t shard_space_ = 0;                        // bandwidth-centric: every rank's shard space (aligned)
  std::vector<Run> runs_;
  std::vector<int32_t> op_run_;
  std::vector<Step> steps_;
  std::vector<int32_t> step_units_;
  std::vector<Fetch> fetches_;
  std::vector<int32_t> use_fetch_;  // parallel to step_units_: fetch serving that use (-1: resident)
  // per micro-batch: first and last backward step of each unit
  std::vector<std::vector<int32_t>> first_bwd_, last_bwd_;
  double act_peak_ = 0;
  double ckpt_bytes_ = 0;

  // emission state
  std::vector<int32_t> compute_task_;                 // per step
  std::vector<int64_t> grad_buf_;                     // per unit: device buffer of the current micro-batch's grad
  std::vector<int32_t> grad_store_;                   // per unit: last task storing its gradient (latest mb)
  std::vector<int64_t> act_buf_, act_grad_buf_;       // per run
  std::vector<int64_t> ckpt_dev_buf_, ckpt_home_buf_; // per run (current micro-batch)
  std::vector<int32_t> ckpt_save_task_, ckpt_load_task_;
  std::vector<int32_t> grad_stores_, ckpt_saves_;    // in emission order, for backpressure
  std::vector<ActivationSegment> segments_;           // offloaded activation segments
  std::vector<int32_t> act_save_task_, act_load_task_;  // per run (current micro-batch)
  std::vector<int64_t> act_home_buf_;                 // per run: the offloaded copy's buffer
  std::vector<int32_t> act_saves_;                    // in emission order, for backpressure
  int32_t sync_ckpt_save_ = -1;  // a synchronous checkpoint copy the next compute task waits for
  std::vector<std::vector<int32_t>> run_ckpt_load_trigger_;  // per step: runs whose checkpoint load is issued there
  int32_t backward_done_ = -1;
  int32_t norm_task_ = -1;
  int32_t units_stored_last_mb_ = 0;

  struct SgState {
    int32_t stage = 0;  // 0: inputs, 1: adam, 2: outputs, 3: done
    int32_t pending_units = 0;
    bool ready = false;
    std::vector<int32_t> units;
    int32_t in_states = -1, in_grads = -1, adam = -1;
    std::vector<int32_t> outs;
    int64_t state_buf = -1, grad_buf = -1, param_buf = -1;
    int64_t seq = -1;  // position among its owner's sub-groups, in the order they start
  };
  std::vector<SgState> sg_;
  std::vector<int32_t> sg_ready_order_;
  size_t sg_cursor_ = 0;
  std::vector<std::vector<int32_t>> unit_sgs_;                // unit -> sub-groups it overlaps
  std::vector<std::vector<int32_t>> owner_started_;           // per owner slot: sub-groups started, in order
};

// ---------------------------------------------------------------------------------------------------
// pass 1: decisions

void Planner::basics() {
  if (R_ < 1) throw PlanError(fmt::format("ranks must be at least 1, got {}", R_));
  if (g_.ops.empty()) throw PlanError("the model graph has no operators");
  if (c_.tensor_parallel != T_)
    throw PlanError(fmt::format("the run config's tensor_parallel {} differs from the model graph's {}; build the graph "
                                "with the degree it trains with",
                                c_.tensor_parallel, T_));
  if (T_ > 1) {
    const int G = std::max(1, hw_.node.gpus);
    if (R_ % T_ != 0)
      throw PlanError(fmt::format("tensor_parallel {} does not divide the {} ranks", T_, R_));
    if (std::min(G, R_) % T_ != 0)
      throw PlanError(fmt::format("tensor_parallel {} must divide the {} GPUs of a node: a tensor-parallel group stays "
                                  "inside one node",
                                  T_, std::min(G, R_)));
    if (c_.partitioning == Partitioning::OwnerBased)
      throw PlanError("tensor parallelism is planned with bandwidth-centric partitioning only; "
                      "set partitioning: bandwidth-centric");
  }
  plan_.ranks = R_;
  plan_.gpus_per_node = std::max(1, hw_.node.gpus);
  plan_.nodes = static_cast<int>(ceil_div(R_, plan_.gpus_per_node));
  plan_.partitioning = c_.partitioning;
  plan_.zero_stage = c_.zero_stage;
  plan_.checkpoint_interval = c_.checkpoint_interval;
  plan_.micro_batches = c_.gradient_accumulation;
  plan_.nvme_prefetch_distance = c_.nvme_prefetch_distance;
  plan_.h2d_prefetch_distance = c_.h2d_prefetch_distance;
  plan_.allgather_prefetch_distance = c_.allgather_prefetch_distance;
  plan_.max_live_bytes = c_.max_live_bytes;
  plan_.reuse_distance_bytes = c_.reuse_distance_bytes;
  plan_.sub_group_size = shard_aligned(std::max<int64_t>(1, c_.sub_group_size));
  plan_.optimizer_timing = c_.optimizer_timing;
  plan_.grad_clip = c_.grad_clip > 0;
  plan_.total_params = g_.total_params();
  // Host memory and NVMe are shared by the ranks of a node; each rank gets its share.
  const double per_node = double(std::min(plan_.gpus_per_node, R_));
  plan_.budget = {hw_.gpu_budget(), hw_.host_budget() / per_node, hw_.nvme_budget() / per_node};
  if (c_.micro_batch && *c_.micro_batch != g_.spec.micro_batch)
    throw PlanError(fmt::format("the run config's micro_batch {} differs from the model graph's {}; build the graph "
                                "with the micro-batch it trains with",
                                *c_.micro_batch, g_.spec.micro_batch));
}

void Planner::make_units(int64_t tiles) {
  units_.clear();
  group_units_.assign(g_.params.size(), {});
  for (const auto& pg : g_.params) {
    int64_t t = 1;
    if (pg.tileable && tiles > 1 && pg.rows > 1 && pg.numel % pg.rows == 0) t = std::min<int64_t>(tiles, pg.rows);
    const int64_t per_row = pg.rows > 0 && pg.numel % pg.rows == 0 ? pg.numel / pg.rows : 0;
    const int64_t rows_per_tile = ceil_div(pg.rows, t);
    for (int64_t i = 0; i < t; ++i) {
      ParamUnit u;
      u.id = static_cast<int32_t>(units_.size());
      u.group = pg.id;
      u.tile = static_cast<int32_t>(i);
      u.tiles = static_cast<int32_t>(t);
      u.row_begin = std::min(pg.rows, i * rows_per_tile);
      u.row_end = std::min(pg.rows, (i + 1) * rows_per_tile);
      u.numel = t == 1 ? pg.numel : (u.row_end - u.row_begin) * per_row;
      u.name = t == 1 ? pg.name : fmt::format("{}[t{}/{}]", pg.name, i, t);
      if (u.numel == 0) continue;
      u.id = static_cast<int32_t>(units_.size());
      group_units_[static_cast<size_t>(pg.id)].push_back(u.id);
      units_.push_back(u);
    }
  }
  // Shards: partitioned states are split in `ranks` equal padded shards (bandwidth-centric) or owned
  // whole by the least-loaded rank (owner-based, ZeRO-Offload style). Stage 0 keeps everything whole.
  const int64_t parts = c_.zero_stage >= 1 ? D_ : 1;  // the data-parallel group shares each unit
  int64_t offset = 0;
  for (auto& u : units_) {
    u.shard_numel = ceil_div(u.numel, parts);
    u.shard_offset = offset;
    offset = shard_aligned(offset + u.shard_numel);
  }
  shard_space_ = offset;
  owned_elems_.assign(static_cast<size_t>(R_), 0);
  if (owner_based()) {
    using Load = std::pair<int64_t, int32_t>;
    std::priority_queue<Load, std::vector<Load>, std::greater<>> heap;
    for (int32_t r = 0; r < R_; ++r) heap.push({0, r});
    for (auto& u : units_) {
      auto [load, r] = heap.top();
      heap.pop();
      u.owner = r;
      u.owner_offset = load;
      const int64_t end = shard_aligned(load + u.numel);
      heap.push({end, r});
      owned_elems_[static_cast<size_t>(r)] = end;
    }
  }
}

// Bytes one rank keeps for the whole step, per tier.
PerTier Planner::static_bytes_for(int rank) const {
  int64_t all = 0;
  for (const auto& u : units_) all += u.numel;
  const int64_t mine = owner_based() ? owned_elems_[static_cast<size_t>(rank)] : shard_space_;
  const double params = double(params_partitioned() ? mine : all);
  const double grads = double(grads_partitioned() ? mine : all);
  const double optim = double(c_.zero_stage >= 1 ? mine : all);
  PerTier s{};
  at(s, plan_.params) += kParamBytes * params;
  at(s, plan_.gradients) += kGradBytes * grads;
  at(s, plan_.optimizer) += kStateBytes * optim;
  // Room for one saved training checkpoint (bf16 params + fp32 master, m, v) on the NVMe array that
  // holds the model states: a run that cannot save is not a run (as the memory model counts it).
  if (c_.reserve_nvme_for_checkpoint && (plan_.params == Tier::Nvme || plan_.optimizer == Tier::Nvme))
    at(s, Tier::Nvme) += 14.0 * optim;
  return s;
}

PerTier Planner::max_static() const {
  PerTier m = static_bytes_for(0);
  if (owner_based())
    for (int r = 1; r < R_; ++r) {
      PerTier s = static_bytes_for(r);
      for (int i = 0; i < 3; ++i) m[static_cast<size_t>(i)] = std::max(m[static_cast<size_t>(i)], s[static_cast<size_t>(i)]);
    }
  return m;
}

// What the device needs beyond its static bytes: activations of the largest run, the prefetch
// window, the largest unit gathered with its gradient, and the checkpoints kept on the device.
double Planner::device_working_estimate() const {
  // The largest unit gathered, with its gradient; prefetched units within max_live_bytes; the
  // largest gradient held across backward uses (tied weights); activations of the largest run.
  int64_t largest = 0;
  for (const auto& u : units_) largest = std::max(largest, u.numel);
  const double unit = wb_ * double(largest);
  double ckpt = 0;
  if (plan_.checkpoints == Tier::Device) {
    int64_t n = 0;
    for (const auto& r : runs_) n += r.recompute ? 1 : 0;
    ckpt = ckpt_bytes_ * double(n) * double(plan_.micro_batches);
  } else {
    ckpt = 2 * ckpt_bytes_;
  }
  return act_peak_ + ckpt + std::max(c_.max_live_bytes, unit) + unit;
}

void Planner::place() {
  struct Item {
    const char* name;
    const Placement* want;
    Tier* out;
  };
  Item items[] = {{"params", &c_.params, &plan_.params},
                  {"gradients", &c_.gradients, &plan_.gradients},
                  {"checkpoints", &c_.checkpoints, &plan_.checkpoints},
                  {"optimizer", &c_.optimizer, &plan_.optimizer}};
  // Fixed placements first; `auto` ones start on the device and are moved down one at a time.
  for (auto& it : items) *it.out = it.want->automatic ? Tier::Device : it.want->tier;
  // Without checkpointing nothing is saved; under an activation policy, recomputed segments are.
  if (c_.checkpoint_interval == 0 && !c_.checkpoints.automatic && !activation_policy_on()) plan_.checkpoints = Tier::Device;

  auto ckpt_total = [&] {
    int64_t n = 0;
    for (const auto& r : runs_) n += r.recompute ? 1 : 0;
    return ckpt_home_bytes() * double(n) * double(plan_.micro_batches);
  };
  auto need = [&] {
    PerTier s = max_static();
    at(s, Tier::Device) += device_working_estimate();
    if (plan_.checkpoints != Tier::Device) at(s, plan_.checkpoints) += ckpt_total();
    return s;
  };
  for (auto& it : items) {
    if (!it.want->automatic) {
      plan_.placements.push_back({it.name, *it.out, false, "fixed by the run config"});
      continue;
    }
    std::string reason;
    Tier chosen = Tier::Nvme;
    const std::string name = it.name;
    // Stages 0-2 keep parameters (and stages 0-1 gradients) whole on every device.
    const bool device_only = (name == "params" && !params_partitioned()) || (name == "gradients" && !grads_partitioned());
    for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
      if (t != Tier::Device && device_only) break;
      *it.out = t;
      PerTier s = need();
      const bool fits = at(s, t) <= at(plan_.budget, t);
      reason += fmt::format("{}{}: needs {} of {}{}", reason.empty() ? "" : "; ", to_string(t), bytes_text(at(s, t)),
                            bytes_text(at(plan_.budget, t)), fits ? " -> fits" : " -> too small");
      if (fits) {
        chosen = t;
        break;
      }
    }
    *it.out = chosen;
    plan_.placements.push_back({it.name, chosen, true, reason});
  }
  if (!params_partitioned() && plan_.params != Tier::Device)
    throw PlanError(fmt::format("parameters on {} need ZeRO stage 3 (zero_stage is {}); with stages 0-2 every rank "
                                "keeps all parameters on the device",
                                to_string(plan_.params), c_.zero_stage));
  if (c_.zero_stage < 2 && plan_.gradients != Tier::Device)
    throw PlanError(fmt::format("gradients on {} need ZeRO stage 2 or 3 (zero_stage is {})", to_string(plan_.gradients),
                                c_.zero_stage));
}

void Planner::choose_tiling() {
  if (c_.tiling_factor > 0) {
    plan_.tiling_factor = c_.tiling_factor;
    plan_.tiling_reason = "fixed by the run config";
    make_units(plan_.tiling_factor);
    return;
  }
  int64_t max_rows = 1;
  for (const auto& pg : g_.params)
    if (pg.tileable) max_rows = std::max(max_rows, pg.rows);
  std::string reason;
  double last_need = 0;
  for (int64_t t = 1;; t *= 2) {
    make_units(t);
    const double need = at(max_static(), Tier::Device) + device_working_estimate();
    const bool fits = need <= at(plan_.budget, Tier::Device);
    reason += fmt::format("{}{}: device needs ~{}{}", reason.empty() ? "" : "; ", t, bytes_text(need),
                          fits ? " -> fits" : "");
    // Stop where it fits, or where splitting further no longer helps (an untileable group is largest).
    const bool stuck = t > 1 && need >= last_need;
    last_need = need;
    if (fits || stuck || t >= std::min<int64_t>(max_rows, 4096)) {
      if (stuck && !fits) {
        t /= 2;
        make_units(t);
      }
      plan_.tiling_factor = t;
      plan_.tiling_reason = fmt::format("auto, smallest power of two that fits the device budget of {} ({})",
                                        bytes_text(at(plan_.budget, Tier::Device)), reason);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// pass 2: sequence

void Planner::make_runs() {
  const size_t n = g_.ops.size();
  std::vector<int32_t> order;
  if (recorded_.empty()) {
    order.resize(n);
    std::iota(order.begin(), order.end(), 0);
  } else {
    order = recorded_;
    std::vector<char> seen(n, 0);
    if (order.size() != n) throw PlanError(fmt::format("recorded operator order has {} operators, the graph {}", order.size(), n));
    for (int32_t o : order) {
      if (o < 0 || static_cast<size_t>(o) >= n || seen[static_cast<size_t>(o)])
        throw PlanError(fmt::format("recorded operator order is not a permutation of the graph's operators (at {})", o));
      seen[static_cast<size_t>(o)] = 1;
    }
  }
  order_ = order;
  // Runs: maximal stretches of the order with the same segment key (ci blocks, or outside blocks).
  const int64_t ci = c_.checkpoint_interval;
  auto key = [&](const Operator& o) -> int64_t {
    if (o.block < 0) return -1;
    return ci > 0 ? o.block / ci : o.block;
  };
  const double tokens = double(g_.tokens);
  const auto& s = g_.spec;
  // One rank's share of a block's activations (the graph's spec is the whole model's): the memory
  // model's count, so that both split them under tensor parallelism alike.
  const double per_block = tokens * block_activation_bytes_per_token(s, T_);
  runs_.clear();
  op_run_.assign(n, -1);
  int64_t prev_key = -2;
  for (int32_t id : order) {
    const auto& o = g_.ops[static_cast<size_t>(id)];
    const int64_t k = key(o);
    if (runs_.empty() || k != prev_key) {
      runs_.push_back({});
      runs_.back().recompute = ci > 0 && k >= 0 && !activation_policy_on();
    }
    prev_key = k;
    runs_.back().ops.push_back(id);
    op_run_[static_cast<size_t>(id)] = static_cast<int32_t>(runs_.size() - 1);
  }
  // The first run's input is the batch itself: nothing to checkpoint, so it keeps its activations.
  runs_.front().recompute = false;
  int32_t ckpt = 0;
  act_peak_ = 0;
  for (auto& r : runs_) {
    if (r.recompute) r.checkpoint = ckpt++;
    std::vector<int> blocks;
    double outside = 0;
    for (int32_t id : r.ops) {
      const auto& o = g_.ops[static_cast<size_t>(id)];
      if (o.block >= 0) blocks.push_back(o.block);
      else outside += o.out_bytes;
    }
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    r.act_bytes = per_block * double(blocks.size()) + outside;
    if (wb_ != 2.0) {  // the tensors the fp32 kernels keep, in place of the paper's formula
      const RunActivations k = run_activation_elements(g_, r.ops, r.recompute);
      r.act_bytes = wb_ * k.forward;
      r.grad_bytes = wb_ * k.backward;
    }
  }
  ckpt_bytes_ = wb_ * tokens * double(s.hidden);
  if (wb_ != 2.0)  // the output of a run before a checkpointed one is that checkpoint, counted apart
    for (size_t i = 0; i + 1 < runs_.size(); ++i)
      if (runs_[i + 1].recompute) runs_[i].act_bytes -= ckpt_bytes_;
  for (const auto& r : runs_) act_peak_ = std::max(act_peak_, r.act_bytes + r.grad_bytes);
  plan_.checkpoints_per_micro_batch = ckpt;
}

void Planner::make_steps() {
  steps_.clear();
  step_units_.clear();
  const int mbs = static_cast<int>(plan_.micro_batches);
  auto tiled_group = [&](const Operator& o) -> int32_t {
    for (int32_t pg : o.param_groups)
      if (group_units_[static_cast<size_t>(pg)].size() > 1) return pg;
    return -1;
  };
  auto add_op_steps = [&](int32_t op, TaskKind kind, int32_t mb, bool reverse_tiles) {
    const auto& o = g_.ops[static_cast<size_t>(op)];
    const int32_t tg = tiled_group(o);
    const int32_t tiles = tg >= 0 ? static_cast<int32_t>(group_units_[static_cast<size_t>(tg)].size()) : 1;
    for (int32_t i = 0; i < tiles; ++i) {
      const int32_t tile = reverse_tiles ? tiles - 1 - i : i;
      Step s;
      s.kind = kind;
      s.op = op;
      s.tile = tg >= 0 ? tile : -1;
      s.mb = mb;
      s.run = op_run_[static_cast<size_t>(op)];
      s.units_begin = static_cast<uint32_t>(step_units_.size());
      for (int32_t pg : o.param_groups) {
        const auto& us = group_units_[static_cast<size_t>(pg)];
        if (pg == tg) step_units_.push_back(us[static_cast<size_t>(tile)]);
        else step_units_.insert(step_units_.end(), us.begin(), us.end());
      }
      s.units_count = static_cast<uint32_t>(step_units_.size()) - s.units_begin;
      steps_.push_back(s);
    }
  };
  for (int32_t mb = 0; mb < mbs; ++mb) {
    for (size_t r = 0; r < runs_.size(); ++r) {
      const size_t first = steps_.size();
      for (int32_t op : runs_[r].ops) add_op_steps(op, TaskKind::Forward, mb, false);
      steps_[first].first_fwd_of_run = true;
      steps_.back().last_fwd_of_run = true;
    }
    for (size_t ri = runs_.size(); ri-- > 0;) {
      const auto& run = runs_[ri];
      const size_t first = steps_.size();
      if (run.recompute) {
        for (int32_t op : run.ops) add_op_steps(op, TaskKind::Recompute, mb, false);
        steps_[first].first_recompute = true;
      }
      for (size_t k = run.ops.size(); k-- > 0;) add_op_steps(run.ops[k], TaskKind::Backward, mb, true);
      steps_[first].starts_bwd_of_run = true;
      steps_.back().last_bwd_of_run = true;
    }
  }
  // First and last backward use of every unit, per micro-batch: the gradient buffer lives between.
  first_bwd_.assign(static_cast<size_t>(mbs), std::vector<int32_t>(units_.size(), -1));
  last_bwd_ = first_bwd_;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const auto& s = steps_[i];
    if (s.kind != TaskKind::Backward) continue;
    for (uint32_t k = 0; k < s.units_count; ++k) {
      const int32_t u = step_units_[s.units_begin + k];
      auto& f = first_bwd_[static_cast<size_t>(s.mb)][static_cast<size_t>(u)];
      if (f < 0) f = static_cast<int32_t>(i);
      last_bwd_[static_cast<size_t>(s.mb)][static_cast<size_t>(u)] = static_cast<int32_t>(i);
    }
  }
}

void Planner::make_fetches() {
  fetches_.clear();
  use_fetch_.assign(step_units_.size(), -1);
  // Stages 0-2 keep every parameter on the device: nothing to fetch.
  if (!params_partitioned()) return;
  // Bytes used by the steps before step i: the reuse distance of a use is the bytes used since
  // the unit's previous use.
  std::vector<double> used_before(steps_.size() + 1, 0.0);
  for (size_t i = 0; i < steps_.size(); ++i) {
    double b = 0;
    for (uint32_t k = 0; k < steps_[i].units_count; ++k) b += unit_bytes(step_units_[steps_[i].units_begin + k]);
    used_before[i + 1] = used_before[i] + b;
  }
  std::vector<int32_t> last_step(units_.size(), -1), last_fetch(units_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const auto& s = steps_[i];
    for (uint32_t k = 0; k < s.units_count; ++k) {
      const int32_t u = step_units_[s.units_begin + k];
      const int32_t prev = last_step[static_cast<size_t>(u)];
      if (prev == static_cast<int32_t>(i)) {  // the same unit twice in one step
        use_fetch_[s.units_begin + k] = last_fetch[static_cast<size_t>(u)];
        continue;
      }
      if (prev >= 0 && used_before[i] - used_before[static_cast<size_t>(prev) + 1] < c_.reuse_distance_bytes) {
        const int32_t f = last_fetch[static_cast<size_t>(u)];
        fetches_[static_cast<size_t>(f)].release = static_cast<int32_t>(i);
        use_fetch_[s.units_begin + k] = f;
      } else {
        Fetch f;
        f.unit = u;
        f.consumer = f.release = static_cast<int32_t>(i);
        fetches_.push_back(f);
        use_fetch_[s.units_begin + k] = static_cast<int32_t>(fetches_.size() - 1);
        last_fetch[static_cast<size_t>(u)] = static_cast<int32_t>(fetches_.size() - 1);
      }
      last_step[static_cast<size_t>(u)] = static_cast<int32_t>(i);
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// pass 3: prefetch schedule. A stage with distance d of a fetch consumed at step j is issued before
// step j - d (so it runs beside step j - d - ... j - 1), after compute step j - d - 1 has ended. The
// stage that allocates the whole unit on the device is held back further while the bytes that may
// be live at its start exceed max_live_bytes.

void Planner::schedule_prefetch() {
  const int32_t d_nc = static_cast<int32_t>(c_.nvme_prefetch_distance);
  const int32_t d_h2d = static_cast<int32_t>(c_.h2d_prefetch_distance);
  const int32_t d_ag = static_cast<int32_t>(c_.allgather_prefetch_distance);
  using Live = std::pair<int32_t, double>;  // (release step, bytes)
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  double live_bytes = 0;
  int32_t t_prev = 0;
  for (auto& f : fetches_) {
    const double bytes = unit_bytes(f.unit);
    // The stage that allocates the gathered unit: the all-gather (bandwidth-centric) or the
    // host->device copy into it (owner-based).
    const int32_t d_alloc = owner_based() ? std::max(d_h2d, d_ag) : d_ag;
    int32_t t = std::max({t_prev, f.consumer - d_alloc, 0});
    for (;;) {
      while (!live.empty() && live.top().first < t) {
        live_bytes -= live.top().second;
        live.pop();
      }
      if (t >= f.consumer || live_bytes + bytes <= c_.max_live_bytes) break;
      ++t;
    }
    t_prev = t;
    live.push({f.release, bytes});
    live_bytes += bytes;
    if (owner_based()) {
      f.t_h2d = t;
      f.t_ag = std::min(f.consumer, std::max(t, f.consumer - d_ag));
    } else {
      f.t_ag = t;
      f.t_h2d = std::min(t, std::max(0, f.consumer - d_h2d));
    }
    f.t_nc = std::min(f.t_h2d, std::max(0, f.consumer - d_nc));
  }
  // Monotone per stage, so that each lane's order follows the fetch order.
  int32_t a = 0, h = 0, n = 0;
  for (auto& f : fetches_) {
    f.t_ag = a = std::max(a, f.t_ag);
    f.t_h2d = h = std::max(h, std::min(f.t_h2d, f.t_ag));
    f.t_nc = n = std::max(n, std::min(f.t_nc, f.t_h2d));
  }
}

// ---------------------------------------------------------------------------------------------------
// pass 4: emission

Task make_task(TaskKind kind, Lane lane, Data data, Phase phase) {
  Task t;
  t.kind = kind;
  t.lane = lane;
  t.data = data;
  t.phase = phase;
  return t;
}

// stage 0: NVMe -> host; 1: host -> device (or the owner-based alloc + copy); 2: all-gather / broadcast.
void Planner::emit_fetch_stage(Fetch& f, int stage, int32_t prev_compute) {
  const ParamUnit& u = units_[static_cast<size_t>(f.unit)];
  const Step& consumer = steps_[static_cast<size_t>(f.consumer)];
  const Phase phase = consumer.kind == TaskKind::Forward ? Phase::Forward : Phase::Backward;
  const int32_t owner = owner_of(u);
  const double shard = kParamBytes * double(shard_elems(u));
  const double whole = kParamBytes * double(u.numel);
  const double gathered = owner_based() ? whole : kParamBytes * double(u.shard_numel) * D_;
  // What the gathered copy holds on the device, in the working precision.
  const double gathered_mem = wb_ * double(owner_based() ? u.numel : u.shard_numel * D_);
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
    if (plan_.params != Tier::Nvme) return;
    Task t = base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host);
    t.bytes = shard;
    t.owner = owner;
    f.host_buf = b_.buffer();
    f.nc_task = b_.add(t, {prev_compute}, {{Tier::Host, f.host_buf, shard}});
    f.last_task = f.nc_task;
    return;
  }
  if (stage == 1) {
    if (owner_based()) {
      f.gathered_buf = b_.buffer();
      Task a = base(TaskKind::Alloc, Lane::H2D, Tier::Device, Tier::Device);
      const int32_t alloc = b_.add(a, {prev_compute}, {{Tier::Device, f.gathered_buf, gathered_mem}});
      f.last_task = alloc;
      if (plan_.params == Tier::Device) return;  // the owner broadcasts from its resident copy
      Task t = base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device);
      t.bytes = shard;
      t.owner = owner;
      std::vector<MemEvent> frees;
      if (f.host_buf >= 0) frees.push_back({Tier::Host, f.host_buf, shard});
      f.h2d_task = b_.add(t, {prev_compute, alloc, f.nc_task}, {}, frees);
      f.last_task = f.h2d_task;
      return;
    }
    if (plan_.params == Tier::Device) return;
    Task t = base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device);
    t.bytes = shard;
    f.shard_buf = b_.buffer();
    std::vector<MemEvent> frees;
    if (f.host_buf >= 0) frees.push_back({Tier::Host, f.host_buf, shard});
    f.h2d_task = b_.add(t, {prev_compute, f.nc_task}, {{Tier::Device, f.shard_buf, shard}}, frees);
    f.last_task = f.h2d_task;
    return;
  }
  // stage 2: the collective that makes the whole unit available on every rank
  Task t = base(owner_based() ? TaskKind::Broadcast : TaskKind::AllGather, Lane::Comm, Tier::Device, Tier::Device);
  t.bytes = gathered;
  t.participants = R_;
  t.root = owner;
  if (owner_based()) {
    f.last_task = b_.add(t, {prev_compute, f.last_task}, {}, {});
    return;
  }
  f.gathered_buf = b_.buffer();
  std::vector<MemEvent> frees;
  if (f.shard_buf >= 0) frees.push_back({Tier::Device, f.shard_buf, shard});
  f.last_task = b_.add(t, {prev_compute, f.h2d_task}, {{Tier::Device, f.gathered_buf, gathered_mem}}, frees);
}

// After the unit's last backward use in micro-batch `mb`: reduce its gradient to the shard owner(s)
// and store the shard on the gradients tier, accumulating over micro-batches.
void Planner::emit_grad_reduction(int32_t unit, int32_t mb, int32_t compute_task) {
  const ParamUnit& u = units_[static_cast<size_t>(unit)];
  const int32_t owner = owner_of(u);
  const double whole = kGradBytes * double(u.numel);
  // The whole gradient as this rank holds it before the reduction (padded for a reduce-scatter).
  const double padded = owner_based() || !grads_partitioned() ? whole : kGradBytes * double(u.shard_numel) * D_;
  const double shard = grads_partitioned() ? kGradBytes * double(shard_elems(u)) : whole;
  // The same before accumulation, as the device (and the host staging on its way to NVMe) holds
  // them: in the working precision. The accumulated shard on its tier is bf16.
  const double to_mem = wb_ / kGradBytes;
  const double whole_mem = whole * to_mem, padded_mem = padded * to_mem, shard_mem = shard * to_mem;
  const int64_t full_buf = grad_buf_[static_cast<size_t>(unit)];
  const int32_t prev_store = grad_store_[static_cast<size_t>(unit)];
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) {
    Task t = make_task(k, l, Data::Grad, Phase::Backward);
    t.unit = unit;
    t.micro_batch = mb;
    t.from = from;
    t.to = to;
    return t;
  };
  int32_t last = -1;
  int64_t shard_buf = -1;  // device buffer holding this rank's reduced shard, when it must move on
  if (!grads_partitioned()) {
    Task t = base(TaskKind::AllReduce, Lane::Comm, Tier::Device, Tier::Device);
    t.bytes = whole;
    t.participants = R_;
    last = b_.add(t, {compute_task, prev_store}, {}, {{Tier::Device, full_buf, padded_mem}});
  } else if (owner_based()) {
    Task t = base(TaskKind::Reduce, Lane::Comm, Tier::Device, Tier::Device);
    t.bytes = whole;
    t.participants = R_;
    t.root = owner;
    last = b_.add(t, {compute_task, prev_store}, {}, {});
  } else {
    Task t = base(TaskKind::ReduceScatter, Lane::Comm, Tier::Device, Tier::Device);
    t.bytes = padded;
    t.participants = R_;
    std::vector<MemEvent> allocs;
    if (plan_.gradients != Tier::Device) {
      shard_buf = b_.buffer();
      allocs.push_back({Tier::Device, shard_buf, shard_mem});
    }
    last = b_.add(t, {compute_task, prev_store}, allocs, {{Tier::Device, full_buf, padded_mem}});
  }
  const int32_t reduce = last;
  if (plan_.gradients != Tier::Device) {
    // Device -> host: into the host accumulation buffer, or a staging buffer on its way to NVMe.
    Task t = base(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host);
    t.bytes = shard;
    t.owner = owner;
    std::vector<MemEvent> allocs, frees;
    int64_t host_buf = -1;
    if (plan_.gradients == Tier::Nvme) {
      host_buf = b_.buffer();
      allocs.push_back({Tier::Host, host_buf, shard_mem});
    }
    if (shard_buf >= 0) frees.push_back({Tier::Device, shard_buf, shard_mem});
    last = b_.add(t, std::vector<int32_t>{reduce, prev_store}, allocs, frees);
    if (plan_.gradients == Tier::Nvme) {
      std::vector<MemEvent> wfrees{{Tier::Host, host_buf, shard_mem}};
      int32_t partial = -1;
      if (mb > 0) {  // read the partial sum of the earlier micro-batches, add, write back
        Task r = base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host);
        r.bytes = shard;
        r.owner = owner;
        const int64_t pbuf = b_.buffer();
        partial = b_.add(r, {reduce, prev_store}, {{Tier::Host, pbuf, shard}});
        wfrees.push_back({Tier::Host, pbuf, shard});
      }
      Task w = base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Host, Tier::Nvme);
      w.bytes = shard;
      w.owner = owner;
      last = b_.add(w, std::vector<int32_t>{last, partial}, {}, wfrees);
    }
  }
  if (owner_based() && grads_partitioned()) {  // every rank drops its copy of the whole gradient once the owner has it
    Task fr = base(TaskKind::Free, Lane::D2H, Tier::Device, Tier::Device);
    last = b_.add(fr, {reduce, last}, {}, {{Tier::Device, full_buf, whole_mem}});
  }
  grad_store_[static_cast<size_t>(unit)] = last;
  grad_stores_.push_back(last);
  if (mb == plan_.micro_batches - 1) {
    ++units_stored_last_mb_;
    for (int32_t sg : unit_sgs_[static_cast<size_t>(unit)]) {
      auto& s = sg_[static_cast<size_t>(sg)];
      if (--s.pending_units == 0) {
        s.ready = true;
        sg_ready_order_.push_back(sg);
      }
    }
  }
}

void Planner::emit_checkpoint_save(int32_t run, int32_t mb, int32_t compute_task) {
  const double bytes = ckpt_home_bytes();
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) {
    Task t = make_task(k, l, Data::Checkpoint, Phase::Forward);
    t.checkpoint = runs_[static_cast<size_t>(run)].checkpoint;
    t.micro_batch = mb;
    t.from = from;
    t.to = to;
    t.bytes = bytes;
    return t;
  };
  const size_t r = static_cast<size_t>(run);
  if (plan_.checkpoints == Tier::Device) {
    ckpt_save_task_[r] = compute_task;
    ckpt_saves_.push_back(compute_task);
    return;
  }
  const int64_t host_buf = b_.buffer();
  int32_t t = b_.add(base(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host), {compute_task},
                     {{Tier::Host, host_buf, bytes}}, {{Tier::Device, ckpt_dev_buf_[r], ckpt_bytes_}});
  if (c_.checkpoint_copies_synchronous) sync_ckpt_save_ = t;
  ckpt_home_buf_[r] = host_buf;
  if (plan_.checkpoints == Tier::Nvme) {
    const int64_t nvme_buf = b_.buffer();
    t = b_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Host, Tier::Nvme), {t}, {{Tier::Nvme, nvme_buf, bytes}},
               {{Tier::Host, host_buf, bytes}});
    ckpt_home_buf_[r] = nvme_buf;
  }
  ckpt_save_task_[r] = t;
  ckpt_saves_.push_back(t);
}

void Planner::emit_checkpoint_load(int32_t run, int32_t mb, int32_t prev_compute) {
  const size_t r = static_cast<size_t>(run);
  const double bytes = ckpt_home_bytes();
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) {
    Task t = make_task(k, l, Data::Checkpoint, Phase::Backward);
    t.checkpoint = runs_[r].checkpoint;
    t.micro_batch = mb;
    t.from = from;
    t.to = to;
    t.bytes = bytes;
    return t;
  };
  if (plan_.checkpoints == Tier::Device) {
    ckpt_load_task_[r] = ckpt_save_task_[r];
    return;
  }
  int32_t t = ckpt_save_task_[r];
  int64_t host_buf = ckpt_home_buf_[r];
  if (plan_.checkpoints == Tier::Nvme) {
    const int64_t staging = b_.buffer();
    t = b_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host), {prev_compute, t},
               {{Tier::Host, staging, bytes}}, {{Tier::Nvme, ckpt_home_buf_[r], bytes}});
    host_buf = staging;
  }
  ckpt_dev_buf_[r] = b_.buffer();
  ckpt_load_task_[r] = b_.add(base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device), {prev_compute, t},
                              {{Tier::Device, ckpt_dev_buf_[r], ckpt_bytes_}}, {{Tier::Host, host_buf, bytes}});
  if (ckpt_partitioned()) {
    // The group puts the slices back together on the compute stream before the recompute.
    Task g = base(TaskKind::AllGather, Lane::Compute, Tier::Device, Tier::Device);
    g.bytes = ckpt_bytes_;
    g.participants = static_cast<int>(T_);
    ckpt_load_task_[r] = b_.add(g, {ckpt_load_task_[r]}, {}, {});
  }
}

// One transfer of run r's offloaded activations (its segment, all its bytes) for micro-batch mb.
Task Planner::activation_task(size_t r, int32_t mb, Phase phase, TaskKind kind, Lane lane, Tier from, Tier to) {
  Task t = make_task(kind, lane, Data::Activation, phase);
  t.activation = runs_[r].segment;
  t.micro_batch = mb;
  t.from = from;
  t.to = to;
  t.bytes = runs_[r].act_bytes;
  return t;
}

// An offloaded run's activations leave the device after its last forward: copied to the host
// (and written to NVMe), or written to NVMe straight from the device over GPUDirect Storage.
void Planner::emit_activation_save(size_t r, int32_t mb, int32_t compute_task) {
  const auto& run = runs_[r];
  const auto& seg = segments_[static_cast<size_t>(run.segment)];
  const double bytes = run.act_bytes;
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) { return activation_task(r, mb, Phase::Forward, k, l, from, to); };
  const int64_t home = b_.buffer();
  int32_t t = -1;
  if (seg.gds) {
    t = b_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Device, Tier::Nvme), {compute_task},
               {{Tier::Nvme, home, bytes}}, {{Tier::Device, act_buf_[r], bytes}});
  } else {
    t = b_.add(base(TaskKind::CopyD2H, Lane::D2H, Tier::Device, Tier::Host), {compute_task}, {{Tier::Host, home, bytes}},
               {{Tier::Device, act_buf_[r], bytes}});
    act_home_buf_[r] = home;
    if (seg.tier == Tier::Nvme) {
      const int64_t nvme = b_.buffer();
      t = b_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Tier::Host, Tier::Nvme), {t}, {{Tier::Nvme, nvme, bytes}},
                 {{Tier::Host, home, bytes}});
      act_home_buf_[r] = nvme;
    }
  }
  if (seg.gds) act_home_buf_[r] = home;
  act_save_task_[r] = t;
  act_saves_.push_back(t);
}

// ... and come back into a new device buffer before its backward, which the run's last backward frees.
void Planner::emit_activation_load(size_t r, int32_t mb, int32_t prev_compute) {
  const auto& run = runs_[r];
  const auto& seg = segments_[static_cast<size_t>(run.segment)];
  const double bytes = run.act_bytes;
  auto base = [&](TaskKind k, Lane l, Tier from, Tier to) { return activation_task(r, mb, Phase::Backward, k, l, from, to); };
  int32_t t = act_save_task_[r];
  int64_t home = act_home_buf_[r];
  const int64_t dev = b_.buffer();
  if (seg.gds) {
    t = b_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Device), {prev_compute, t},
               {{Tier::Device, dev, bytes}}, {{Tier::Nvme, home, bytes}});
  } else {
    if (seg.tier == Tier::Nvme) {
      const int64_t staging = b_.buffer();
      t = b_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Tier::Nvme, Tier::Host), {prev_compute, t},
                 {{Tier::Host, staging, bytes}}, {{Tier::Nvme, home, bytes}});
      home = staging;
    }
    t = b_.add(base(TaskKind::CopyH2D, Lane::H2D, Tier::Host, Tier::Device), {prev_compute, t}, {{Tier::Device, dev, bytes}},
               {{Tier::Host, home, bytes}});
  }
  act_buf_[r] = dev;
  act_load_task_[r] = t;
}

void Planner::apply_activation_pass(double device_bytes) {
  std::vector<std::vector<int32_t>> run_ops;
  for (const auto& r : runs_) run_ops.push_back(r.ops);
  std::vector<ActivationLifetime> lifetimes = activation_lifetimes(g_, hw_.node.gpu, run_ops);
  const auto& n = hw_.node;
  const double G = std::max(1, n.gpus);
  const double nvme_spb = G / std::min(n.nvme_read_bandwidth, n.nvme_write_bandwidth);
  ActivationPassInput in;
  in.policy = c_.activation_policy;
  in.tier = c_.activation_tier;
  in.min_prefetch_runs = c_.activation_prefetch_blocks;
  in.device_bytes_for_activations = device_bytes;
  in.checkpoint_bytes = plan_.checkpoints == Tier::Device ? ckpt_bytes_ : 0;
  in.host_seconds_per_byte = 1.0 / n.pcie_bandwidth_all_active();
  in.nvme_seconds_per_byte = std::max(in.host_seconds_per_byte, nvme_spb);
  in.gds_seconds_per_byte = n.has_gds() ? std::max(1.0 / n.gds_bandwidth_all_active(), nvme_spb) : 0;
  double forward = 0;
  for (auto& l : lifetimes) {
    l.bytes = runs_[static_cast<size_t>(l.run)].act_bytes;
    forward += l.forward_seconds;
  }
  // Parameters fetched in forward already use the same paths.
  double shard_bytes = 0;
  for (const auto& u : units_) shard_bytes += kParamBytes * double(shard_elems(u));
  in.pcie_free_seconds = forward - (plan_.params != Tier::Device ? shard_bytes * in.host_seconds_per_byte : 0);
  in.nvme_free_seconds = forward - (plan_.params == Tier::Nvme ? shard_bytes * nvme_spb : 0);
  const PerTier st = max_static();
  in.host_bytes_free = at(plan_.budget, Tier::Host) - at(st, Tier::Host);
  in.nvme_bytes_free = at(plan_.budget, Tier::Nvme) - at(st, Tier::Nvme);
  const std::vector<ActivationChoice> choices = choose_activation_actions(lifetimes, in);

  segments_.clear();
  plan_.activations.clear();
  for (auto& r : runs_) {
    r.action = ActivationAction::Keep;
    r.recompute = false;
    r.checkpoint = -1;
    r.segment = -1;
    r.prefetch_runs = 0;
  }
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    auto& r = runs_[static_cast<size_t>(lifetimes[i].run)];
    r.action = choices[i].action;
    r.recompute = r.action == ActivationAction::Recompute;
    r.prefetch_runs = choices[i].prefetch_runs;
    if (r.action == ActivationAction::Offload) {
      r.segment = static_cast<int32_t>(segments_.size());
      segments_.push_back({r.segment, lifetimes[i].first_block, lifetimes[i].last_block, r.act_bytes, choices[i].tier,
                           choices[i].path == ActivationPath::Gds});
    }
    plan_.activations.push_back({lifetimes[i], choices[i]});
  }
  int32_t ckpt = 0;
  for (auto& r : runs_)
    if (r.recompute) r.checkpoint = ckpt++;
  plan_.checkpoints_per_micro_batch = ckpt;
}

void Planner::make_sub_groups() {
  // A rank's shard space is its shards (bandwidth-centric) or the units it owns (owner-based), in
  // unit order; sub-groups are consecutive ranges of at most sub_group_size elements (aligned).
  const int64_t S = shard_aligned(std::max<int64_t>(1, c_.sub_group_size));
  std::vector<SubGroup> sgs;
  unit_sgs_.assign(units_.size(), {});
  if (!owner_based()) {
    const int64_t space = shard_space_;
    b_.shard_space() = {space};
    for (int64_t off = 0; off < space; off += S) {
      SubGroup g;
      g.id = static_cast<int32_t>(sgs.size());
      g.offset = off;
      g.count = std::min(S, space - off);
      sgs.push_back(g);
    }
    // Units overlapping each sub-group, by walking both in order.
    size_t k = 0;
    for (const auto& u : units_) {
      const int64_t ub = u.shard_offset, ue = ub + u.shard_numel;
      while (k < sgs.size() && sgs[k].offset + sgs[k].count <= ub) ++k;
      for (size_t j = k; j < sgs.size() && sgs[j].offset < ue; ++j)
        unit_sgs_[static_cast<size_t>(u.id)].push_back(static_cast<int32_t>(j));
    }
  } else {
    b_.shard_space() = owned_elems_;
    std::vector<std::vector<int32_t>> owned(static_cast<size_t>(R_));
    for (const auto& u : units_) owned[static_cast<size_t>(u.owner)].push_back(u.id);
    for (int32_t r = 0; r < R_; ++r) {
      const int64_t space = owned_elems_[static_cast<size_t>(r)];
      const size_t first = sgs.size();
      for (int64_t off = 0; off < space; off += S) {
        SubGroup g;
        g.id = static_cast<int32_t>(sgs.size());
        g.offset = off;
        g.count = std::min(S, space - off);
        g.owner = r;
        sgs.push_back(g);
      }
      size_t k = first;
      for (int32_t uid : owned[static_cast<size_t>(r)]) {
        const auto& u = units_[static_cast<size_t>(uid)];
        const int64_t ub = u.owner_offset, ue = ub + u.numel;
        while (k < sgs.size() && sgs[k].offset + sgs[k].count <= ub) ++k;
        for (size_t j = k; j < sgs.size() && sgs[j].offset < ue; ++j)
          unit_sgs_[static_cast<size_t>(uid)].push_back(static_cast<int32_t>(j));
      }
    }
  }
  b_.sub_groups() = sgs;
  plan_.sub_groups = static_cast<int64_t>(sgs.size());
  sg_.assign(sgs.size(), {});
  for (size_t u = 0; u < units_.size(); ++u)
    for (int32_t sg : unit_sgs_[u]) {
      sg_[static_cast<size_t>(sg)].units.push_back(static_cast<int32_t>(u));
      ++sg_[static_cast<size_t>(sg)].pending_units;
    }
  owner_started_.assign(owner_based() ? static_cast<size_t>(R_) : 1, {});
}

// Advances one sub-group through its stages as far as the tasks it depends on exist.
// Returns true when it emitted anything.
bool Planner::advance_sub_group(int32_t id) {
  auto& s = sg_[static_cast<size_t>(id)];
  const SubGroup& g = b_.sub_groups()[static_cast<size_t>(id)];
  const double n = double(g.count);
  const bool overlap = c_.optimizer_timing == OptimizerTiming::OverlapBackward;
  const bool cpu = plan_.optimizer != Tier::Device;
  auto& started = owner_started_[owner_based() ? static_cast<size_t>(g.owner) : 0];
  auto base = [&](TaskKind k, Lane l, Data d, Tier from, Tier to, double bytes) {
    Task t = make_task(k, l, d, Phase::Optimizer);
    t.sub_group = id;
    t.sg_offset = g.offset;
    t.sg_count = g.count;
    t.owner = g.owner;
    t.from = from;
    t.to = to;
    t.bytes = bytes;
    return t;
  };
  std::vector<int32_t> grad_deps;
  for (int32_t u : s.units) grad_deps.push_back(grad_store_[static_cast<size_t>(u)]);
  bool progressed = false;
  if (s.stage == 0) {
    // Inputs may be read ahead, but only `depth` sub-groups of one owner are in flight at once.
    if (!s.ready || (!overlap && backward_done_ < 0)) return false;
    int32_t window_dep = -1;
    if (started.size() >= static_cast<size_t>(kOptimizerPipelineDepth)) {
      const auto& old = sg_[static_cast<size_t>(started[started.size() - kOptimizerPipelineDepth])];
      if (old.stage < 3) return false;
      window_dep = old.outs.empty() ? old.adam : old.outs.back();
      for (int32_t o : old.outs) window_dep = std::max(window_dep, o);
    }
    s.seq = static_cast<int64_t>(started.size());
    started.push_back(id);
    std::vector<int32_t> deps = grad_deps;
    deps.push_back(window_dep);
    if (!overlap) deps.push_back(backward_done_);
    if (plan_.optimizer == Tier::Nvme) {
      s.state_buf = b_.buffer();
      s.in_states = b_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Data::OptimizerState, Tier::Nvme, Tier::Host,
                                kStateBytes * n),
                           {window_dep, overlap ? -1 : backward_done_}, {{Tier::Host, s.state_buf, kStateBytes * n}}, {});
    } else if (plan_.optimizer == Tier::Host) {
      s.in_states = -1;
    }
    // Gradients to where the optimizer runs.
    const Tier where = optim_compute_tier();
    if (plan_.gradients != where) {
      s.grad_buf = b_.buffer();
      if (plan_.gradients == Tier::Nvme) {
        const Tier land = Tier::Host;
        int32_t t = b_.add(base(TaskKind::NvmeRead, Lane::NvmeRead, Data::Grad, Tier::Nvme, land, kGradBytes * n), deps,
                           {{land, s.grad_buf, kGradBytes * n}}, {});
        if (where == Tier::Device) {
          const int64_t dbuf = b_.buffer();
          t = b_.add(base(TaskKind::CopyH2D, Lane::H2D, Data::Grad, Tier::Host, Tier::Device, kGradBytes * n), {t},
                     {{Tier::Device, dbuf, kGradBytes * n}}, {{Tier::Host, s.grad_buf, kGradBytes * n}});
          s.grad_buf = dbuf;
        }
        s.in_grads = t;
      } else if (plan_.gradients == Tier::Device) {
        s.in_grads = b_.add(base(TaskKind::CopyD2H, Lane::D2H, Data::Grad, Tier::Device, Tier::Host, kGradBytes * n),
                            deps, {{Tier::Host, s.grad_buf, kGradBytes * n}}, {});
      } else {  // host -> device for a device optimizer
        s.in_grads = b_.add(base(TaskKind::CopyH2D, Lane::H2D, Data::Grad, Tier::Host, Tier::Device, kGradBytes * n),
                            deps, {{Tier::Device, s.grad_buf, kGradBytes * n}}, {});
      }
    }
    s.stage = 1;
    progressed = true;
  }
  if (s.stage == 1) {
    if (plan_.grad_clip && norm_task_ < 0) return progressed;
    std::vector<int32_t> deps = grad_deps;
    deps.push_back(s.in_states);
    deps.push_back(s.in_grads);
    deps.push_back(norm_task_);
    deps.push_back(overlap ? -1 : backward_done_);
    std::vector<MemEvent> allocs, frees;
    if (s.grad_buf >= 0) frees.push_back({optim_compute_tier(), s.grad_buf, kGradBytes * n});
    // Updated bf16 parameters go back to their tier (and, stages 0-2, to every rank) from a buffer.
    const bool param_elsewhere = plan_.params != optim_compute_tier();
    if (param_elsewhere) {
      s.param_buf = b_.buffer();
      allocs.push_back({optim_compute_tier(), s.param_buf, kParamBytes * n});
    }
    Task t = base(TaskKind::OptimizerStep, cpu ? Lane::CpuOptim : Lane::Compute, Data::OptimizerState,
                  plan_.optimizer, plan_.optimizer, (kGradBytes + 2 * kStateBytes + kParamBytes) * n);
    t.flops = kAdamFlopsPerParam * n;
    s.adam = b_.add(t, deps, allocs, frees);
    s.stage = 2;
    progressed = true;
  }
  if (s.stage == 2) {
    if (plan_.optimizer == Tier::Nvme)
      s.outs.push_back(b_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Data::OptimizerState, Tier::Host, Tier::Nvme,
                                   kStateBytes * n),
                              {s.adam}, {}, {{Tier::Host, s.state_buf, kStateBytes * n}}));
    const Tier where = optim_compute_tier();
    int32_t param_done = s.adam;
    if (plan_.params != where) {
      const double pb = kParamBytes * n;
      if (plan_.params == Tier::Device) {
        param_done = b_.add(base(TaskKind::CopyH2D, Lane::H2D, Data::Param, Tier::Host, Tier::Device, pb), {s.adam}, {},
                            {{Tier::Host, s.param_buf, pb}});
      } else if (plan_.params == Tier::Nvme) {
        int64_t buf = s.param_buf;
        int32_t t = s.adam;
        if (where == Tier::Device) {
          const int64_t hbuf = b_.buffer();
          t = b_.add(base(TaskKind::CopyD2H, Lane::D2H, Data::Param, Tier::Device, Tier::Host, pb), {t},
                     {{Tier::Host, hbuf, pb}}, {{Tier::Device, buf, pb}});
          buf = hbuf;
        }
        param_done = b_.add(base(TaskKind::NvmeWrite, Lane::NvmeWrite, Data::Param, Tier::Host, Tier::Nvme, pb), {t}, {},
                            {{Tier::Host, buf, pb}});
      } else {  // host params, device optimizer
        param_done = b_.add(base(TaskKind::CopyD2H, Lane::D2H, Data::Param, Tier::Device, Tier::Host, pb), {s.adam}, {},
                            {{Tier::Device, s.param_buf, pb}});
      }
      s.outs.push_back(param_done);
    }
    if (!params_partitioned() && R_ > 1 && c_.zero_stage >= 1) {
      // Stages 1-2: every rank needs the updated parameters of every shard.
      Task t = base(owner_based() ? TaskKind::Broadcast : TaskKind::AllGather, Lane::Comm, Data::Param, Tier::Device,
                    Tier::Device, kParamBytes * n * (owner_based() ? 1 : D_));
      t.owner = -1;
      t.participants = R_;
      t.root = g.owner;
      s.outs.push_back(b_.add(t, {param_done}, {}, {}));
    }
    s.stage = 3;
    progressed = true;
  }
  return progressed;
}

void Planner::pump_optimizer(bool backward_done) {
  if (backward_done && plan_.grad_clip && norm_task_ < 0) {
    // Global gradient norm: each rank's partial sum of squares is taken as its accumulated shards
    // are final (fused into the accumulation), combined here and all-reduced; every Adam waits.
    std::vector<int32_t> deps(grad_store_.begin(), grad_store_.end());
    deps.push_back(backward_done_);
    Task n = make_task(TaskKind::GradNorm, plan_.gradients == Tier::Device ? Lane::Compute : Lane::CpuOptim,
                       Data::Scalar, Phase::Optimizer);
    n.from = n.to = plan_.gradients;
    n.bytes = 8;
    const int32_t partial = b_.add(n, deps, {}, {});
    Task a = make_task(TaskKind::AllReduce, Lane::Comm, Data::Scalar, Phase::Optimizer);
    a.bytes = 8;
    a.participants = R_;
    norm_task_ = b_.add(a, {partial}, {}, {});
  }
  // Sub-groups start in the order their gradients became ready; keep advancing until stuck.
  for (bool any = true; any;) {
    any = false;
    for (size_t i = sg_cursor_; i < sg_ready_order_.size(); ++i) any |= advance_sub_group(sg_ready_order_[i]);
    while (sg_cursor_ < sg_ready_order_.size() && sg_[static_cast<size_t>(sg_ready_order_[sg_cursor_])].stage == 3)
      ++sg_cursor_;
  }
}

// The compute step's part in its run's activations and checkpoints: the run's activation buffer,
// the next run's checkpoint, the loads it waits for and the saves that hold it back.
void Planner::run_memory_events(const Step& st, std::vector<int32_t>& deps, std::vector<MemEvent>& allocs,
                                std::vector<MemEvent>& frees) {
  const size_t ri = static_cast<size_t>(st.run);
  const auto& run = runs_[ri];
  if (st.first_fwd_of_run || st.first_recompute) {
    act_buf_[ri] = b_.buffer();
    allocs.push_back({Tier::Device, act_buf_[ri], run.act_bytes});
    if (run.action == ActivationAction::Offload && act_saves_.size() >= kCheckpointSavesInFlight)
      deps.push_back(act_saves_[act_saves_.size() - kCheckpointSavesInFlight]);
  }
  if (st.starts_bwd_of_run && run.action == ActivationAction::Offload) deps.push_back(act_load_task_[ri]);
  if (st.first_recompute) deps.push_back(ckpt_load_task_[ri]);
  if (sync_ckpt_save_ >= 0) {
    deps.push_back(sync_ckpt_save_);
    sync_ckpt_save_ = -1;
  }
  const bool next_is_ckpt = ri + 1 < runs_.size() && runs_[ri + 1].recompute;
  if (st.last_fwd_of_run && next_is_ckpt) {
    if (ckpt_saves_.size() >= kCheckpointSavesInFlight) deps.push_back(ckpt_saves_[ckpt_saves_.size() - kCheckpointSavesInFlight]);
    ckpt_dev_buf_[ri + 1] = b_.buffer();
    allocs.push_back({Tier::Device, ckpt_dev_buf_[ri + 1], ckpt_bytes_});
  }
  if (st.last_fwd_of_run && run.recompute) frees.push_back({Tier::Device, act_buf_[ri], run.act_bytes});
  if (run.grad_bytes > 0 && st.kind == TaskKind::Backward && act_grad_buf_[ri] < 0) {
    act_grad_buf_[ri] = b_.buffer();
    allocs.push_back({Tier::Device, act_grad_buf_[ri], run.grad_bytes});
  }
  if (st.last_bwd_of_run) {
    if (act_grad_buf_[ri] >= 0) frees.push_back({Tier::Device, act_grad_buf_[ri], run.grad_bytes});
    act_grad_buf_[ri] = -1;
    frees.push_back({Tier::Device, act_buf_[ri], run.act_bytes});
    if (run.recompute) frees.push_back({Tier::Device, ckpt_dev_buf_[ri], ckpt_bytes_});
  }
}

// Which step each run's load is issued before, per micro-batch: checkpoint loads of recomputed
// runs and loads of offloaded runs' activations.
void Planner::schedule_run_loads(std::vector<std::vector<int32_t>>& ckpt_load_at,
                                 std::vector<std::vector<int32_t>>& act_load_at) const {
  const size_t S = steps_.size();
  // A recomputed run's checkpoint is loaded while the run after it (in forward order) runs its
  // backward, one run ahead of its own recompute; with synchronous copies, when its recompute is next.
  std::vector<int32_t> start_of(runs_.size(), -1);
  for (size_t i = 0; i < S; ++i) {
    const auto& s = steps_[i];
    if (s.starts_bwd_of_run) start_of[static_cast<size_t>(s.run)] = static_cast<int32_t>(i);
    if (s.last_bwd_of_run && s.run == 0) {  // the micro-batch's backward is complete: assign loads
      for (size_t r = 0; r < runs_.size(); ++r) {
        if (!runs_[r].recompute) continue;
        const int32_t at =
            r + 1 < runs_.size() && !c_.checkpoint_copies_synchronous ? start_of[r + 1] : start_of[r];
        ckpt_load_at[static_cast<size_t>(at)].push_back(static_cast<int32_t>(r));
      }
      // An offloaded run comes back when the backward of the run prefetch_runs after it begins (the
      // pass's choice: early enough to hide the load, at least activation_prefetch_blocks); loads
      // issued together go in the order backward needs them (the later run first).
      for (size_t r = runs_.size(); r-- > 0;) {
        if (runs_[r].action != ActivationAction::Offload) continue;
        const size_t from = std::min(runs_.size() - 1, r + static_cast<size_t>(runs_[r].prefetch_runs));
        act_load_at[static_cast<size_t>(start_of[from])].push_back(static_cast<int32_t>(r));
      }
    }
  }
}

void Planner::emit() {
  const size_t S = steps_.size();
  compute_task_.assign(S, -1);
  grad_buf_.assign(units_.size(), -1);
  grad_store_.assign(units_.size(), -1);
  act_buf_.assign(runs_.size(), -1);
  act_grad_buf_.assign(runs_.size(), -1);
  ckpt_dev_buf_.assign(runs_.size(), -1);
  ckpt_home_buf_.assign(runs_.size(), -1);
  ckpt_save_task_.assign(runs_.size(), -1);
  ckpt_load_task_.assign(runs_.size(), -1);
  act_save_task_.assign(runs_.size(), -1);
  act_load_task_.assign(runs_.size(), -1);
  act_home_buf_.assign(runs_.size(), -1);
  make_sub_groups();

  // Fetch stages and checkpoint loads grouped by the step before which they are issued.
  std::vector<std::vector<int32_t>> at_nc(S), at_h2d(S), at_ag(S);
  for (size_t f = 0; f < fetches_.size(); ++f) {
    at_nc[static_cast<size_t>(fetches_[f].t_nc)].push_back(static_cast<int32_t>(f));
    at_h2d[static_cast<size_t>(fetches_[f].t_h2d)].push_back(static_cast<int32_t>(f));
    at_ag[static_cast<size_t>(fetches_[f].t_ag)].push_back(static_cast<int32_t>(f));
  }
  std::vector<std::vector<int32_t>> ckpt_load_at(S), act_load_at(S);
  schedule_run_loads(ckpt_load_at, act_load_at);

  int32_t prev = -1;
  for (size_t i = 0; i < S; ++i) {
    const Step& st = steps_[i];
    for (int32_t f : at_nc[i]) emit_fetch_stage(fetches_[static_cast<size_t>(f)], 0, prev);
    for (int32_t f : at_h2d[i]) emit_fetch_stage(fetches_[static_cast<size_t>(f)], 1, prev);
    for (int32_t f : at_ag[i]) emit_fetch_stage(fetches_[static_cast<size_t>(f)], 2, prev);
    for (int32_t r : ckpt_load_at[i]) emit_checkpoint_load(r, st.mb, prev);
    for (int32_t r : act_load_at[i]) emit_activation_load(static_cast<size_t>(r), st.mb, prev);

    const Operator& op = g_.ops[static_cast<size_t>(st.op)];
    const auto& run = runs_[static_cast<size_t>(st.run)];
    const size_t ri = static_cast<size_t>(st.run);
    Task t = make_task(st.kind, Lane::Compute, Data::Activation, st.kind == TaskKind::Forward ? Phase::Forward : Phase::Backward);
    t.op = st.op;
    t.micro_batch = st.mb;
    t.from = t.to = Tier::Device;
    const double frac = st.tile >= 0 ? double(units_[static_cast<size_t>(step_units_[st.units_begin])].row_end -
                                              units_[static_cast<size_t>(step_units_[st.units_begin])].row_begin) /
                                           double(g_.params[static_cast<size_t>(units_[static_cast<size_t>(step_units_[st.units_begin])].group)].rows)
                                     : 1.0;
    t.flops = (st.kind == TaskKind::Backward ? op.bwd_flops : op.fwd_flops) * frac;
    t.bytes = op.fwd_bytes * frac * (st.kind == TaskKind::Backward ? 2.0 : 1.0);
    if (op.m > 0)  // the efficiency curves' argument: an attention's head size, a linear's (tile's) intensity
      t.gemm_dim = op.kind == OpKind::Attention
                       ? std::min({op.m, op.n, op.k})
                       : std::lround(gemm_intensity_dim(double(op.m), std::max(1.0, double(op.n) * frac), double(op.k)));
    if (st.units_count > 0) t.unit = step_units_[st.units_begin];
    if (run.recompute) t.checkpoint = run.checkpoint;

    std::vector<int32_t> deps{prev};
    std::vector<MemEvent> allocs, frees;
    for (uint32_t k = 0; k < st.units_count; ++k) {
      const int32_t f = use_fetch_[st.units_begin + k];
      if (f < 0) continue;
      const Fetch& fe = fetches_[static_cast<size_t>(f)];
      deps.push_back(fe.last_task);
      if (fe.release == static_cast<int32_t>(i) &&
          std::find_if(frees.begin(), frees.end(), [&](const MemEvent& e) { return e.buffer == fe.gathered_buf; }) ==
              frees.end())
        frees.push_back({Tier::Device, fe.gathered_buf, wb_ * double(owner_based() ? units_[static_cast<size_t>(fe.unit)].numel
                                                                                             : units_[static_cast<size_t>(fe.unit)].shard_numel * D_)});
    }
    run_memory_events(st, deps, allocs, frees);
    // Gradients of whole units live from their first to their last backward use.
    if (st.kind == TaskKind::Backward) {
      for (uint32_t k = 0; k < st.units_count; ++k) {
        const int32_t u = step_units_[st.units_begin + k];
        if (first_bwd_[static_cast<size_t>(st.mb)][static_cast<size_t>(u)] == static_cast<int32_t>(i)) {
          if (grad_stores_.size() >= kGradStoresInFlight) deps.push_back(grad_stores_[grad_stores_.size() - kGradStoresInFlight]);
          grad_buf_[static_cast<size_t>(u)] = b_.buffer();
          const auto& un = units_[static_cast<size_t>(u)];
          const double gb = owner_based() || !grads_partitioned() ? wb_ * double(un.numel)
                                                                  : wb_ * double(un.shard_numel) * D_;
          allocs.push_back({Tier::Device, grad_buf_[static_cast<size_t>(u)], gb});
        }
      }
    }
    prev = compute_task_[i] = b_.add(t, deps, allocs, frees);
    const int32_t computed = prev;
    // Tensor parallelism: the group all-reduces the operator's output (forward, recompute) or its
    // input gradient (backward) after its last tile, on the compute stream, before anything uses it.
    const bool last_tile = i + 1 == S || steps_[i + 1].op != st.op || steps_[i + 1].kind != st.kind || steps_[i + 1].mb != st.mb;
    if (const double ar = st.kind == TaskKind::Backward ? op.tp_bwd_allreduce_bytes : op.tp_fwd_allreduce_bytes;
        T_ > 1 && ar > 0 && last_tile) {
      Task a = make_task(TaskKind::AllReduce, Lane::Compute, Data::Activation,
                         st.kind == TaskKind::Backward ? Phase::Backward : Phase::Forward);
      a.op = st.op;
      a.micro_batch = st.mb;
      a.from = a.to = Tier::Device;
      a.bytes = ar;
      a.participants = static_cast<int>(T_);
      prev = b_.add(a, {computed}, {}, {});
    }

    if (st.last_fwd_of_run && ri + 1 < runs_.size() && runs_[ri + 1].recompute)
      emit_checkpoint_save(static_cast<int32_t>(ri + 1), st.mb, prev);
    if (st.last_fwd_of_run && run.action == ActivationAction::Offload) emit_activation_save(ri, st.mb, prev);
    if (st.kind == TaskKind::Backward) {
      for (uint32_t k = 0; k < st.units_count; ++k) {
        const int32_t u = step_units_[st.units_begin + k];
        if (last_bwd_[static_cast<size_t>(st.mb)][static_cast<size_t>(u)] == static_cast<int32_t>(i)) {
          bool dup = false;  // the same unit twice in one step reduces once
          for (uint32_t j = 0; j < k; ++j) dup |= step_units_[st.units_begin + j] == u;
          if (!dup) emit_grad_reduction(u, st.mb, computed);
        }
      }
      if (c_.optimizer_timing == OptimizerTiming::OverlapBackward) pump_optimizer(false);
    }
  }
  backward_done_ = prev;
  // Units that no backward step touched (none in a GPT, but a graph may have them) have no gradient.
  pump_optimizer(true);
  for (const auto& s : sg_)
    if (s.stage != 3)
      throw PlanError("internal: an optimizer sub-group was never scheduled (a unit's gradient is never produced)");
}

void Planner::finish_program() {
  b_.ranks() = R_;
  b_.gpus_per_node() = plan_.gpus_per_node;
  b_.tensor_parallel() = static_cast<int>(T_);
  b_.partitioning() = plan_.partitioning;
  b_.micro_batches() = static_cast<int>(plan_.micro_batches);
  b_.units() = units_;
  b_.op_order() = order_;
  b_.budget() = plan_.budget;
  b_.lane_slots() = lane_slots_for(c_);
  b_.activations() = segments_;
  b_.ops().clear();
  for (const auto& o : g_.ops) {
    OpInfo info;
    info.id = o.id;
    info.name = o.name;
    info.kind = to_string(o.kind);
    info.m = o.m;
    info.n = o.n;
    info.k = o.k;
    info.block = o.block;
    for (int32_t pg : o.param_groups) {
      const auto& us = group_units_[static_cast<size_t>(pg)];
      if (us.size() > 1 && o.n > 0) info.n = ceil_div(o.n, static_cast<int64_t>(us.size()));
    }
    b_.ops().push_back(info);
  }
  if (owner_based()) {
    b_.static_bytes().clear();
    for (int r = 0; r < R_; ++r) b_.static_bytes().push_back(static_bytes_for(r));
  } else {
    b_.static_bytes() = {static_bytes_for(0)};
  }
}

void Planner::account() {
  // Data moved by rank 0 (owner-based: summed over ranks, divided by ranks, is the mean).
  const int r = 0;
  for (const auto& t : prog_.tasks()) {
    if (!prog_.active(t, r)) continue;
    const bool moves = t.kind == TaskKind::NvmeRead || t.kind == TaskKind::CopyH2D || t.kind == TaskKind::NvmeWrite ||
                       t.kind == TaskKind::CopyD2H;
    if (t.data == Data::Param && t.phase != Phase::Optimizer) {
      // From the params tier: the first stage of each fetch.
      const bool first = (plan_.params == Tier::Nvme && t.kind == TaskKind::NvmeRead) ||
                         (plan_.params == Tier::Host && t.kind == TaskKind::CopyH2D) ||
                         (plan_.params == Tier::Device && (t.kind == TaskKind::AllGather || t.kind == TaskKind::Broadcast));
      if (first) plan_.param_bytes_fetched += t.kind == TaskKind::AllGather ? t.bytes / D_ : t.bytes;
    }
    if (t.data == Data::Grad && t.phase == Phase::Backward && moves && t.to == plan_.gradients) plan_.grad_bytes_stored += t.bytes;
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeRead) plan_.optimizer_bytes_read += t.bytes;
    if (t.data == Data::OptimizerState && t.kind == TaskKind::NvmeWrite) plan_.optimizer_bytes_written += t.bytes;
    if (t.data == Data::Checkpoint && moves && t.phase == Phase::Forward && t.to == plan_.checkpoints)
      plan_.checkpoint_bytes_saved += t.bytes;
    if (t.data == Data::Checkpoint && moves && t.phase == Phase::Backward && t.from == plan_.checkpoints)
      plan_.checkpoint_bytes_loaded += t.bytes;
    if (t.data == Data::Activation && moves && t.from == Tier::Device) plan_.activation_bytes_offloaded += t.bytes;
    if (t.data == Data::Activation && moves && t.to == Tier::Device) plan_.activation_bytes_restored += t.bytes;
    if (t.kind == TaskKind::NvmeWrite) plan_.nvme_bytes_written += t.bytes;
    if (t.kind == TaskKind::NvmeRead) plan_.nvme_bytes_read += t.bytes;
  }
  int64_t space = 0;
  for (int rr = 0; rr < (owner_based() ? R_ : 1); ++rr) space = std::max(space, prog_.shard_space(rr));
  plan_.shard_numel = space;
}

void Planner::reset_emission() {
  b_.reset();
  fetches_.clear();
  sg_.clear();
  sg_ready_order_.clear();
  grad_stores_.clear();
  ckpt_saves_.clear();
  act_saves_.clear();
  sync_ckpt_save_ = -1;
  sg_cursor_ = 0;
  backward_done_ = -1;
  norm_task_ = -1;
  units_stored_last_mb_ = 0;
}

// Static + live bytes per tier at the worst moment of the idealized schedule, over the ranks that
// differ (one for bandwidth-centric programs, every rank for owner-based ones).
PerTier Planner::schedule_peak() const {
  std::vector<int> ranks{0};
  if (owner_based())
    for (int r = 1; r < R_; ++r) ranks.push_back(r);
  // Executors do not run at nominal rates: take the worst of the nominal schedule, one where data
  // moves 100x faster (prefetch as eager as the dependencies allow) and one where compute does
  // (data movement lags and buffers wait for their consumers).
  HwProfile fast_io = hw_, fast_compute = hw_;
  for (double* rate : {&fast_io.node.pcie_bandwidth, &fast_io.node.pcie_switch_uplink, &fast_io.node.nvme_read_bandwidth,
                       &fast_io.node.nvme_write_bandwidth, &fast_io.node.nvlink_bandwidth, &fast_io.node.nic_bandwidth})
    *rate *= 100;
  for (double* rate : {&fast_compute.node.gpu.peak_flops, &fast_compute.node.gpu.memory_bandwidth,
                       &fast_compute.node.cpu_adam_rate, &fast_compute.node.host_memory_bandwidth})
    *rate *= 100;
  // Owner-based programs are scheduled for every rank; at hundreds of ranks and 10^5 tasks only the
  // nominal schedule is affordable, and the peak is taken on the ranks most likely to hold it:
  // rank 0, the most loaded rank and the owners of the largest units.
  std::vector<const HwProfile*> scenarios{&hw_, &fast_io, &fast_compute};
  if (owner_based() && double(R_) * double(prog_.tasks().size()) > 2e7) {
    scenarios.resize(1);
    std::vector<int32_t> by_size(units_.size());
    std::iota(by_size.begin(), by_size.end(), 0);
    std::stable_sort(by_size.begin(), by_size.end(), [&](int32_t a, int32_t b) {
      return units_[static_cast<size_t>(a)].numel > units_[static_cast<size_t>(b)].numel;
    });
    ranks = {0, static_cast<int>(std::max_element(owned_elems_.begin(), owned_elems_.end()) - owned_elems_.begin())};
    for (size_t i = 0; i < std::min<size_t>(8, by_size.size()); ++i) ranks.push_back(units_[static_cast<size_t>(by_size[i])].owner);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  }
  PerTier peak = prog_.static_bytes(0);
  for (const HwProfile* hw : scenarios) {
    for (const auto& p : ideal_peak_bytes(prog_, *hw, ranks))
      for (size_t i = 0; i < 3; ++i) peak[i] = std::max(peak[i], p[i]);
  }
  return peak;
}

PlanResult Planner::run() {
  basics();
  make_runs();
  make_units(std::max<int64_t>(1, c_.tiling_factor));
  place();
  choose_tiling();
  plan_.static_bytes = max_static();
  for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
    const double over = at(plan_.static_bytes, t) - at(plan_.budget, t);
    if (over > 0)
      throw PlanError(fmt::format("{} is short by {} per rank: the states placed there need {} of its {} budget", to_string(t),
                                  bytes_text(over), bytes_text(at(plan_.static_bytes, t)), bytes_text(at(plan_.budget, t))));
  }
  if (plan_.grad_clip && c_.optimizer_timing == OptimizerTiming::OverlapBackward)
    plan_.optimizer_timing_note =
        "overlap with gradient clipping: optimizer states and gradients of ready sub-groups are read during "
        "backward, but every Adam step waits for the all-reduced global gradient norm, so the update stays exact";
  else if (c_.optimizer_timing == OptimizerTiming::OverlapBackward)
    plan_.optimizer_timing_note = "each sub-group is updated as soon as its gradient shards are reduced and stored";
  else
    plan_.optimizer_timing_note = "sub-groups are updated after backward";

  // Peak per tier under the idealized schedule (see schedule_peak). Every buffer's lifetime is
  // bounded by dependencies (prefetch distances and live bytes, backpressure on gradient stores and
  // checkpoint saves, the optimizer pipeline depth), so executors at other rates stay close; they
  // check their own Timelines against the same budget. An `auto` tiling factor whose estimate was
  // too hopeful is doubled until the schedule fits.
  PerTier peak{};
  // The activation pass first keeps every segment it can (the room its estimate leaves, or all of
  // them); where the schedule's device peak is over budget, it aims lower by the excess and plans
  // again (at most 6 times).
  plan_.activation_policy = c_.activation_policy;
  double act_room = std::numeric_limits<double>::infinity();
  int act_attempts = 0;
  for (int attempt = 0;; ++attempt) {
    if (activation_policy_on()) apply_activation_pass(act_room);
    make_steps();
    make_fetches();
    schedule_prefetch();
    emit();
    finish_program();
    peak = schedule_peak();
    const bool device_short = at(peak, Tier::Device) > at(plan_.budget, Tier::Device);
    if (device_short && c_.activation_policy == ActivationPolicy::Lifetime && act_attempts < 6 &&
        plan_.activations.size() > segments_.size() + static_cast<size_t>(plan_.checkpoints_per_micro_batch)) {
      const double excess = at(peak, Tier::Device) - at(plan_.budget, Tier::Device);
      double kept = 0;
      for (const auto& d : plan_.activations)
        if (d.choice.action == ActivationAction::Keep) kept += d.lifetime.bytes;
      act_room = std::min(act_room, kept) - excess;
      plan_.activation_note += fmt::format("{}device peak {} over budget with {} kept: keep at most {}",
                                           plan_.activation_note.empty() ? "" : "; ", bytes_text(excess), bytes_text(kept),
                                           bytes_text(std::max(0.0, act_room)));
      ++act_attempts;
      reset_emission();
      continue;
    }
    if (!(device_short && c_.tiling_factor == 0 && attempt < 3)) break;
    plan_.tiling_factor *= 2;
    plan_.tiling_reason += fmt::format("; the schedule's device peak {} is over budget: {}", bytes_text(at(peak, Tier::Device)),
                                       plan_.tiling_factor);
    make_units(plan_.tiling_factor);
    reset_emission();
  }
  b_.peak() = peak;
  plan_.peak_bytes = peak;
  for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
    const double over = at(peak, t) - at(plan_.budget, t);
    if (over > 0)
      throw PlanError(fmt::format("{} is short by {} per rank at the step's peak ({} needed, {} budget); lower "
                                  "max_live_bytes or the micro-batch, raise the tiling factor, or offload more",
                                  to_string(t), bytes_text(over), bytes_text(at(peak, t)), bytes_text(at(plan_.budget, t))));
  }
  account();
  return {std::move(plan_), std::move(prog_)};
}

}  // namespace

namespace {

// `auto` placements are chosen greedily (each state in turn takes the fastest tier that fits given
// the others). When that choice is refused, every combination of tiers for the `auto` states is
// planned, fastest first (fewest states off the device, then host before NVMe, in the order
// params, gradients, checkpoints, optimizer), with the tiling factor left as the config gives it;
// the first the planner accepts is the plan. So `auto` finds a fitting combination whenever one
// exists among these choices (tests/planner_test.cpp checks it against an exhaustive search). A
// combination whose states alone are too large is refused before any scheduling, so the search
// costs little more than the greedy attempt unless many combinations nearly fit.
PlanResult search_auto_tiers(const ModelGraph& graph, const HwProfile& hw, const RunConfig& config, int ranks,
                             const std::vector<int32_t>& recorded_order, const PlanError& greedy) {
  struct Auto {
    const char* state;
    Placement RunConfig::*field;
  };
  std::vector<Auto> autos;
  for (Auto a : {Auto{"params", &RunConfig::params}, Auto{"gradients", &RunConfig::gradients},
                 Auto{"checkpoints", &RunConfig::checkpoints}, Auto{"optimizer", &RunConfig::optimizer}})
    if ((config.*a.field).automatic) autos.push_back(a);
  const std::vector<Tier> tiers{Tier::Device, Tier::Host, Tier::Nvme};
  std::vector<std::vector<Tier>> combos{{}};
  for (size_t k = 0; k < autos.size(); ++k) {
    std::vector<std::vector<Tier>> next;
    for (const auto& c : combos)
      for (Tier t : tiers) {
        next.push_back(c);
        next.back().push_back(t);
      }
    combos = std::move(next);
  }
  auto cost = [](const std::vector<Tier>& c) {
    int off = 0, rank = 0;
    for (Tier t : c) {
      off += t != Tier::Device;
      rank += t == Tier::Nvme ? 2 : t == Tier::Host ? 1 : 0;
    }
    return std::pair{off, rank};
  };
  std::stable_sort(combos.begin(), combos.end(), [&](const auto& a, const auto& b) { return cost(a) < cost(b); });
  int tried = 0;
  for (const auto& combo : combos) {
    RunConfig c = config;
    for (size_t k = 0; k < autos.size(); ++k) c.*autos[k].field = {false, combo[k]};
    ++tried;
    try {
      PlanResult r = make_plan(graph, hw, c, ranks, recorded_order);
      for (auto& d : r.plan.placements)
        for (const auto& a : autos)
          if (d.state == a.state) {
            d.automatic = true;
            d.reason = fmt::format("the greedy choice was refused ({}); the first of {} combinations of the auto "
                                   "tiers that the planner accepts, fastest first ({} tried)",
                                   greedy.what(), combos.size(), tried);
          }
      return r;
    } catch (const PlanError&) {
    }
  }
  throw greedy;
}

}  // namespace

PlanResult make_plan(const ModelGraph& graph, const HwProfile& hw, const RunConfig& config, int ranks,
                     const std::vector<int32_t>& recorded_order) {
  try {
    Planner p(graph, hw, config, ranks, recorded_order);
    return p.run();
  } catch (const PlanError& greedy) {
    const bool any_auto = config.params.automatic || config.gradients.automatic || config.optimizer.automatic ||
                          config.checkpoints.automatic;
    if (!any_auto) throw;
    return search_auto_tiers(graph, hw, config, ranks, recorded_order, greedy);
  }
}

}  // namespace zinf::core
