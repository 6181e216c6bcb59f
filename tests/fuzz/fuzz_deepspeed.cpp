// Fuzz target: DeepSpeed JSON configs (core::parse_deepspeed_config).
#include "core/run_config.hpp"
#include "fuzz_target.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) {
  std::vector<std::string> warnings;
  core::parse_deepspeed_config(std::string(input), "fuzz.json", warnings);
}
std::vector<std::string> builtin_seeds() {
  return {R"({"train_batch_size": 8, "gradient_accumulation_steps": 2, "optimizer": {"type": "AdamW",
 "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": 1e-8}}, "zero_optimization": {"stage": 3,
 "offload_param": {"device": "nvme", "buffer_size": 100000000}}})"};
}
}  // namespace zinf::fuzz
