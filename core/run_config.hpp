// RunConfig is how one training run is set up: ZeRO stage, where each state lives, activation
// checkpointing, tiling, prefetch, the aio and pinned-buffer settings, the optimizer. It comes from
// zinf's own YAML (configs/*.yaml) or from a DeepSpeed JSON config, read by
// formats/run_config_reader.hpp. Plain value type.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/deepspeed_release.hpp"
#include "core/precision.hpp"

namespace zinf::core {

// DeepSpeed's fp16 loss scale: static_scale > 0 fixes it; 0 makes it dynamic, starting at
// 2^initial_scale_power, doubled after `window` steps without an overflow, halved once `hysteresis`
// overflows (DeepSpeed's delayed_shift) have been absorbed, never below min_scale.
// consecutive_hysteresis refills the hysteresis after every step without an overflow.
struct LossScaleConfig {
  double static_scale = 0;           // fp16.loss_scale
  int64_t initial_scale_power = 16;  // fp16.initial_scale_power
  int64_t window = 1000;             // fp16.loss_scale_window
  int64_t hysteresis = 2;            // fp16.hysteresis
  bool consecutive_hysteresis = false;
  double min_scale = 1;              // fp16.min_loss_scale
  bool operator==(const LossScaleConfig&) const = default;
};

// The prefetch distances by default, in operators ahead of the compute that uses a parameter: the
// paper's NVMe -> host 3, host -> device 2, all-gather 1. Written here only.
inline constexpr int64_t kDefaultNvmePrefetchDistance = 3;
inline constexpr int64_t kDefaultH2dPrefetchDistance = 2;
inline constexpr int64_t kDefaultAllgatherPrefetchDistance = 1;

enum class Tier { Device, Host, Nvme };
const char* to_string(Tier t);

// Where a state is placed: a fixed tier, or `auto` (the fastest tier that fits, decided by the planner).
struct Placement {
  bool automatic = false;
  Tier tier = Tier::Device;
};
std::string to_string(const Placement& p);

enum class Partitioning { BandwidthCentric, OwnerBased };

// What the planner does with the activations a block keeps from its forward to its backward
// (core/activation_pass.hpp): `none` keeps them, or checkpoints and recomputes as
// activation_checkpoint says; `lifetime` chooses per block — keep, offload and prefetch back, or
// recompute — from each block's idle window and each path's bandwidth, under the device budget
// (TERAIO's lifetime-aware offload); `offload_all` offloads every block that has an idle window.
enum class ActivationPolicy { None, Lifetime, OffloadAll };
const char* to_string(ActivationPolicy p);
enum class OptimizerTiming { AfterBackward, OverlapBackward };
// How a host optimizer's gradients arrive and its updated parameters leave (optimizer.host_path).
// Fused (zinf): bf16 gradients to the host, one pass per sub-group (Adam, writing the bf16
// parameter). DeepSpeed03: what DeepSpeed's CPU offload did in v0.3.13-v0.3.15 (stage2.py,
// stage3.py): fp32 gradients to the host, then per sub-group a pass that unscales them (fp16 loss
// scaling), Adam, and a pass copying the fp32 master to fp16 (stage 3) or, stages 1-2, Adam writing
// the fp32 master into a pinned buffer that goes back to the device in fp32. Planned and simulated
// only: the engine runs the fused path in every precision. DeepSpeed09: ZeRO-3's offloaded
// optimizer as stage3.py allocates it from v0.9.0 to v0.10.0: the same passes as DeepSpeed03, and on
// the host both the gradient partition in the run's precision (its pinned flat buffer) and, per
// sub-group, the fp32 gradient the optimizer reads (also pinned, never released), each copied from
// the device; stage 3 only.
enum class HostPath { Fused, DeepSpeed03, DeepSpeed09 };
const char* to_string(HostPath p);

struct RunConfig {
  int zero_stage = 3;
  // Megatron-style tensor parallelism: ranks that split each layer, inside a node; ZeRO data
  // parallelism runs over ranks / tensor_parallel groups. Planned and simulated; the engine runs 1.
  int64_t tensor_parallel = 1;
  // Expert parallelism (DeepSpeed-MoE's ep_size): the routed experts of a mixture split over groups
  // of E consecutive data-parallel ranks, each rank holding experts / E of them; the tokens travel
  // to their experts and back by two all-to-alls per mixture layer. ZeRO partitions an expert slice
  // over the dp / E ranks that hold the same slice (the expert-data-parallel group). E divides the
  // data-parallel ranks and the experts. Planned and simulated; the engine trains no mixture.
  int64_t expert_parallel = 1;
  // Tokens each expert takes per micro-batch: ceil(capacity_factor x tokens x top_k / experts),
  // as DeepSpeed-MoE's top-k gating computes its capacity (deepspeed/moe/sharded_moe.py, _capacity);
  // the dispatched tensor and the experts' GEMMs have that many rows per expert, padding included.
  // 1.0 is DeepSpeed-MoE's default (deepspeed/moe/layer.py, MoE.__init__'s capacity_factor).
  double capacity_factor = 1.0;
  Partitioning partitioning = Partitioning::BandwidthCentric;
  Placement params{false, Tier::Device};     // bf16 parameter shards (and, with them, gradient shards)
  Placement optimizer{false, Tier::Device};  // fp32 master weights, Adam m and v
  Placement gradients{false, Tier::Device};  // bf16 gradient shards between reduce and optimizer step

  int64_t checkpoint_interval = 1;           // one activation checkpoint every ci blocks; 0 = off
  Placement checkpoints{false, Tier::Device};
  // How checkpoints move to and from their tier: overlapped (copy lanes, loaded one run ahead of the
  // recompute) or synchronous (the compute stream waits for each copy, as DeepSpeed's
  // cpu_checkpointing does: a blocking copy to pageable host memory in forward, and back to the device
  // when the recompute needs it).
  bool checkpoint_copies_synchronous = false;
  // With tensor parallelism: each rank of a group keeps 1/tensor_parallel of every checkpoint in its
  // tier, and the group all-gathers it before the recompute (DeepSpeed's partition_activations).
  bool checkpoints_partitioned = false;
  // Checkpoints each checkpointed block keeps: 1 (its input), or 2 (its input and its attention
  // output, the block split in two recompute segments, as Megatron's --split-transformers does in
  // DeepSpeed's Megatron + ZeRO-3 example). Planned and simulated; the engine keeps 1.
  int64_t checkpoints_per_block = 1;

  ActivationPolicy activation_policy = ActivationPolicy::None;
  // Where offloaded activations go: host, nvme, or auto (the pass picks per block the faster path
  // that fits the tier's budget).
  Placement activation_tier{true, Tier::Host};
  // An offloaded segment's activations are loaded back at least this many segments ahead of its
  // backward (1: when the backward of the one after it begins, as checkpoints are); the pass loads
  // earlier where the transfer needs longer to hide.
  int64_t activation_prefetch_blocks = 2;
  // Granularity of the pass's items: each saved tensor of a block (true), or a whole segment.
  bool activation_per_tensor = true;

  int64_t tiling_factor = 1;                 // 0 = auto
  // Tiles of the vocabulary-wide operators (the embedding and the LM head): 0 = auto (the tiling
  // factor times what brings their weight to the largest linear's size, core::vocabulary_tiles).
  int64_t vocabulary_tiles = 0;
  int64_t nvme_prefetch_distance = kDefaultNvmePrefetchDistance;            // operators ahead: NVMe -> host
  int64_t h2d_prefetch_distance = kDefaultH2dPrefetchDistance;              // host -> device
  int64_t allgather_prefetch_distance = kDefaultAllgatherPrefetchDistance;  // all-gather
  double max_live_bytes = 2e9;               // bound on prefetched parameter bytes resident on device
  double reuse_distance_bytes = 2e9;         // keep a gathered parameter if it is used again within this many bytes

  int64_t aio_block_size = 1 << 20;
  int64_t aio_queue_depth = 32;
  int64_t aio_rings = 1;
  // NVMe tasks each NVMe lane runs at once (aio.tasks_in_flight): while one task converts or waits
  // for its last block, the others keep the disk's queue full. Program::lane_slots of the NVMe lanes.
  int64_t aio_tasks_in_flight = 1;
  bool swap_checksums = true;                // CRC32C per 4 KiB page of the NVMe swap files (aio.checksums)
  // Read from a DeepSpeed config: refusals name the DeepSpeed keys that move what is short.
  bool deepspeed_keys = false;

  // The number format of parameters, gradients and activations (fp32 master weights and optimizer
  // states beside 16-bit ones, or all fp32). The hardware's rate and the bytes of every state follow
  // it. Unset: the GPU's own 16-bit format (fp16 on a V100, bf16 on later GPUs).
  std::optional<Precision> precision;
  // fp16's loss scale (DeepSpeed's fp16 section; `loss_scale:` in zinf's YAML). Read in every
  // precision, used in fp16 only: bf16 and fp32 train unscaled, as DeepSpeed does.
  LossScaleConfig loss_scaling;

  // adam (L2 weight decay), adamw (decoupled); from DeepSpeed configs also lamb, lion, adagrad,
  // sgd and torch.optim's others, planned by their state tensors (zinf train runs adam and adamw).
  std::string optimizer_type = "adamw";
  int64_t optimizer_states = 2;              // fp32 tensors the optimizer keeps per parameter (Adam: m, v)
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  double grad_clip = 0.0;                    // 0 = no clipping
  int64_t sub_group_size = 1'000'000'000;    // parameters per optimizer sub-group
  // Where sub-groups end: after sub_group_size elements of the shard space (false), or after the
  // whole parameter unit that reaches sub_group_size (true), as DeepSpeed's stage 3 groups whole
  // parameters, so that there are never more sub-groups than units (optimizer.sub_group_boundaries).
  bool sub_groups_whole_units = false;
  OptimizerTiming optimizer_timing = OptimizerTiming::AfterBackward;
  // Optimizer sub-groups whose states are in host memory at once when the optimizer states are on
  // NVMe (optimizer.sub_groups_in_flight; 0 = auto: a quarter of the host budget the states placed
  // there leave, at least 3). Their states are read ahead of the gradient norm.
  int64_t optimizer_sub_groups_in_flight = 0;
  // NVMe optimizer: the sub-groups in flight move as a wave, reads then writes (optimizer.nvme_phases),
  // instead of a sub-group's read following the write of the one `in flight` before it.
  bool optimizer_nvme_phases = true;
  // NVMe optimizer overlapping backward: of the sub-groups ready at once, every state read before
  // any gradient read, and the first pipeline's worth read during the last micro-batch's forward,
  // instead of each sub-group's states just before its gradients (optimizer.read_ahead).
  bool optimizer_read_ahead = true;
  HostPath optimizer_host_path = HostPath::Fused;
  int64_t gradient_accumulation = 1;
  std::optional<int64_t> micro_batch;        // overrides the model's micro_batch when set
  // Overrides the model's sequence length when set: a Hugging Face config.json's default is
  // capped (formats/hf_config.hpp), and a run trains on what it trains on.
  std::optional<int64_t> seq;
  bool reserve_nvme_for_checkpoint = true;   // keep room on NVMe for one saved training checkpoint
  // Backpressure on backward: a backward step that starts new gradients waits until the gradient
  // stored this many stores ago is stored (bounds the gradient buffers on the device).
  int64_t gradient_stores_in_flight = 4;
  // What the engine does around each fetch and reduction beyond the settings above: zinf's own
  // (the defaults), or a DeepSpeed release's (`deepspeed_release:`, switches in `deepspeed_behaviour:`;
  // core/deepspeed_release.hpp). Planned and simulated; the engine runs zinf's.
  DeepSpeedBehaviour deepspeed;
};

// Bytes per parameter of each model state as `c` trains: the parameter and its gradient in the
// training precision; the optimizer's fp32 states and, unless the parameters are themselves the fp32
// copy the optimizer updates (fp32 without ZeRO), fp32 master weights.
double param_bytes(const RunConfig& c);
double grad_bytes(const RunConfig& c);
double optimizer_state_bytes(const RunConfig& c);
// Whether the optimizer's weight decay is decoupled from the gradient (AdamW, LAMB, Lion).
bool decoupled_weight_decay(const std::string& optimizer_type);

}  // namespace zinf::core
