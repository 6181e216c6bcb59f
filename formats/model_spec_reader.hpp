// The reader of zinf's model specs (models/*.yaml) into a core::ModelSpec: the shape, the
// architecture's family and its keys, each defaulting to the family's value; unknown keys refused.
// Stateless functions; safe from several threads.
#pragma once
#include <string>

#include "core/model_spec.hpp"

namespace zinf::core {

// Loads and validates a model spec; throws ConfigError naming the file and key.
ModelSpec load_model_spec(const std::string& path);
ModelSpec parse_model_spec(const std::string& yaml_text, const std::string& name);

}  // namespace zinf::core
