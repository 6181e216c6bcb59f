// Lifetime-aware activation offload (TERAIO's design, in the planner). A *segment* is the
// activations one run of blocks keeps from its forward to its backward (one block with
// checkpoint_interval 1; `ci` blocks otherwise) for one micro-batch. With per-tensor granularity
// (the default) each of a block's saved tensors (core::block_tensors: ln1, qkv, the attention
// output and probabilities, the MLP's inner activations, ...) is an item of its own; with block
// granularity the segment is one item. An item's lifetime is where in the micro-batch's compute
// sequence it is produced, last used in forward and first used in backward, and how long the
// device is idle with respect to it in between. The pass chooses per item: keep it on the device,
// offload it to host memory or NVMe and prefetch it back, or drop it and recompute it — a whole
// segment from a checkpoint, a tensor by running its producing operator again in backward from
// its input (kept or brought back; never itself recomputed, so a recompute is one operator) —
// minimizing the predicted step under the device memory left for activations, with each path's
// bandwidth and each item's idle window. The tensors a segment offloads travel together, on one
// path.
//
// Pure functions of their inputs; thread-safe. The planner (core/planner.cpp) turns the choices
// into ordinary Program tasks (copies and NVMe transfers of Data::Activation, Recompute tasks), so
// both executors run them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "core/hwprofile.hpp"
#include "core/run_config.hpp"

namespace zinf::core {

struct ActivationLifetime {
  int32_t segment = 0;       // index among the segments (the planner's runs of blocks)
  int32_t run = 0;           // the planner's run index
  int first_block = 0, last_block = 0;
  double bytes = 0;          // per micro-batch, as the planner counts a run's activations
  // Per-tensor items: the tensor (core::block_tensors index, block first_block) and its share of
  // the run's bytes; -1 and 1 for a whole segment.
  int32_t tensor = -1;
  std::string name;
  double share = 1;
  bool pinned = false;       // the block's output: the next block's input, always kept
  int32_t input = -1;        // the item holding its producer's input (-1: the block input)
  int32_t consumer = -1;     // the item whose producer reads it
  double run_forward_seconds = 0;  // its run's forward (a tensor's forward_seconds is its producer's)
  // Positions in one micro-batch's compute sequence (forward operators, then backward ones).
  int32_t produced = 0;            // its first forward operator
  int32_t last_forward_use = 0;    // its last forward operator
  int32_t first_backward_use = 0;  // its first backward operator
  double idle_seconds = 0;         // predicted compute time between the last two (the idle window)
  double forward_seconds = 0;      // its forward: what recomputing it costs
  // Backward seconds of the runs after it, nearest first: what a load issued that many runs
  // ahead of its own backward can hide behind.
  std::vector<double> later_backward_seconds;
};

// The lifetimes of the activation segments of `runs` (operator ids per run, forward order; the
// runs outside the blocks are not segments: the embedding's output is the batch's, the head's is
// used at once). Seconds come from the profile's kernel cost at nominal rates. With `per_tensor`,
// one item per saved tensor of each block (core::block_tensors, in forward order; bytes are the
// per-block formula's times the tensor's share) in place of one per segment.
std::vector<ActivationLifetime> activation_lifetimes(const ModelGraph& g, const GpuSpec& gpu,
                                                     const std::vector<std::vector<int32_t>>& runs,
                                                     bool per_tensor = false);

// A block that offloads its activations may start its forward only once the save of the
// offloaded segment this many before it is done (the Program's dependency: unsaved activations do
// not pile up on the device). With saves slower than forward, consecutive offloads throttle it.
inline constexpr size_t kActivationSavesInFlight = 2;

// Seconds one micro-batch's forward waits on that dependency: segments in forward order, each
// computing its forward_seconds; save_seconds[i] > 0 for an offloaded one, its save starting when
// its forward ends and the saves before it are done (one queue). Exact for one lane of saves.
// Per-tensor items of one run count as their segment: the run's forward, the sum of their saves.
double forward_throttle_seconds(const std::vector<ActivationLifetime>& lifetimes, const std::vector<double>& save_seconds);

enum class ActivationAction { Keep, Offload, Recompute };
const char* to_string(ActivationAction a);

// How an offloaded segment travels.
enum class ActivationPath { Host, NvmeViaHost, Gds };
const char* to_string(ActivationPath p);

struct ActivationPassInput {
  ActivationPolicy policy = ActivationPolicy::Lifetime;
  Placement tier{true, Tier::Host};  // host, nvme or auto
  int64_t min_prefetch_runs = 1;     // an offloaded segment is loaded at least this many runs ahead
  double device_bytes_for_activations = 0;  // kept segments of one micro-batch must fit in this
  double checkpoint_bytes = 0;    // what a recomputed segment keeps on the device meanwhile (0: off it)
  bool can_recompute = true;      // a segment may be recomputed (checkpoints possible)
  // Seconds per byte, one direction, each path's bottleneck stage at its all-active share; 0: none.
  double host_seconds_per_byte = 0;
  double nvme_seconds_per_byte = 0;  // NVMe through host memory (PCIe and the drives pipelined)
  double gds_seconds_per_byte = 0;   // NVMe <-> GPU directly
  // Forward compute seconds of one micro-batch that saves can hide behind, less what parameter
  // traffic already takes of each resource in forward.
  double pcie_free_seconds = 0;
  double nvme_free_seconds = 0;
  double host_bytes_free = 0;     // per rank, for the offloaded segments of one micro-batch
  double nvme_bytes_free = 0;
};


struct ActivationChoice {
  ActivationAction action = ActivationAction::Keep;
  Tier tier = Tier::Device;
  ActivationPath path = ActivationPath::Host;
  double transfer_seconds = 0;   // one way, on the chosen path
  // Offloaded: the load is issued when the backward of the run this many after it begins — the
  // fewest (at least min_prefetch_runs) whose backward hides the transfer.
  int64_t prefetch_runs = 0;
  double predicted_cost = 0;     // seconds the choice adds to a micro-batch's step
  std::string reason;
};

// The choice per lifetime (same order). Throws PlanError naming the field when the input cannot
// be honoured (a fixed NVMe tier without room, say).
std::vector<ActivationChoice> choose_activation_actions(const std::vector<ActivationLifetime>& lifetimes,
                                                        const ActivationPassInput& in);

// Whether the choices keep the items under device_bytes_for_activations: per-tensor recompute
// frees less than a segment's, and the planner falls back to block granularity where it falls short.
bool activation_choices_fit(const std::vector<ActivationLifetime>& lifetimes, const std::vector<ActivationChoice>& choices,
                            const ActivationPassInput& in);

}  // namespace zinf::core
