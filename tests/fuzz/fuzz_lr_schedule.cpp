// Fuzz target: the learning-rate schedule of a run config (zinf's `lr_schedule` section, or a
// DeepSpeed JSON's `scheduler`), core::parse_lr_schedule.
#include <vector>

#include "formats/lr_schedule_reader.hpp"
#include "fuzz_target.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) {
  std::vector<std::string> warnings;
  core::parse_lr_schedule(std::string(input), "fuzz.yaml", warnings);
}
std::vector<std::string> builtin_seeds() {
  return {"lr_schedule: {warmup_steps: 10, decay: cosine, decay_steps: auto, min_lr_ratio: 0.1}\n",
          R"({"train_micro_batch_size_per_gpu": 2, "scheduler": {"type": "WarmupDecayLR",
 "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 10, "total_num_steps": 100}}})"};
}
}  // namespace zinf::fuzz
