// Fuzz target: zinf's YAML run config (core::parse_run_config).
#include "core/run_config.hpp"
#include "fuzz_target.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) { core::parse_run_config(std::string(input), "fuzz.yaml"); }
std::vector<std::string> builtin_seeds() { return {"zero_stage: 3\noptimizer: {beta1: 0.9}\n"}; }
}  // namespace zinf::fuzz
