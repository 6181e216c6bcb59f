// Fuzz target: sweep specs (core::parse_sweep_spec: files, fields and axes, resolved against the
// source tree's models, hwprofiles and configs).
#include "core/sweep_spec.hpp"
#include "fuzz_target.hpp"
#include "formats/sweep_spec_reader.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) { core::parse_sweep_spec(std::string(input), "fuzz.yaml", ZINF_SOURCE_DIR); }
std::vector<std::string> builtin_seeds() {
  return {"models: [gpt-tiny]\nhwprofiles: [cpu-dev]\nconfigs: [train-nvme]\nnodes: [1, 2]\n"
          "axes:\n  - {field: config.optimizer.lr, values: [1.0e-3, 2.0e-3]}\n"};
}
}  // namespace zinf::fuzz
