// What the Trainer checks of its inputs beyond the plan: run-config settings the engine plans and
// simulates but does not train (refused by name before anything runs), and the tensors a checkpoint
// hands back. Free functions, no state, thread-safe.
#pragma once
#include <string>
#include <vector>

#include "engine/train/trainer.hpp"

namespace zinf::engine {

// What `zinf train` does not train in `c` on this backend (`cuda`: the CUDA one), naming the setting
// and why, or "": ZeRO stages 0-2, two checkpoints per block, DeepSpeed 0.3's host path, optimizers
// other than Adam and AdamW, and on CUDA any precision but bf16. Every precision trains on the CPU.
std::string untrained_setting(const core::RunConfig& c, bool cuda);
// Throws std::invalid_argument with untrained_setting's reason, naming o.config_source.
void refuse_untrained_settings(const TrainerOptions& o, bool cuda);

// A loaded optimizer state must be finite (and v non-negative): a NaN page in a checkpoint would
// otherwise train on silently. Throws std::runtime_error naming the file and tensor.
void check_finite(const std::vector<float>& t, const std::string& tensor, const std::string& file, bool non_negative);

}  // namespace zinf::engine
