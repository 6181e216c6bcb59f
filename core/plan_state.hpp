// The planner's private state (not part of zinf_core's interface): what its passes share.
//
// make_plan (core/planner.cpp) builds one PlanState from the model graph, the hardware profile and the
// run config, and runs the passes over it in order; each pass lives in its own file and reads the
// fields the earlier passes filled in:
//   partition   (plan_partition.cpp)  checks the inputs, sets the budgets, cuts parameter groups into
//                                     units (tiles) with their shards or owners: units_, shard space;
//   runs        (plan_runs.cpp)       cuts the forward order into runs (checkpointed and recomputed, or
//                                     kept), their activation bytes, and applies the activation pass;
//   placement   (plan_placement.cpp)  the tier of each state (fixed or `auto`), and the search over
//                                     `auto` combinations when the greedy choice is refused;
//   tiling      (plan_tiling.cpp)     the tiling factor (fixed or `auto`), and the compute steps of
//                                     every micro-batch, one per operator tile: steps_;
//   schedule    (plan_schedule.cpp)   the parameter fetches (reuse-distance retention), the step each
//                                     of their stages is issued before (prefetch), when checkpoint and
//                                     activation loads are issued, and the idealized schedule's peak;
//   emission    (plan_emit.cpp)       the tasks, in one pass over the steps, into the Program;
//   optimizer   (plan_optimizer.cpp)  the sub-groups and their pipelined update, pumped by emission.
// A PlanState is used by one thread, once (planning again means a new PlanState).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/activation_pass.hpp"
#include "core/errors.hpp"
#include "core/fit.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "core/units.hpp"

namespace zinf::core {

// What a buffer a task allocates holds, where the emission does not say: a transfer's data and
// tier. A compute task's allocations (activations, checkpoints, gradients) are always stated.
inline MemUse stated_use(const Task& t, Tier tier) {
  if (t.phase == Phase::Optimizer) return MemUse::OptimizerInFlight;
  switch (t.data) {
    case Data::Param: return tier == Tier::Device ? MemUse::ParamGathered : MemUse::ParamStaging;
    case Data::Grad: return tier == Tier::Device ? MemUse::GradWorking : MemUse::GradStaging;
    case Data::OptimizerState: return MemUse::OptimizerInFlight;
    case Data::Checkpoint: return MemUse::Checkpoint;
    case Data::Activation: return tier == Tier::Device ? MemUse::ActivationKept : MemUse::ActivationOffloaded;
    case Data::None:
    case Data::Scalar: break;
  }
  return MemUse::Unstated;
}

// Appends tasks to a Program (a friend of it): ids in the order they are added, so every
// dependency a task names is an earlier task; buffers are numbered as they are asked for.
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
    for (MemEvent e : allocs) {
      if (e.use == MemUse::Unstated) e.use = stated_use(t, e.tier);
      p_.events_.push_back(e);
    }
    t.allocs_count = static_cast<uint32_t>(allocs.size());
    t.frees_begin = static_cast<uint32_t>(p_.events_.size());
    p_.events_.insert(p_.events_.end(), frees.begin(), frees.end());
    t.frees_count = static_cast<uint32_t>(frees.size());
    p_.tasks_.push_back(t);
    last_[static_cast<size_t>(t.lane)] = t.id;
    return t.id;
  }

  int64_t buffer() { return next_buffer_++; }
  void reset() {
    p_ = Program{};
    next_buffer_ = 0;
    last_.fill(-1);
  }
  // The last task added on `lane` so far (-1: none).
  int32_t last_on(Lane lane) const { return last_[static_cast<size_t>(lane)]; }
  // The Program's fields the planner fills in directly.
  auto& op_order() { return p_.op_order_; }
  auto& shard_space() { return p_.shard_space_; }
  auto& sub_groups() { return p_.sub_groups_; }
  auto& ranks() { return p_.ranks_; }
  auto& gpus_per_node() { return p_.gpus_per_node_; }
  auto& tensor_parallel() { return p_.tensor_parallel_; }
  auto& expert_parallel() { return p_.expert_parallel_; }
  auto& partitioning() { return p_.partitioning_; }
  auto& micro_batches() { return p_.micro_batches_; }
  auto& forward_only() { return p_.forward_only_; }
  auto& units() { return p_.units_; }
  auto& budget() { return p_.budget_; }
  auto& ops() { return p_.ops_; }
  auto& activations() { return p_.activations_; }
  auto& checkpoint_runs() { return p_.checkpoint_runs_; }
  auto& backward_starts() { return p_.backward_starts_; }
  auto& compute_ends() { return p_.compute_ends_; }
  auto& static_bytes() { return p_.static_bytes_; }
  auto& peak() { return p_.peak_; }
  auto& lane_slots() { return p_.lane_slots_; }
  auto& gather_device_passes() { return p_.gather_device_passes_; }
  auto& reduce_device_passes() { return p_.reduce_device_passes_; }
  Program& program() { return p_; }

private:
  Program& p_;
  int64_t next_buffer_ = 0;
  std::array<int32_t, kLaneCount> last_{-1, -1, -1, -1, -1, -1, -1};
};

namespace planning {

// The bytes per parameter of each state are the run's (RunConfig::precision, optimizer_states:
// PlanState::param_bytes_, grad_bytes_, state_bytes_); a bf16 run with Adam has 2, 2 and 12.
inline constexpr double kAdamFlopsPerParam = 12.0;
inline constexpr int kOptimizerPipelineDepth = 3;  // sub-groups in flight: NVMe read, CPU Adam, NVMe write
// An NVMe optimizer's automatic depth: sub-groups whose buffers fit this share of the host budget
// the states placed in host memory leave (at least kOptimizerPipelineDepth).
inline constexpr double kOptimizerHostShare = 0.25;
// Backpressure, so that memory stays bounded however fast or slow each lane runs: a backward step
// that starts new gradients waits until the gradient stored RunConfig::gradient_stores_in_flight
// reductions ago is stored, and a forward step that starts a new checkpoint waits for the save of
// the one this many before.
inline constexpr size_t kCheckpointSavesInFlight = 2;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline std::string bytes_text(double b) { return format_bytes(b); }

// A stretch of the forward order with one segment key: `ci` blocks, or the operators outside blocks.
struct Run {
  std::vector<int32_t> ops;  // forward order
  bool recompute = false;    // checkpointed at its input and recomputed in backward
  bool no_backward = false;  // none of its operators has a backward: its activations go after its forward
  int32_t checkpoint = -1;   // checkpoint index within a micro-batch
  double act_bytes = 0;      // activation working memory while it runs
  double grad_bytes = 0;     // activation gradients during its backward (fp32 working precision only)
  ActivationAction action = ActivationAction::Keep;  // the activation pass's choice (policy not `none`)
  int32_t segment = -1;      // its activation segment when offloaded
  int64_t prefetch_runs = 0; // offloaded: loaded when the backward of the run this many after it begins
  // Per-tensor choices: the bytes of its segment (all of act_bytes with block granularity), and
  // the tensors recomputed by their own operators (recompute_ops, forward order) in its backward.
  double offload_bytes = 0;
  double partial_bytes = 0;
  std::vector<int32_t> recompute_ops;
  // The device buffers of its activations: the one that travels (or all of them), the part that
  // stays beside an offloaded one, and the part recomputed per tensor.
  double moving_bytes() const { return segment >= 0 ? offload_bytes : act_bytes - partial_bytes; }
  double staying_bytes() const { return segment >= 0 ? act_bytes - offload_bytes - partial_bytes : 0.0; }
};

// One compute task to be: an operator (or one tile of it) in one phase of one micro-batch.
struct Step {
  TaskKind kind = TaskKind::Forward;
  int32_t op = 0;
  int32_t tile = -1;  // tile of the op's tiled group, -1 when untiled
  int32_t mb = 0;
  int32_t run = 0;
  uint32_t units_begin = 0, units_count = 0;  // its units, in PlanState::step_units_
  // run bookkeeping
  bool first_fwd_of_run = false, last_fwd_of_run = false, first_recompute = false, last_bwd_of_run = false;
  bool starts_bwd_of_run = false;  // first backward-phase step (recompute or backward) of its run
  bool first_partial_recompute = false;  // first Recompute step of a run's per-tensor recomputes
};

// A backward step's use of one of its units, for its gradient: whether the use starts a contribution
// (a new gradient buffer) and whether the contribution ends here (reduced after the step), and which
// of the unit's contributions in its micro-batch it is (0, 1, ...).
struct GradUse {
  bool starts = false;
  bool ends = false;
  int32_t contribution = -1;
};

// A gradient reduction after a step: the unit, and whether it is the step's first contribution to the
// unit's gradient (the first micro-batch's first: it overwrites the home) and its last (the last
// micro-batch's last: the gradient is complete, sub-groups may update).
struct Reduction {
  int32_t unit = 0;
  bool first = false;
  bool last = false;
};

// One gathering of a unit onto the device, used by the steps from `consumer` to `release`.
struct Fetch {
  int32_t unit = 0;
  int32_t consumer = 0;  // first step using it
  int32_t release = 0;   // last step using it (reuse chain)
  int32_t t_nc = 0, t_h2d = 0, t_ag = 0;  // the steps its stages are issued before
  int32_t last_task = -1;     // the stage that makes the gathered parameter available
  int64_t gathered_buf = -1;  // device buffer of the whole unit
  int32_t nc_task = -1, h2d_task = -1;
  int64_t host_buf = -1, shard_buf = -1;
};

// An optimizer sub-group on its way through the pipeline (plan_optimizer.cpp).
struct SgState {
  int32_t stage = 0;  // 0: inputs, 1: adam, 2: outputs, 3: done
  int32_t pending_units = 0;
  bool ready = false;
  bool started = false;         // its place in its owner's pipeline taken (and its states' read emitted)
  std::vector<int32_t> window;  // what its reads wait for: the writes that free its place in the pipeline
  std::vector<int32_t> units;
  int32_t in_states = -1, in_grads = -1, adam = -1;
  std::vector<int32_t> outs;
  int64_t state_buf = -1, grad_buf = -1, param_buf = -1;
  int64_t seq = -1;  // position among its owner's sub-groups, in the order they start
};

// Everything the passes share. The inputs are fixed at construction; each group of fields below
// is filled by the pass named in its comment and read by the later ones. Buffers and tasks are
// Program ids (-1: none).
struct PlanState {
  PlanState(const ModelGraph& g, const HwProfile& hw, const RunConfig& c, int ranks, const std::vector<int32_t>& order)
      : graph_(g), hw_(hw), config_(c), ranks_(ranks), tensor_parallel_(std::max<int64_t>(1, g.tensor_parallel)),
        data_parallel_(std::max(1, ranks / static_cast<int>(tensor_parallel_))),
        expert_parallel_(static_cast<int>(std::max<int64_t>(1, c.expert_parallel))), recorded_(order),
        kernel_tensors_(hw.node.gpu.working_bytes == 4),
        working_bytes_(std::max(double(hw.node.gpu.working_bytes), param_bytes(c))), param_bytes_(param_bytes(c)),
        grad_bytes_(grad_bytes(c)), state_bytes_(optimizer_state_bytes(c)) {}
  PlanState(const PlanState&) = delete;
  PlanState& operator=(const PlanState&) = delete;

  // Queries every pass uses, on the inputs and the decisions made so far.
  bool activation_policy_on() const { return config_.activation_policy != ActivationPolicy::None; }
  Tier optim_compute_tier() const { return plan_.optimizer == Tier::Device ? Tier::Device : Tier::Host; }
  bool params_partitioned() const { return config_.zero_stage >= 3; }
  bool grads_partitioned() const { return config_.zero_stage >= 2; }
  // DeepSpeed's host path (optimizer.host_path: deepspeed-0.3 or deepspeed-0.9) for a host optimizer.
  bool deepspeed_host_path() const {
    return config_.optimizer_host_path != HostPath::Fused && plan_.optimizer != Tier::Device;
  }
  // Bytes per element of a gradient once it leaves the device for a host optimizer: bf16, or fp32
  // on DeepSpeed's path (converted on the device, copied, accumulated and swapped in fp32); from
  // v0.9 both, each copied from the device and each kept on the host (stage3.py's
  // grad_partitions_flat_buffer and the sub-groups' fp32 .grad).
  double moved_grad_bytes() const {
    if (!deepspeed_host_path()) return grad_bytes_;
    return config_.optimizer_host_path == HostPath::DeepSpeed09 ? grad_bytes_ + 4.0 : 4.0;
  }
  // Bytes per element of an updated parameter as a host optimizer hands it back: bf16, or on
  // DeepSpeed's path with stages 0-2 the fp32 master itself (its device kernel reads it over PCIe).
  double updated_param_bytes() const { return deepspeed_host_path() && !params_partitioned() ? 4.0 : param_bytes_; }
  // Host memory traffic per element of one sub-group's update: kAdamHostBytesPerParam on the fused
  // path; on DeepSpeed's, the unscale pass (fp32 gradient read and written, 8), Adam on the fp32
  // gradient (4 + 24) and either the fp32 -> fp16 copy (4 + 2, stage 3) or the fp32 master written
  // to the pinned buffer (4, stages 0-2).
  double optimizer_host_bytes() const {
    if (!deepspeed_host_path()) return grad_bytes_ + 2.0 * state_bytes_ + param_bytes_;  // kAdamHostBytesPerParam for bf16 Adam
    return 8.0 + 4.0 + 2.0 * state_bytes_ + (params_partitioned() ? 6.0 : 4.0);
  }
  bool owner_based() const { return plan_.partitioning == Partitioning::OwnerBased; }
  // Bytes of one checkpoint kept in its tier by one rank: a 1/tensor_parallel_ slice when the
  // tensor-parallel group partitions it (and all-gathers it back on the device before the recompute).
  bool ckpt_partitioned() const { return config_.checkpoints_partitioned && tensor_parallel_ > 1; }
  double ckpt_home_bytes() const { return ckpt_partitioned() ? ckpt_bytes_ / double(tensor_parallel_) : ckpt_bytes_; }
  // Elements of `u` that one rank keeps of a partitioned state (owner-based: the owner, all of it).
  int64_t shard_elems(const ParamUnit& u) const { return owner_based() ? u.numel : u.shard_numel; }
  // Ranks `u`'s partitioned states are split over: the data-parallel group, or an expert unit's
  // expert-data-parallel group (dp / E ranks holding the same slice of the experts).
  int unit_parts(const ParamUnit& u) const { return u.expert ? data_parallel_ / expert_parallel_ : data_parallel_; }
  // Elements of `u` gathered on the device: the padded shards of its group (owner-based: all).
  int64_t gathered_elems(const ParamUnit& u) const { return owner_based() ? u.numel : u.shard_numel * unit_parts(u); }
  int32_t owner_of(const ParamUnit& u) const { return owner_based() ? u.owner : -1; }
  // Tokens each expert of a mixture's experts operator takes per micro-batch under expert
  // parallelism: DeepSpeed-MoE's capacity, max(4, ceil(capacity_factor x tokens x top_k / experts))
  // (deepspeed/moe/sharded_moe.py: _capacity, given capacity_factor x k by top-k gating, floored at
  // min_capacity 4). 0 for another operator, or at E = 1, which plans the mixture dropless as Hugging
  // Face's modeling code runs it (each expert the tokens routed to it, evenly).
  int64_t expert_capacity(const Operator& op) const {
    if (op.experts <= 0 || expert_parallel_ <= 1) return 0;
    const double routed = config_.capacity_factor * double(graph_.tokens) * double(op.top_k) / double(op.experts);
    return std::max<int64_t>(4, static_cast<int64_t>(std::ceil(routed - 1e-9)));
  }
  // One all-to-all of `op`'s tokens (dispatch, combine, or either's gradient): the rank's
  // experts x capacity rows of the hidden size in the working precision; each rank sends
  // (E - 1) / E of it, tokens x top_k x hidden x bytes x (E - 1) / E at capacity factor 1.
  double expert_all_to_all_bytes(const Operator& op) const {
    return working_bytes_ * double(op.experts) * double(expert_capacity(op)) * double(graph_.spec.hidden);
  }
  double unit_bytes(int32_t u) const { return param_bytes_ * double(units_[static_cast<size_t>(u)].numel); }

  // A forward pass alone (make_forward_plan, emitted by emit_forward): forward steps only, no
  // checkpoint, gradient or optimizer task; the ranks hold the training run's states beside the
  // parameters when `beside_training_` (then static bytes count them, as in its steps).
  bool forward_only_ = false;
  bool beside_training_ = false;

  // inputs
  const ModelGraph& graph_;
  const HwProfile& hw_;
  const RunConfig& config_;
  int ranks_;
  int64_t tensor_parallel_;  // ranks that split each layer (the graph is one rank's share)
  int data_parallel_;        // ranks_ / tensor_parallel_: the ranks a ZeRO partition is split over
  int expert_parallel_;      // ranks that split a mixture's routed experts (run config's expert_parallel)
  std::vector<int32_t> recorded_;
  // The CPU backend's profile (working precision fp32): activations are the tensors its kernels keep
  // (core/kernel_activations.hpp), not the paper's formula.
  bool kernel_tensors_;
  // Bytes per element of the device's working tensors (activations, gathered parameters, gradients
  // before their reduction): the HwProfile's working precision, or the run's when wider (fp32).
  // Transfers keep their own sizes.
  double working_bytes_;
  // Bytes per element of a parameter and a gradient in the run's precision, and of the optimizer's
  // fp32 states (master weights where there are, and the optimizer's own tensors).
  double param_bytes_, grad_bytes_, state_bytes_;

  // outputs: the decisions with their reasons (every pass), and the Program (emission)
  Plan plan_;
  Program prog_;
  ProgramBuilder builder_{prog_};

  // partition
  std::vector<ParamUnit> units_;
  std::vector<std::vector<int32_t>> group_units_;  // param group -> its units
  std::vector<int64_t> owned_elems_;               // owner-based: each rank's shard space (aligned)
  int64_t shard_space_ = 0;                        // bandwidth-centric: every rank's shard space (aligned)

  // runs (and the activation pass)
  std::vector<int32_t> order_;  // forward operator order the program follows
  std::vector<Run> runs_;
  std::vector<int32_t> op_run_;
  double act_peak_ = 0;
  double ckpt_bytes_ = 0;
  std::vector<ActivationSegment> segments_;  // offloaded activation segments

  // steps (tiling)
  std::vector<Step> steps_;
  std::vector<int32_t> step_units_;
  // per micro-batch: first and last backward step of each unit
  std::vector<std::vector<int32_t>> first_bwd_, last_bwd_;
  std::vector<GradUse> grad_use_;  // parallel to step_units_ (backward steps' uses; default elsewhere)

  // schedule
  std::vector<Fetch> fetches_;
  std::vector<int32_t> use_fetch_;  // parallel to step_units_: fetch serving that use (-1: resident)

  // emission
  std::vector<int32_t> compute_task_;                 // per step
  std::vector<int64_t> grad_buf_;                     // per unit: device buffer of the current micro-batch's grad
  std::vector<int32_t> grad_store_;                   // per unit: last task storing its gradient (latest mb)
  std::vector<int32_t> grad_reduce_;                  // per unit: its latest reduction (the collective)
  std::vector<int64_t> act_buf_, act_grad_buf_;       // per run
  std::vector<int64_t> ckpt_dev_buf_, ckpt_home_buf_; // per run (current micro-batch)
  std::vector<int32_t> ckpt_save_task_, ckpt_load_task_;
  std::vector<int32_t> grad_stores_, ckpt_saves_;    // in emission order, for backpressure
  std::vector<std::vector<int32_t>> ckpt_copies_;     // per micro-batch: its checkpoints' device-to-host copies
  std::vector<int32_t> act_save_task_, act_load_task_;  // per run (current micro-batch)
  std::vector<int64_t> act_home_buf_;                 // per run: the offloaded copy's buffer
  std::vector<int64_t> act_keep_buf_, act_part_buf_;  // per run: Run::staying_bytes, Run::partial_bytes
  std::vector<int32_t> act_saves_;                    // in emission order, for backpressure
  int32_t sync_ckpt_save_ = -1;  // a synchronous checkpoint copy the next compute task waits for
  int32_t backward_done_ = -1;

  // optimizer (sub-groups: make_sub_groups; the rest as emission pumps them)
  int32_t norm_task_ = -1;
  std::vector<SgState> sg_;
  std::vector<int32_t> sg_ready_order_;
  size_t sg_cursor_ = 0;
  std::vector<int32_t> sg_start_order_;  // the order sub-groups will become ready (predict_ready_order)
  size_t sg_ahead_cursor_ = 0;           // sg_start_order_ before it has started
  int64_t sg_ahead_fwd_steps_ = 0;       // forward steps of the last micro-batch, over which reads ahead spread
  int64_t sg_ahead_fwd_done_ = 0;        // ... of them emitted so far
  std::vector<std::vector<int32_t>> unit_sgs_;       // unit -> sub-groups it overlaps
  std::vector<std::vector<int32_t>> owner_started_;  // per owner slot: sub-groups started, in order
  std::vector<int64_t> owner_sg_count_;              // per owner slot: its sub-groups
  int64_t sg_in_flight_ = kOptimizerPipelineDepth;   // the pipeline's depth (optimizer_depth)
  bool sg_phases_ = false;                           // waves of sg_in_flight_: reads, then writes
  int64_t sg_largest_ = 0;                           // elements of the largest sub-group
  int64_t sg_depth_cap_ = 0;                         // an automatic depth's cap after a host peak over budget
};

inline Task make_task(TaskKind kind, Lane lane, Data data, Phase phase) {
  Task t;
  t.kind = kind;
  t.lane = lane;
  t.data = data;
  t.phase = phase;
  return t;
}

// partition (plan_partition.cpp)
void basics(PlanState& ps);
void make_units(PlanState& ps, int64_t tiles);
std::vector<std::pair<Tier, MemoryItem>> static_items_for(const PlanState& ps, int rank);
PerTier static_bytes_for(const PlanState& ps, int rank);
PerTier max_static(const PlanState& ps);
// Each tier's static bytes on the rank that keeps the most there (no live buffers).
PeakComposition static_peaks(const PlanState& ps);
// The Program's accounting of `peaks` (static items of each peak's rank, live bytes by use).
Accounting accounting_for(const PlanState& ps, const PeakComposition& peaks);

// runs (plan_runs.cpp)
void make_runs(PlanState& ps);
void apply_activation_pass(PlanState& ps, double device_bytes);

// placement (plan_placement.cpp)
double device_working_estimate(const PlanState& ps);
void place(PlanState& ps);
// `plan` plans `config` with its `auto` tiers fixed to one combination (make_plan or make_forward_plan).
PlanResult search_auto_tiers(const RunConfig& config, const PlanError& greedy,
                             const std::function<PlanResult(const RunConfig&)>& plan);

// tiling (plan_tiling.cpp)
void choose_tiling(PlanState& ps);
void make_steps(PlanState& ps);
void mark_gradient_contributions(PlanState& ps);
void describe_operator_tiles(PlanState& ps);

// schedule (plan_schedule.cpp)
void make_fetches(PlanState& ps);
void schedule_prefetch(PlanState& ps);
void schedule_run_loads(const PlanState& ps, std::vector<std::vector<int32_t>>& ckpt_load_at,
                        std::vector<std::vector<int32_t>>& act_load_at);
PeakComposition schedule_peak(const PlanState& ps);

// emission (plan_emit.cpp)
// The gradient reductions after step i: each unit whose contribution (its use by step i's operator)
// ends there, once.
std::vector<Reduction> reductions_at(const PlanState& ps, size_t i);
void emit(PlanState& ps);
// A fetch stage (0: NVMe -> host; 1: host -> device, or the owner-based alloc and copy; 2: the
// all-gather or broadcast), issued after compute task `prev_compute`.
void emit_fetch_stage(PlanState& ps, Fetch& f, int stage, int32_t prev_compute);
// The compute task of step `st`: its operator (or tile) in its phase, with the flops and bytes of its share.
Task compute_task(const PlanState& ps, const Step& st);
// Expert parallelism: the all-to-all before (dispatch) or after (combine) step i's experts operator,
// after task `after`; returns its id, or `after` where step i has none.
int32_t emit_expert_all_to_all(PlanState& ps, size_t i, int32_t after);
// What step i's compute task waits for and frees of its units' fetches: the stage that makes each
// gathered unit available, and the gathered buffers whose last use it is.
void step_fetch_events(const PlanState& ps, size_t i, std::vector<int32_t>& deps, std::vector<MemEvent>& frees);
void finish_program(PlanState& ps);
void account(PlanState& ps);
void reset_emission(PlanState& ps);

// forward-only emission (plan_forward.cpp): the tasks of a forward pass alone, in one pass over the
// steps, with each run's activations freed as its forward ends (its output as the next run's does).
void emit_forward(PlanState& ps);

// optimizer (plan_optimizer.cpp)
void make_sub_groups(PlanState& ps);
// Bytes of host memory one sub-group of `count` elements holds while in flight (its states,
// gradients and updated parameters staged there), and the pipeline's depth for the NVMe optimizer.
double sub_group_host_bytes(const PlanState& ps, int64_t count);
int64_t optimizer_depth(const PlanState& ps, int64_t largest_count, int64_t sub_groups);
void pump_optimizer(PlanState& ps, bool backward_done);
// Whether sub-groups' states are read ahead of their gradients (optimizer.read_ahead, an NVMe
// optimizer overlapping backward): of the sub-groups ready at once, every state read is emitted
// before any gradient read; and the first pipeline's worth of sub-groups (every owner's depth,
// in the order they will be ready) is read while the last micro-batch runs forward, ceil(k / its
// forward steps × that) of them started after its k-th forward step (read_states_ahead).
bool reads_ahead(const PlanState& ps);
void read_states_ahead(PlanState& ps);

}  // namespace planning
}  // namespace zinf::core
