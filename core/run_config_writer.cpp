// Writers of a RunConfig: zinf's YAML (read back by core/run_config.cpp's reader) and DeepSpeed's
// JSON (the subset of keys that reader maps).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/run_config.hpp"

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

const char* deepspeed_device(const Placement& p) {
  switch (p.tier) {
    case Tier::Device: return "none";
    case Tier::Host: return "cpu";
    case Tier::Nvme: return "nvme";
  }
  return "none";
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
  out += fmt::format("tiling_factor: {}\n", c.tiling_factor > 0 ? std::to_string(c.tiling_factor) : "auto");
  out += fmt::format(
      "prefetch: {{nvme_distance: {}, h2d_distance: {}, allgather_distance: {}, max_live_bytes: {:.0f}, "
      "reuse_distance_bytes: {:.0f}}}\n",
      c.nvme_prefetch_distance, c.h2d_prefetch_distance, c.allgather_prefetch_distance, c.max_live_bytes,
      c.reuse_distance_bytes);
  out += fmt::format("aio: {{block_size: {}, queue_depth: {}, rings: {}, tasks_in_flight: {}, checksums: {}}}\n",
                     c.aio_block_size, c.aio_queue_depth, c.aio_rings, c.aio_tasks_in_flight, c.swap_checksums);
  out += fmt::format(
      "optimizer: {{type: {}, lr: {}, beta1: {}, beta2: {}, eps: {}, weight_decay: {}, grad_clip: {}, "
      "sub_group_size: {}, timing: {}, sub_groups_in_flight: {}, nvme_phases: {}, read_ahead: {}, host_path: {}}}\n",
      c.optimizer_type, c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, c.grad_clip, c.sub_group_size,
      c.optimizer_timing == OptimizerTiming::OverlapBackward ? "overlap-backward" : "after-backward",
      c.optimizer_sub_groups_in_flight > 0 ? std::to_string(c.optimizer_sub_groups_in_flight) : "auto",
      c.optimizer_nvme_phases, c.optimizer_read_ahead,
      c.optimizer_host_path == HostPath::DeepSpeed03 ? "deepspeed-0.3" : "fused");
  out += fmt::format("gradient_accumulation: {}\n", c.gradient_accumulation);
  if (c.micro_batch) out += fmt::format("micro_batch: {}\n", *c.micro_batch);
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

std::string run_config_to_deepspeed_json(const RunConfig& c, int ranks, int64_t model_micro_batch,
                                         std::vector<std::string>& not_expressed) {
  using nlohmann::ordered_json;
  const int64_t mb = c.micro_batch.value_or(model_micro_batch);
  ordered_json j;
  j["train_batch_size"] = mb * c.gradient_accumulation * (ranks / std::max<int64_t>(1, c.tensor_parallel));
  j["train_micro_batch_size_per_gpu"] = mb;
  j["gradient_accumulation_steps"] = c.gradient_accumulation;
  if (c.grad_clip > 0) j["gradient_clipping"] = c.grad_clip;
  j["bf16"] = {{"enabled", true}};
  j["optimizer"] = {{"type", c.optimizer_type == "adam" ? "Adam" : "AdamW"},
                    {"params", {{"lr", c.lr}, {"betas", {c.beta1, c.beta2}}, {"eps", c.eps}, {"weight_decay", c.weight_decay}}}};
  ordered_json z;
  z["stage"] = c.zero_stage;
  // DeepSpeed's swap buffer_count and buffer_size are left to its defaults: zinf has no such setting.
  auto offload = [&](const Placement& p, bool) {
    ordered_json o;
    o["device"] = deepspeed_device(p);
    if (p.tier == Tier::Nvme) o["nvme_path"] = "/local_nvme";
    o["pin_memory"] = true;
    return o;
  };
  z["offload_param"] = offload(c.params, true);
  z["offload_optimizer"] = offload(c.optimizer, false);
  z["stage3_max_live_parameters"] = static_cast<int64_t>(c.max_live_bytes / 2);
  z["stage3_max_reuse_distance"] = static_cast<int64_t>(c.reuse_distance_bytes / 2);
  z["sub_group_size"] = c.sub_group_size;
  z["overlap_comm"] = true;
  z["contiguous_gradients"] = true;
  j["zero_optimization"] = z;
  j["aio"] = {{"block_size", c.aio_block_size}, {"queue_depth", c.aio_queue_depth}, {"thread_count", 1},
              {"single_submit", false}, {"overlap_events", true}};
  if (c.tensor_parallel > 1) j["tensor_parallel"] = {{"autotp_size", c.tensor_parallel}};
  if (c.checkpoint_interval > 0)
    j["activation_checkpointing"] = {{"partition_activations", c.checkpoints_partitioned},
                                     {"cpu_checkpointing", c.checkpoints.tier == Tier::Host},
                                     {"contiguous_memory_optimization", false}};

  if (c.gradients.tier != c.params.tier)
    not_expressed.push_back(fmt::format("gradients on {} (DeepSpeed keeps them with the parameters, on {})",
                                        tier_word(c.gradients), deepspeed_device(c.params)));
  if (c.checkpoint_interval > 1)
    not_expressed.push_back(fmt::format("a checkpoint every {} blocks (DeepSpeed checkpoints every block it wraps)",
                                        c.checkpoint_interval));
  if (c.checkpoint_interval > 0 && c.checkpoints_per_block == 2)
    not_expressed.push_back("two checkpoints per block (Megatron's --split-transformers, a flag of the model code)");
  if (c.checkpoint_interval > 0 && c.checkpoints.tier == Tier::Nvme)
    not_expressed.push_back("activation checkpoints on NVMe (DeepSpeed: device or cpu_checkpointing)");
  if (c.checkpoint_interval > 0 && c.checkpoints.tier == Tier::Host && !c.checkpoint_copies_synchronous)
    not_expressed.push_back("overlapped checkpoint copies (DeepSpeed's cpu_checkpointing copies on the compute stream)");
  if (c.activation_policy != ActivationPolicy::None)
    not_expressed.push_back(fmt::format("activation offload ({}; DeepSpeed has no per-block offload of activations)",
                                        to_string(c.activation_policy)));
  if (c.tiling_factor != 1)
    not_expressed.push_back(fmt::format("tiling factor {} (DeepSpeed tiles linears in the model code, "
                                        "deepspeed.zero.TiledLinear)",
                                        c.tiling_factor > 0 ? std::to_string(c.tiling_factor) : "auto"));
  if (c.nvme_prefetch_distance != kDefaultNvmePrefetchDistance || c.h2d_prefetch_distance != kDefaultH2dPrefetchDistance ||
      c.allgather_prefetch_distance != kDefaultAllgatherPrefetchDistance)
    not_expressed.push_back(fmt::format("prefetch distances {}/{}/{} (DeepSpeed bounds prefetch by bytes only)",
                                        c.nvme_prefetch_distance, c.h2d_prefetch_distance,
                                        c.allgather_prefetch_distance));
  if (c.partitioning == Partitioning::OwnerBased) not_expressed.push_back("owner-based partitioning");
  if (c.optimizer_timing == OptimizerTiming::OverlapBackward)
    not_expressed.push_back("optimizer sub-groups updated during backward");
  return j.dump(2) + "\n";
}

}  // namespace zinf::core
