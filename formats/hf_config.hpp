// Reads a Hugging Face config.json into a core::ModelSpec: the family by its model_type (llama,
// mistral, mixtral, qwen2, qwen2_moe, gemma, gemma2, phi3, gpt_neox, falcon, opt, bloom, gpt2,
// deepseek_v2), each key the family's transformers configuration class reads, and for an absent
// key that class's default (DeepSeek-V2: the configuration_deepseek.py its checkpoints name in
// auto_map). Keys that change nothing zinf models (token ids, dropout, epsilons, rope bases and
// scaling, routing losses) are accepted; any other key, an unknown model_type, a value of the wrong
// type or out of range is a ConfigError naming the file and the key: nothing falls back to GPT-2.
//
// The sequence: max_position_embeddings is how far a model's positions reach, not what it trained
// on, so the spec's seq is min(max_position_embeddings, kDefaultHfSeq) (kDefaultHfSeq for a family
// without it, BLOOM's ALiBi). A run config's `seq` overrides it as it does a YAML model's.
// The micro-batch is 1 (a run config sets it). Stateless functions; safe from any thread.
#pragma once
#include <string>

#include "core/model_spec.hpp"

namespace zinf::models {

inline constexpr int64_t kDefaultHfSeq = 4096;

// `path` names the file in errors and the model (its folder's name).
core::ModelSpec parse_hf_config(const std::string& json_text, const std::string& path);
// Reads through the bounded reader (formats/bounded_input.hpp).
core::ModelSpec load_hf_config(const std::string& path);

// The config.json that `path` names: the file itself when it ends in .json, the folder's
// config.json when it is a folder; empty when it is neither (a YAML model or a name).
std::string hf_config_path(const std::string& path);

}  // namespace zinf::models
