// Builds core's model graph of a GPT-2-style transformer (pre-LayerNorm blocks, learned position
// embeddings, causal attention, GELU MLP, LM head tied to the token embedding) from a ModelSpec.
// Parameter groups carry Hugging Face GPT-2 names. Pure functions, thread-safe.
#pragma once
#include "core/graph.hpp"
#include "core/model_spec.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"

namespace zinf::models {

// With tensor_parallel t > 1 the graph is one rank's share of Megatron-style tensor parallelism:
// c_attn and c_fc split by output columns, both c_proj by input rows (their bias whole), heads and the
// vocabulary (embedding, LM head, loss; padded to a multiple of t) split t ways, layernorms and
// residuals whole; each operator states the activation bytes all-reduced over the group after it
// (core/graph.hpp). Throws std::invalid_argument naming the dimension (heads, hidden, MLP) that t
// does not divide.
core::ModelGraph build_gpt(const core::ModelSpec& spec, int64_t tensor_parallel = 1);

// The graph `config` trains: `spec` with the config's micro-batch when it sets one, as the config's
// tensor-parallel share. Everything that plans a run (the Trainer, zinf plan, sim, validate and
// tune) builds its graph this way, so all of them plan the same Program. A tensor-parallel degree
// the model's shape does not take is a core::PlanError here (a refusal, as any plan's).
core::ModelGraph build_gpt(const core::ModelSpec& spec, const core::RunConfig& config);

// The one way from a model spec and a run config to a plan: the graph `config` trains
// (build_gpt(spec, config)) and core::make_plan over it for `ranks` data-parallel ranks on `hw`.
// The Trainer, zinf plan, sim, validate, tune and `auto` plan through it, so all of them plan the
// same Program. Throws core::PlanError when the plan does not fit.
struct GptPlan {
  core::ModelGraph graph;
  core::PlanResult planned;
};
GptPlan plan_gpt(const core::ModelSpec& spec, const core::HwProfile& hw, const core::RunConfig& config, int ranks,
                 const std::vector<int32_t>& recorded_order = {});

// Finds models/<name>.yaml (or a path) and loads it, or reads a Hugging Face config.json given as
// the file or the folder holding it (formats/hf_config.hpp); throws ConfigError naming what was tried.
core::ModelSpec find_model(const std::string& name_or_path, const std::string& source_dir);

// What keeps the engine's Llama kernels (engine/model/llama_ops.cpp) from computing a model: the
// config.json key at fault and why, or an empty `why` for a Llama they compute (RMSNorm, unscaled
// rotary positions, grouped-query attention, SiLU-gated MLP, no biases).
struct EngineProblem {
  std::string key, why;
};
EngineProblem llama_engine_problem(const core::ModelSpec& m);

// The engine (zinf train, sample, validate) runs GPT-2's kernels and the Llama family's: any other
// architecture, or a Llama variant llama_engine_problem names, is refused at once with a
// ConfigError naming the model's file and the key. `what` names the command for the message.
void require_engine_architecture(const core::ModelSpec& m, const std::string& what);

}  // namespace zinf::models
