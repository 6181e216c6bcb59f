#include "engine/train/trainer_checks.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace zinf::engine {

void check_finite(const std::vector<float>& t, const std::string& tensor, const std::string& file, bool non_negative) {
  for (size_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t[i]) || (non_negative && t[i] < 0))
      throw std::runtime_error(fmt::format("checkpoint {}: tensor '{}' holds {} at element {}; the checkpoint is "
                                           "damaged or was saved from a diverged run",
                                           file, tensor, t[i], i));
}

std::string untrained_setting(const core::RunConfig& c, bool cuda) {
  if (c.checkpoints_per_block != 1)
    return fmt::format("activation_checkpoint.per_block {}: the engine keeps one checkpoint per block; two "
                       "(Megatron's --split-transformers) are planned and simulated only",
                       c.checkpoints_per_block);
  if (c.optimizer_host_path != core::HostPath::Fused)
    return fmt::format("optimizer.host_path {}: the engine moves gradients in the training precision to a host "
                       "optimizer (host_path: fused); DeepSpeed's fp32 host path is planned and simulated only",
                       core::to_string(c.optimizer_host_path));
  // The CPU backend trains every precision (engine/storage.hpp); the CUDA one's kernels are bf16's.
  if (cuda && c.precision && *c.precision != core::Precision::Bf16)
    return fmt::format("precision {}: the CUDA backend trains bf16 only; train {} with --backend cpu",
                       core::to_string(*c.precision), core::to_string(*c.precision));
  if (c.optimizer_type != "adam" && c.optimizer_type != "adamw")
    return fmt::format("optimizer {}: the engine runs Adam and AdamW; other optimizers are planned and simulated by "
                       "their state tensors only",
                       c.optimizer_type);
  if (c.zero_stage != 3)
    return fmt::format("zero_stage {}: the engine trains ZeRO stage 3 (every state partitioned); stages 0-2 are "
                       "planned and simulated only",
                       c.zero_stage);
  return "";
}

void refuse_untrained_settings(const TrainerOptions& o, bool cuda) {
  if (const std::string why = untrained_setting(o.config, cuda); !why.empty())
    throw std::invalid_argument(fmt::format("{}: {}", o.config_source, why));
}

}  // namespace zinf::engine
