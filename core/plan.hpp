// The planner: (model graph, hwprofile, run config, data-parallel ranks) -> a Plan (every decision,
// with its reason) and the Program that carries it out (core/program.hpp). Every decision about
// partitioning, placement, tiling, prefetch and optimizer timing is made here and nowhere else.
// A plan that cannot fit throws PlanError naming the tier that is short and by how much.
// Pure functions of their inputs (deterministic), thread-safe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/activation_pass.hpp"
#include "core/fit.hpp"
#include "core/graph.hpp"
#include "core/hwprofile.hpp"
#include "core/program.hpp"
#include "core/run_config.hpp"

namespace zinf::core {

// Where one state lives, and why (an `auto` placement records what it tried).
struct PlacementDecision {
  std::string state;   // "params", "gradients", "optimizer", "checkpoints"
  Tier tier = Tier::Device;
  bool automatic = false;
  std::string reason;
};

// What one operator's tiles cost on one rank (zinf plan's table): how many tiles it runs in, and per
// tile the device bytes of its gathered parameters (all its groups', a tiled group's tile) and of
// its gradient buffers before their reduction (in the device's working precision), and the FLOPs of
// its forward and backward.
struct OperatorTiles {
  int32_t op = 0;
  std::string name;
  int64_t tiles = 1;
  double gathered_bytes = 0;
  double gradient_bytes = 0;
  double fwd_flops = 0;
  double bwd_flops = 0;
};

// One activation segment's lifetime and what the activation pass chose for it.
struct ActivationDecision {
  ActivationLifetime lifetime;
  ActivationChoice choice;
};

struct Plan {
  int ranks = 1;
  int gpus_per_node = 1;
  int nodes = 1;
  Partitioning partitioning = Partitioning::BandwidthCentric;
  int zero_stage = 3;

  Tier params = Tier::Device;
  Tier gradients = Tier::Device;
  Tier optimizer = Tier::Device;
  Tier checkpoints = Tier::Device;
  std::vector<PlacementDecision> placements;

  ActivationPolicy activation_policy = ActivationPolicy::None;
  std::vector<ActivationDecision> activations;  // per segment, when the policy is not `none`
  std::string activation_note;                  // the device bytes the pass aimed for, and its retries

  int64_t tiling_factor = 1;
  std::string tiling_reason;
  // Tiles of the vocabulary-wide operators' weight (the embedding and the LM head), and why.
  int64_t vocabulary_tiles = 1;
  std::string vocabulary_tiles_reason;
  // Every operator with parameters, in forward order.
  std::vector<OperatorTiles> operator_tiles;

  int64_t checkpoint_interval = 1;
  int64_t checkpoints_per_micro_batch = 0;
  int64_t micro_batches = 1;
  int64_t nvme_prefetch_distance = kDefaultNvmePrefetchDistance, h2d_prefetch_distance = kDefaultH2dPrefetchDistance,
          allgather_prefetch_distance = kDefaultAllgatherPrefetchDistance;
  double max_live_bytes = 0;
  double reuse_distance_bytes = 0;
  int64_t sub_group_size = 0;
  int64_t sub_groups = 0;
  // Optimizer on NVMe: sub-groups whose states are in host memory at once (the optimizer pipeline's
  // depth), and whether they move as waves (every read of a wave, then every write).
  int64_t sub_groups_in_flight = 0;
  bool optimizer_nvme_phases = false;
  OptimizerTiming optimizer_timing = OptimizerTiming::AfterBackward;
  // Whether every optimizer step waits for the all-reduced global gradient norm: gradient clipping
  // needs it, and so does fp16's overflow check (a non-finite norm skips the step on every rank).
  bool grad_clip = false;
  std::string optimizer_timing_note;  // what the Program does about clipping under overlap

  int64_t total_params = 0;
  int64_t shard_numel = 0;            // elements of one rank's shard space (max over ranks)
  PerTier static_bytes{};             // per rank (max over ranks)
  PerTier peak_bytes{};               // per rank
  PerTier budget{};                   // per rank
  // What makes each tier's peak (core/fit.hpp): the static items of the peak's rank and the live
  // buffers by what they hold, at the idealized schedule's worst moment. judge_fit(accounting, config)
  // is the verdict every command reports.
  Accounting accounting;

  // Data moved per rank per step, by what and from/to which tier (for the §4 accounting).
  double param_bytes_fetched = 0;     // read from the params tier (or gathered, on the device)
  double grad_bytes_stored = 0;
  double optimizer_bytes_read = 0;
  double optimizer_bytes_written = 0;
  double checkpoint_bytes_saved = 0;
  double checkpoint_bytes_loaded = 0;
  double activation_bytes_offloaded = 0;  // leaving the device (all micro-batches)
  double activation_bytes_restored = 0;   // coming back before backward
  double nvme_bytes_written = 0;          // everything written to / read from NVMe per step
  double nvme_bytes_read = 0;
};

struct PlanResult {
  Plan plan;
  Program program;
};

// Plans one training step on `ranks` data-parallel ranks. `recorded_order`, when not empty, is the
// forward operator order recorded at run time (the dynamic prefetcher of §6.2): a permutation of
// the graph's operator ids, which the Program follows instead of the graph's order.
PlanResult make_plan(const ModelGraph& graph, const HwProfile& hw, const RunConfig& config, int ranks,
                     const std::vector<int32_t>& recorded_order = {});

// What a rank holds beside the parameters while a forward-only Program runs: nothing (a model
// evaluated or sampled on its own), or the homes of a training run's gradients and optimizer states
// (an evaluation between its steps), which then count among the static bytes as in its steps.
enum class ForwardBeside { Nothing, TrainingStates };

// Plans a forward pass alone (Program::forward_only): the same partitioning, placement, tiling and
// prefetch decisions as make_plan for `config`, one micro-batch, the forward tasks and the parameter
// fetches before them, and nothing for a backward. Throws PlanError as make_plan does.
PlanResult make_forward_plan(const ModelGraph& graph, const HwProfile& hw, const RunConfig& config, int ranks,
                             ForwardBeside beside);

// `config` with the decisions of `trained` fixed (the tier of every state, the tiling factor), so
// that make_forward_plan over it gives the training Program's units and shards: a backend that
// trains with `trained` can run the forward Program on its homes.
RunConfig forward_config(const RunConfig& config, const Plan& trained);

// Checks the Program against docs/DESIGN.md's invariants (1-4; 5 is determinism, tested by comparing
// dumps): acyclic with lanes in topological order, every shard fetched before each use and freed
// after, each gradient shard reduced once per micro-batch and stored, each optimizer shard updated
// once, memory events balanced (every buffer allocated once and freed once, by a task that depends
// on its allocation), each tier's peak within budget. Returns the violations found (empty: valid).
std::vector<std::string> validate_program(const Program& program);

// A wait a backend makes on its own: when task `waiter` runs, it relies on task `awaited` having
// finished (a condition variable, a lookup of what `awaited` left behind). Every such wait must be
// a dependency of the Program, direct or through other tasks, so that every executor, the
// simulator's included, orders the two the same way.
struct TaskWait {
  int32_t waiter = -1;
  int32_t awaited = -1;
  std::string why;  // what the backend waits for, for the message
};

// The waits that the Program does not state as a (transitive) dependency, one message each naming
// both tasks and the reason (empty: every wait is stated). Each costs a backward search over the
// tasks between the two; a direct dependency is found at once.
std::vector<std::string> unstated_waits(const Program& program, const std::vector<TaskWait>& waits);

// The wait of a backend that, as a micro-batch's backward begins, drops the device copies of the
// checkpoints it offloaded: the micro-batch's backward start (Program::backward_starts, its first
// Backward task) waits for every device-to-host copy of its checkpoints. The planner states these
// as dependencies.
std::vector<TaskWait> checkpoint_copy_waits(const Program& program);

}  // namespace zinf::core
