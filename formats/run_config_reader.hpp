// The readers and the writer of run configs: zinf's YAML (configs/*.yaml) and DeepSpeed's JSON
// (Hjson), each into a core::RunConfig. Keys zinf does not support are returned as warnings by the
// DeepSpeed reader, never dropped silently. Stateless functions; safe from several threads.
#pragma once
#include <string>
#include <vector>

#include "core/run_config.hpp"

namespace zinf::core {

struct DeepSpeedContext;

// zinf's YAML run config. Unknown keys are errors.
RunConfig load_run_config(const std::string& path);
RunConfig parse_run_config(const std::string& yaml_text, const std::string& name);

// A DeepSpeed JSON (Hjson) config, read as DeepSpeed reads it (formats/deepspeed_config.hpp) for the
// run `ctx` describes (a default context: one GPU, micro-batch 1); the reader's lines for the user
// are appended to `warnings`.
RunConfig parse_deepspeed_config(const std::string& json_text, const std::string& name,
                                 std::vector<std::string>& warnings, const DeepSpeedContext& ctx);
RunConfig parse_deepspeed_config(const std::string& json_text, const std::string& name,
                                 std::vector<std::string>& warnings);

// Picks the reader by content (is_deepspeed_json), DeepSpeed configs read for the run `ctx` describes.
RunConfig load_any_run_config(const std::string& path, std::vector<std::string>& warnings, const DeepSpeedContext& ctx);
RunConfig load_any_run_config(const std::string& path, std::vector<std::string>& warnings);
// Whether a file's text is a DeepSpeed config: its first character other than blanks and comments
// is '{' (zinf's YAML run configs are block mappings).
bool is_deepspeed_json(const std::string& text);

// `config` as zinf's YAML, every key written out (no `auto`: an automatic placement is written as
// the tier it names), so that load_run_config reads back the same values. `description` becomes
// the file's description and a comment above it.
std::string run_config_to_yaml(const RunConfig& config, const std::string& description);

}  // namespace zinf::core
