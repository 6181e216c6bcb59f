// A Program is one training step of every data-parallel rank as a DAG of tasks on lanes — the
// only thing the engine and the simulator execute (docs/DESIGN.md, "core::Program"). Ranks run the same
// program on different shards, so it is stored once: a task with `owner == -1` is done by every
// rank (on that rank's own shard); a task with `owner >= 0` (owner-based partitioning) is done only
// by that rank and is a no-op with zero bytes, zero flops and no memory events on the others, but
// keeps its place and its dependencies there too, so every rank's DAG has the same shape.
// `task_for_rank` / `for_rank` resolve those rank-dependent fields for one rank.
//
// Execution contract for executors:
//  - tasks are numbered in a topological order; on each rank, a lane starts its tasks in id order,
//    at most `lane_slots(lane)` of them at a time (1 for every lane but the NVMe ones, whose
//    tasks may overlap so that the disk's queue stays full between them), and they may end in any
//    order; a task starts once every task in `deps(t)` has finished on the same rank (and, for a
//    collective, on every participant);
//  - a task's allocations happen when it starts and its frees when it ends; `static_bytes` per
//    tier are resident for the whole step; their sum never exceeds `budget` (checked by core).
//
// Immutable once built; safe to read from many threads.
#pragma once
#include <array>
#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "core/run_config.hpp"

namespace zinf::core {

// The independent queues of one rank.
enum class Lane : uint8_t { Compute, H2D, D2H, NvmeRead, NvmeWrite, Comm, CpuOptim };
inline constexpr int kLaneCount = 7;
const char* to_string(Lane l);

enum class TaskKind : uint8_t {
  Forward,        // compute of an operator (or one tile of it), on the device
  Recompute,      // forward again in backward, from an activation checkpoint
  Backward,       // dX and dW of an operator (or tile)
  CopyH2D,        // host -> device over PCIe
  CopyD2H,        // device -> host
  NvmeRead,       // NVMe -> host
  NvmeWrite,      // host -> NVMe
  AllGather,      // collectives: see Task::collective / participants / root
  ReduceScatter,
  AllReduce,
  Broadcast,
  AllToAll,       // expert parallelism: every rank of the group sends bytes / participants to each other one
  Reduce,
  GradNorm,       // sum of squares of this rank's gradient shards (for clipping)
  OptimizerStep,  // Adam over one sub-group of this rank's shard space (CPU or device)
  Alloc,          // zero-duration memory events
  Free,
};
const char* to_string(TaskKind k);
bool is_collective(TaskKind k);
bool is_compute(TaskKind k);  // Forward, Recompute, Backward

// Which part of the step a task belongs to (a parameter fetch for backward is Phase::Backward).
enum class Phase : uint8_t { Forward, Backward, Optimizer };
const char* to_string(Phase p);

// What the bytes of a task are.
enum class Data : uint8_t { None, Param, Grad, OptimizerState, Checkpoint, Activation, Scalar };
const char* to_string(Data d);

// The alignment of every direct (O_DIRECT) transfer and of pinned and staging buffers, in bytes:
// the page size. The one place this number is written; everything else derives from it.
inline constexpr int64_t kIoAlignmentBytes = 4096;

// Shard offsets in a rank's shard space and sub-group boundaries are multiples of this many
// elements (4 KiB of bf16, 8 KiB of fp32), and the space after each shard up to the next multiple
// is padding that belongs to nobody: so every shard and sub-group of every state can move to and
// from NVMe with O_DIRECT, whole pages at aligned offsets, without a bounce copy.
inline constexpr int64_t kShardAlignment = kIoAlignmentBytes / 2;  // bf16 elements
inline int64_t shard_aligned(int64_t elements) {
  return (elements + kShardAlignment - 1) / kShardAlignment * kShardAlignment;
}

// Where rank `rank` sits under tensor parallelism T: a tensor-parallel group is T consecutive
// ranks (so it stays inside a node), a data-parallel group the ranks with the same place in their
// tensor-parallel groups ({j, j+T, j+2T, ...}), over which ZeRO partitions. The engine splits its
// MPI ranks and the simulator forms its collectives' groups by it.
struct ParallelPlace {
  int tensor = 0;  // rank within its tensor-parallel group
  int data = 0;    // rank within its data-parallel group
};
inline ParallelPlace parallel_place(int rank, int tensor_parallel) {
  const int t = tensor_parallel > 1 ? tensor_parallel : 1;
  return {rank % t, rank / t};
}

// A parameter group, or one tile of a tiled linear: the unit that is sharded, fetched, used and
// released. Bandwidth-centric: every rank holds shard r = elements [r·shard_numel, (r+1)·shard_numel)
// of the unit's flattened, zero-padded tensor. Owner-based: rank `owner` holds all `numel`.
struct ParamUnit {
  int32_t id = 0;
  int32_t group = 0;          // ModelGraph::params index
  int32_t tile = 0;           // 0 .. tiles-1
  int32_t tiles = 1;
  int64_t row_begin = 0;      // rows of the group's weight this tile covers (bias rows alike)
  int64_t row_end = 0;
  int64_t numel = 0;          // elements of this unit
  int64_t shard_numel = 0;    // per-rank shard, padded: ceil(numel / ranks) (bandwidth-centric)
  int64_t shard_offset = 0;   // where the shard starts in a rank's shard space (bandwidth-centric; aligned)
  int32_t owner = -1;         // owner-based: the rank that owns it; -1 for bandwidth-centric
  int64_t owner_offset = 0;   // owner-based: where it starts in the owner's shard space (aligned)
  std::string name;           // "h.3.mlp.c_fc" or "h.3.mlp.c_fc[t2/4]"
  // A rank's slice of a mixture's routed experts under expert parallelism E > 1: `numel` is the
  // slice (experts / E of them), sharded over the dp / E ranks that hold the same slice.
  bool expert = false;
};

// A range of a rank's shard space updated by one optimizer step (DeepSpeed's sub_group_size).
struct SubGroup {
  int32_t id = 0;
  int64_t offset = 0;  // elements into the shard space (of `owner` when owner >= 0)
  int64_t count = 0;
  int32_t owner = -1;  // owner-based: only this rank updates it
};

// An operator as the cost models need it: GEMM shape (per tile), memory traffic, name.
struct OpInfo {
  int32_t id = 0;
  std::string name;
  std::string kind;            // OpKind as text
  int64_t m = 0, n = 0, k = 0; // GEMM shape of one tile (n divided by the tiling factor); 0 if not GEMM
  int32_t block = -1;
};

// One saved tensor of a block (core::block_tensors names it: "ln1", "qkv", "attn", ...).
struct ActivationTensor {
  int32_t block = 0;
  std::string name;
};

// The activations one run of blocks keeps from its forward to its backward, when the planner
// offloads them (core/activation_pass.hpp): blocks [first_block, last_block], `bytes` per
// micro-batch as the planner counts them, and where they go. Tasks name it by Task::activation.
// With per-tensor choices, `tensors` lists the ones that travel (the rest are kept or recomputed);
// empty: every tensor of its blocks.
struct ActivationSegment {
  int32_t id = 0;
  int32_t first_block = 0, last_block = 0;
  double bytes = 0;
  Tier tier = Tier::Host;  // host or nvme
  bool gds = false;        // NVMe <-> device directly (GPUDirect Storage), not through host memory
  std::vector<ActivationTensor> tensors;
};

// A checkpointed run of blocks [first_block, last_block]: its forward keeps only the run's input
// (the checkpoint: the input of first_block) and its backward recomputes the rest from it. Tasks
// name it by Task::checkpoint (its id).
struct CheckpointRun {
  int32_t id = 0;
  int32_t first_block = 0, last_block = 0;
  std::vector<int32_t> forward_end;  // per micro-batch: the task that ends the run's forward
};

// Where one micro-batch's backward starts: its first backward task, at which the backends drop the
// device copies of the micro-batch's offloaded checkpoints, and the device-to-host checkpoint
// copies that task depends on (empty when the checkpoints stay on the device).
struct BackwardStart {
  int32_t task = -1;
  std::vector<int32_t> checkpoint_copies;
};

// Where one micro-batch's compute ends, block by block and for each operator outside the blocks:
// after a block's last backward task a backend frees the block's activations (its intermediates and
// their gradients, its input and output), in a forward-only Program after its last forward task; after
// an operator's last backward task outside the blocks (of a tiled one, its last tile's), what that
// operator kept. The planner states them from the order it emitted (the compute lane runs its tasks in
// id order: the last is the highest id); -1 where there is none. Not part of the JSON dump, which lists
// the tasks they follow from.
struct ComputeEnds {
  std::vector<int32_t> block_forward;   // per block
  std::vector<int32_t> block_backward;  // per block
  std::vector<int32_t> op_backward;     // per operator (OpInfo id); -1 for the operators in blocks
};
// Host memory traffic per parameter of one fused CPU Adam update, what a profile's cpu_adam_rate
// covers: the bf16 gradient read (2), the fp32 master, m and v read and written (24), the bf16
// parameter written (2). A host OptimizerStep whose `bytes` exceed this per parameter makes further
// passes over host memory (optimizer.host_path: deepspeed-0.3), at the host's memory bandwidth.
inline constexpr double kAdamHostBytesPerParam = 28.0;

// What an allocated buffer holds, as the planner states it: the accounting of each tier's peak
// (core/fit.hpp) sums live bytes by it. Executors ignore it; it is not part of the JSON dump.
enum class MemUse : uint8_t {
  Unstated,             // a Program built by hand (tests)
  ParamGathered,        // device: a parameter shard copied up, or the gathered unit
  GradWorking,          // device: a gradient before its reduction, or the reduced shard on its way down
  ActivationGrad,       // device: a run's activation gradients during its backward
  ParamStaging,         // host: a parameter shard read from NVMe on its way to the device
  GradStaging,          // host: a gradient shard on its way to NVMe, or the partial sum read back
  OptimizerInFlight,    // a sub-group in the optimizer's pipeline: its states, gradients, parameters
  ActivationKept,       // device: a run's activations from its forward to its backward (or brought back)
  ActivationOffloaded,  // host or NVMe: offloaded activations
  Checkpoint,           // an activation checkpoint, on any tier
};
inline constexpr int kMemUseCount = 10;
const char* to_string(MemUse u);

struct MemEvent {
  Tier tier = Tier::Device;
  int64_t buffer = 0;  // unique within one rank's step; alloc and free of a buffer name the same id
  double bytes = 0;
  MemUse use = MemUse::Unstated;  // allocations: what the buffer holds
};

struct Task {
  int32_t id = 0;
  TaskKind kind = TaskKind::Forward;
  Lane lane = Lane::Compute;
  Data data = Data::None;
  Phase phase = Phase::Forward;
  Tier from = Tier::Device;    // where the bytes are read (copies, disk, optimizer: state tier)
  Tier to = Tier::Device;      // where they are written
  double bytes = 0;            // copies/disk: bytes moved by this rank; compute: memory traffic;
                               // collectives: the whole buffer, i.e. all-gather / reduce-scatter:
                               // padded shard bytes x participants; all-reduce, broadcast, reduce:
                               // the whole unit (the gradient-norm all-reduce: 8 bytes)
  double flops = 0;
  int64_t gemm_dim = 0;        // efficiency curve argument: gemm_intensity_dim of a linear's GEMM, an
                               // attention's head size; 0 for anything else
  int32_t op = -1;             // OpInfo id
  int32_t unit = -1;           // ParamUnit id
  int32_t tile = -1;           // compute tasks: the tile of `unit` (a tiled group's) they run; -1: untiled
  int64_t buffer = -1;         // parameter fetch stages: the buffer the stage fills (the NVMe read's host
                               // staging, the host-to-device copy's device shard, the gathered unit of an
                               // all-gather, broadcast, owner-based alloc or the owner's copy into it)
  int64_t source = -1;         // parameter fetch stages that read what an earlier stage filled (the copy
                               // of an NVMe read's staging, the all-gather of a copied shard): its buffer
  int32_t micro_batch = -1;
  int32_t checkpoint = -1;     // activation checkpoint index (segment)
  int32_t activation = -1;     // offloaded activation segment (Program::activations index)
  int32_t sub_group = -1;      // SubGroup id
  int64_t sg_offset = 0;       // sub-group range in the shard space (elements)
  int64_t sg_count = 0;
  int32_t participants = 1;    // collectives: ranks taking part
  int32_t root = -1;           // Broadcast / Reduce: the root rank
  int32_t owner = -1;          // -1: every rank; else only this rank (see the header comment)
  // A gradient's reduction and the stores after it (Data::Grad, Phase::Backward): the contribution it
  // carries (one per micro-batch and operator that uses the unit: a tied weight has two) is the
  // step's first to the unit's gradient (it overwrites the home) and/or its last (after it the
  // gradient is complete: its squares join the norm).
  bool grad_first = false;
  bool grad_last = false;
  // Ranges into the program's flat dependency and memory-event arrays; use Program's accessors.
  uint32_t deps_begin = 0, deps_count = 0;
  uint32_t allocs_begin = 0, allocs_count = 0;
  uint32_t frees_begin = 0, frees_count = 0;
};

// The compute ends `tasks` have over `ops` (blocks as OpInfo::block says), per micro-batch.
std::vector<ComputeEnds> compute_ends_of(const std::vector<Task>& tasks, const std::vector<OpInfo>& ops,
                                         int micro_batches);

// Bytes of host memory passes a CPU OptimizerStep makes beyond the fused update (0 for any other task).
inline double optimizer_extra_host_bytes(const Task& t) {
  if (t.kind != TaskKind::OptimizerStep || t.lane != Lane::CpuOptim) return 0;
  const double extra = t.bytes - kAdamHostBytesPerParam * double(t.sg_count);
  return extra > 1.0 ? extra : 0.0;
}

// Per-tier numbers of one rank, indexed by Tier.
using PerTier = std::array<double, 3>;
inline double& at(PerTier& p, Tier t) { return p[static_cast<int>(t)]; }
inline double at(const PerTier& p, Tier t) { return p[static_cast<int>(t)]; }

class ProgramBuilder;
class Program;

// How the ranks of a collective task form the groups that run it at once: `members` ranks in each,
// a group being `members` consecutive ranks (a tensor- or expert-parallel group: activations) or
// every `stride`-th rank (ZeRO's data-parallel groups under tensor parallelism T, stride T, and
// the expert-data-parallel groups of an expert unit, stride T x E). Both executors form their
// groups by it.
struct CollectiveGroups {
  int members = 1;
  int stride = 1;
  bool consecutive = false;
};
CollectiveGroups collective_groups(const Program& p, const Task& t);

// The lane slots a Program planned with `config` has: aio.tasks_in_flight for the NVMe lanes, 1 for
// the others.
std::array<int32_t, kLaneCount> lane_slots_for(const RunConfig& config);

class Program {
public:
  int ranks() const { return ranks_; }
  // Ranks a ZeRO partition spans: ranks / tensor_parallel (each tensor-parallel rank's share of the
  // model is partitioned over its data-parallel group).
  int data_parallel() const { return ranks_ / (tensor_parallel_ > 1 ? tensor_parallel_ : 1); }
  int gpus_per_node() const { return gpus_per_node_; }
  // T: ranks r and r + 1 .. r + T - 1 (r a multiple of T) split each layer. A collective over all
  // ranks that moves ZeRO's shards (parameters, gradients) runs in T data-parallel groups of
  // ranks / T, one per tensor-parallel index, each over its own shards ({j, j + T, j + 2T, ...}).
  int tensor_parallel() const { return tensor_parallel_; }
  // E: the routed experts split over groups of E consecutive data-parallel ranks; an expert unit's
  // shards are split over the dp / E ranks holding the same slice ({j, j + E, j + 2E, ...}), and
  // its collectives run there (collective_groups).
  int expert_parallel() const { return expert_parallel_; }
  // Ranks a unit's partitioned state is split over: the data-parallel ranks, or for an expert unit
  // those of its expert-data-parallel group.
  int unit_ranks(const ParamUnit& u) const {
    return u.expert && expert_parallel_ > 1 ? data_parallel() / expert_parallel_ : data_parallel();
  }
  Partitioning partitioning() const { return partitioning_; }
  int micro_batches() const { return micro_batches_; }
  // A forward pass alone (core::make_forward_plan: a held-out loss, the next token's logits): the
  // forward tasks and the parameter fetches they need, and nothing for a backward: no checkpoint,
  // gradient or optimizer task, no sub-group. A run of blocks frees its activations when its forward
  // ends, all but its output, which the next run reads and frees when its own forward ends.
  bool forward_only() const { return forward_only_; }

  const std::vector<Task>& tasks() const { return tasks_; }
  const Task& task(int32_t id) const { return tasks_[static_cast<size_t>(id)]; }
  std::span<const int32_t> deps(const Task& t) const;
  // Memory events as done by `rank` (empty where the task is a no-op on that rank).
  std::span<const MemEvent> allocs(const Task& t, int rank) const;
  std::span<const MemEvent> frees(const Task& t, int rank) const;
  bool active(const Task& t, int rank) const { return t.owner < 0 || t.owner == rank; }
  // The task as `rank` runs it: bytes/flops zeroed and memory events dropped where inactive.
  Task task_for_rank(int32_t id, int rank) const;
  std::vector<Task> for_rank(int rank) const;

  const std::vector<ParamUnit>& units() const { return units_; }
  const std::vector<SubGroup>& sub_groups() const { return sub_groups_; }
  const std::vector<OpInfo>& ops() const { return ops_; }
  const std::vector<ActivationSegment>& activations() const { return activations_; }
  const std::vector<CheckpointRun>& checkpoint_runs() const { return checkpoint_runs_; }
  // Per micro-batch.
  const std::vector<BackwardStart>& backward_starts() const { return backward_starts_; }
  // Per micro-batch.
  const std::vector<ComputeEnds>& compute_ends() const { return compute_ends_; }
  // Operator ids in the forward order the program was built from (graph order or a recorded one).
  const std::vector<int32_t>& op_order() const { return op_order_; }
  // Elements of `rank`'s shard space (sum of its shards; owner-based: of the units it owns).
  int64_t shard_space(int rank) const;

  // Bytes resident on each tier of one rank for the whole step (home shards, optimizer states,
  // gradient shards, pinned buffers); the budget each tier of one rank has (node budgets divided
  // by GPUs per node for host and NVMe); and the peak of static + live buffers the planner found.
  const PerTier& static_bytes(int rank) const;
  const PerTier& budget() const { return budget_; }
  const PerTier& peak_bytes() const { return peak_; }

  // Tasks of `lane` that may run at once on one rank (see the execution contract): at least 1,
  // above 1 only for Lane::NvmeRead and Lane::NvmeWrite (the run config's aio.tasks_in_flight).
  int lane_slots(Lane lane) const { return lane_slots_[static_cast<size_t>(lane)]; }

  // Passes over its whole buffer the device makes beside the transfer, for each parameter
  // all-gather and each gradient reduce-scatter: copies between a list of tensors and the flat
  // buffer the collective library moves, a zero fill (a DeepSpeed release's engine,
  // DeepSpeedBehaviour; 0 for zinf's). Executors charge them at the device's memory bandwidth
  // (core::collective_device_seconds).
  int gather_device_passes() const { return gather_device_passes_; }
  int reduce_device_passes() const { return reduce_device_passes_; }

  // "fwd h.3.mlp.c_fc[t1/4] mb0", "allgather h.3.ln_1 (bwd) mb1", "adam sg4".
  std::string label(const Task& t) const;

  // Deterministic JSON: the same program gives byte-identical output.
  void write_json(std::ostream& out) const;

private:
  friend class ProgramBuilder;

  int ranks_ = 1;
  int gpus_per_node_ = 1;
  int tensor_parallel_ = 1;
  int expert_parallel_ = 1;
  Partitioning partitioning_ = Partitioning::BandwidthCentric;
  int micro_batches_ = 1;
  bool forward_only_ = false;
  std::vector<Task> tasks_;
  std::vector<int32_t> deps_;
  std::vector<MemEvent> events_;
  std::vector<ParamUnit> units_;
  std::vector<SubGroup> sub_groups_;
  std::vector<OpInfo> ops_;
  std::vector<ActivationSegment> activations_;
  std::vector<CheckpointRun> checkpoint_runs_;
  std::vector<BackwardStart> backward_starts_;
  std::vector<ComputeEnds> compute_ends_;
  std::vector<int32_t> op_order_;
  std::vector<int64_t> shard_space_;     // per rank (owner-based) or one entry (bandwidth-centric)
  std::vector<PerTier> static_bytes_;    // per rank (owner-based) or one entry (bandwidth-centric)
  PerTier budget_{};
  PerTier peak_{};
  std::array<int32_t, kLaneCount> lane_slots_{1, 1, 1, 1, 1, 1, 1};
  int gather_device_passes_ = 0;
  int reduce_device_passes_ = 0;
};

}  // namespace zinf::core
