// Builds core's model graph of a GPT-2-style transformer (pre-LayerNorm blocks, learned position
// embeddings, causal attention, GELU MLP, LM head tied to the token embedding) from a ModelSpec.
// Parameter groups carry Hugging Face GPT-2 names. Pure functions, thread-safe.
#pragma once
#include "core/graph.hpp"
#include "core/model_spec.hpp"

namespace zinf::models {

core::ModelGraph build_gpt(const core::ModelSpec& spec);


// Finds models/<name>.yaml (or a path) and loads it; throws ConfigError naming what was tried.
core::ModelSpec find_model(const std::string& name_or_path, const std::string& source_dir);

}  // namespace zinf::models
