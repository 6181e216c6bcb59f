// The writer of a RunConfig as zinf's YAML (read back by formats/run_config_reader.cpp's reader). The
// DeepSpeed writer is formats/deepspeed_writer.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/run_config.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::core {

namespace {

// A placement as the YAML reader spells it; `auto` is resolved to the tier it carries.
const char* tier_word(const Placement& p) {
  switch (p.tier) {
    case Tier::Device: return "device";
    case Tier::Host: return "host";
    case Tier::Nvme: return "nvme";
  }
  return "device";
}

}  // namespace

std::string run_config_to_yaml(const RunConfig& c, const std::string& description) {
  std::string one_line = description;
  for (char& ch : one_line)
    if (ch == '\n' || ch == '"' || ch == '\\') ch = ' ';
  std::string out;
  out += fmt::format("# {}\n", one_line);
  out += fmt::format("description: \"{}\"\n", one_line);
  out += fmt::format("zero_stage: {}\n", c.zero_stage);
  out += fmt::format("partitioning: {}\n",
                     c.partitioning == Partitioning::OwnerBased ? "owner-based" : "bandwidth-centric");
  out += fmt::format("offload: {{params: {}, gradients: {}, optimizer: {}}}\n", tier_word(c.params),
                     tier_word(c.gradients), tier_word(c.optimizer));
  out += fmt::format("activation_checkpoint: {{interval: {}, tier: {}, copies: {}, partitioned: {}, per_block: {}}}\n",
                     c.checkpoint_interval, tier_word(c.checkpoints),
                     c.checkpoint_copies_synchronous ? "synchronous" : "overlapped", c.checkpoints_partitioned,
                     c.checkpoints_per_block);
  if (c.activation_policy != ActivationPolicy::None)
    out += fmt::format("activation_offload: {{policy: {}, tier: {}, prefetch_blocks: {}, granularity: {}}}\n",
                       to_string(c.activation_policy), to_string(c.activation_tier), c.activation_prefetch_blocks,
                       c.activation_per_tensor ? "tensor" : "block");
  out += fmt::format("tensor_parallel: {}\n", c.tensor_parallel);
  out += fmt::format("expert_parallel: {}\n", c.expert_parallel);
  out += fmt::format("capacity_factor: {}\n", c.capacity_factor);
  out += fmt::format("tiling_factor: {}\n", c.tiling_factor > 0 ? std::to_string(c.tiling_factor) : "auto");
  if (c.vocabulary_tiles > 0) out += fmt::format("vocabulary_tiles: {}\n", c.vocabulary_tiles);
  out += fmt::format(
      "prefetch: {{nvme_distance: {}, h2d_distance: {}, allgather_distance: {}, max_live_bytes: {:.0f}, "
      "reuse_distance_bytes: {:.0f}}}\n",
      c.nvme_prefetch_distance, c.h2d_prefetch_distance, c.allgather_prefetch_distance, c.max_live_bytes,
      c.reuse_distance_bytes);
  out += fmt::format("aio: {{block_size: {}, queue_depth: {}, rings: {}, tasks_in_flight: {}, checksums: {}}}\n",
                     c.aio_block_size, c.aio_queue_depth, c.aio_rings, c.aio_tasks_in_flight, c.swap_checksums);
  out += fmt::format(
      "optimizer: {{type: {}, states: {}, lr: {}, beta1: {}, beta2: {}, eps: {}, weight_decay: {}, grad_clip: {}, "
      "sub_group_size: {}, sub_group_boundaries: {}, timing: {}, sub_groups_in_flight: {}, nvme_phases: {}, read_ahead: {}, host_path: {}}}\n",
      c.optimizer_type, c.optimizer_states, c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, c.grad_clip, c.sub_group_size, c.sub_groups_whole_units ? "units" : "elements",
      c.optimizer_timing == OptimizerTiming::OverlapBackward ? "overlap-backward" : "after-backward",
      c.optimizer_sub_groups_in_flight > 0 ? std::to_string(c.optimizer_sub_groups_in_flight) : "auto",
      c.optimizer_nvme_phases, c.optimizer_read_ahead,
      to_string(c.optimizer_host_path));
  out += fmt::format("precision: {}\n", c.precision ? to_string(*c.precision) : "auto");
  const auto& l = c.loss_scaling;
  if (!(l == LossScaleConfig{}))
    out += fmt::format("loss_scale: {{static: {}, initial_scale_power: {}, window: {}, hysteresis: {}, "
                       "consecutive_hysteresis: {}, min: {}}}\n",
                       l.static_scale, l.initial_scale_power, l.window, l.hysteresis, l.consecutive_hysteresis,
                       l.min_scale);
  out += fmt::format("gradient_accumulation: {}\n", c.gradient_accumulation);
  if (c.micro_batch) out += fmt::format("micro_batch: {}\n", *c.micro_batch);
  if (c.seq) out += fmt::format("seq: {}\n", *c.seq);
  out += fmt::format("reserve_nvme_for_checkpoint: {}\n", c.reserve_nvme_for_checkpoint);
  out += fmt::format("gradient_stores_in_flight: {}\n", c.gradient_stores_in_flight);
  const auto& d = c.deepspeed;
  if (!d.release.empty()) out += fmt::format("deepspeed_release: \"{}\"\n", d.release);
  out += fmt::format(
      "deepspeed_behaviour: {{fetch_syncs_device: {}, backward_nvme_prefetch: {}, gather_device_passes: {}, "
      "reduce_device_passes: {}, prefetch_while_under_live: {}, trace_misaligned: {}}}\n",
      d.fetch_syncs_device, d.backward_nvme_prefetch, d.gather_device_passes, d.reduce_device_passes,
      d.prefetch_while_under_live, d.trace_misaligned);
  return out;
}

}  // namespace zinf::core
