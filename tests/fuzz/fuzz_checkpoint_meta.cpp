// Fuzz target: a checkpoint's meta.json and checksums.json (engine::parse_checkpoint_meta,
// engine::parse_checksums) and the fields a resume reads from meta.json: the divergence window,
// the data identity and the recorded config.
#include <stdexcept>

#include "engine/train/checkpoint_dir.hpp"
#include "engine/train/divergence.hpp"
#include "engine/train/run_identity.hpp"
#include "fuzz_target.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) {
  const std::string text(input);
  try {
    engine::parse_checksums(text, "checksums.json");
  } catch (const std::runtime_error&) {
    // A refusal naming the file, as intended; go on to read the same bytes as meta.json.
  }
  const auto meta = engine::parse_checkpoint_meta(text, "meta.json");
  if (meta.contains("divergence")) engine::DivergenceRule(256).from_json(meta["divergence"], "meta.json");
  if (meta.contains("data")) engine::DataIdentity::from_json(meta["data"], "meta.json");
  if (meta.contains("config")) engine::fields_from_json(meta["config"], "meta.json", "config");
}
std::vector<std::string> builtin_seeds() {
  return {R"({"format": "zinf-checkpoint-1", "step": 2, "data_position": 4, "data_seed": 1234,
 "data": {"tokens": 100000, "head_crc32c": 305419896, "source": "fortunes"},
 "config": {"config.optimizer.lr": "0.001", "config.zero_stage": "3"},
 "divergence": {"losses": [5.47, 5.2], "grad_norms": [1.5, 1.2]},
 "model": {"name": "gpt-tiny", "layers": 2, "hidden": 64, "heads": 4, "seq": 64, "vocab": 256, "micro_batch": 2}})",
          R"({"format": "zinf-checksums-1", "files": {"meta.json": {"bytes": 120, "crc32c": 4023233417},
 "state.safetensors": {"bytes": 1500000, "crc32c": 12345}}})"};
}
}  // namespace zinf::fuzz
