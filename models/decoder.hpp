// Builds core's model graph of any architecture core::model_layout describes (Llama, Mistral,
// Mixtral, Qwen2, Qwen2-MoE, Gemma, Gemma 2, Phi-3, GPT-NeoX, Falcon, OPT, BLOOM, DeepSeek-V2, and
// GPT-2 variants the GPT builder does not take): one parameter group per module as ZeRO-3 fetches
// them (a mixture's routed experts one group, gathered whole as DeepSpeed gathers a leaf MoE
// block), operators in forward order with their FLOPs (three matrices for a gated MLP, GQA's
// smaller keys and values, the real head sizes, sliding windows, MLA's compressions, only the
// top-k experts per token) and bytes. Pure function, thread-safe.
#pragma once
#include "core/graph.hpp"
#include "core/model_spec.hpp"

namespace zinf::models {

// Whole-model graph (no tensor parallelism). Its total_params() is core::exact_params(spec).total.
core::ModelGraph build_decoder(const core::ModelSpec& spec);

}  // namespace zinf::models
