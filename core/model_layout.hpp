// The layout of a model: for each architecture (core::ModelSpec's family and its fields), the
// modules a transformer block and the rest of the model run, in forward order, with their
// parameter tensors as Hugging Face's modeling code creates them. One description, read by the
// exact parameter count (core::exact_params), the memory model's closed form and the graph
// builder (models/decoder.cpp), so that all three count the same parameters. Pure functions,
// thread-safe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_spec.hpp"

namespace zinf::core {

enum class StepKind {
  Embedding,   // a lookup table: `out` rows (vocabulary or positions) of `in` columns
  Norm,        // LayerNorm or RMSNorm over `width`
  Linear,      // in -> out, with a bias when `bias`
  Attention,   // softmax(Q K^T) V over `span` tokens, `heads` query heads
  Activation,  // the MLP's nonlinearity (with a gated MLP: act(gate) * up) over `width`
  Residual,    // the residual add over `width`
  Router,      // a mixture's gate: hidden -> experts scores, then top-k
  Experts,     // `experts` MLPs hidden -> `out` -> hidden, of which each token uses `top_k`
  Head,        // the LM head: hidden -> vocabulary (no parameters of its own when tied)
};

struct LayerStep {
  std::string name;   // the Hugging Face module name below the model, e.g. "layers.3.self_attn.q_proj"
  StepKind kind = StepKind::Linear;
  int64_t in = 0, out = 0;
  bool bias = false;
  int64_t width = 0;     // elements per token an elementwise step reads and writes
  int64_t numel = 0;     // its parameters
  int64_t active = 0;    // of those, the ones one token uses
  // Attention: query heads, query/key and value head sizes, and the tokens one query attends to.
  int64_t heads = 0, qk_dim = 0, v_dim = 0, span = 0;
  // Experts: how many, and how many a token uses; gated: three matrices each, else two.
  int64_t experts = 0, top_k = 0;
  bool gated = false;
};

// The steps of block `layer`, in forward order (parallel attention: both branches, then one
// residual add).
std::vector<LayerStep> block_steps(const ModelSpec& m, int64_t layer);
// The steps before the blocks (embeddings, their norm, OPT's project_in) and after them (final
// norm, project_out, the head).
std::vector<LayerStep> embedding_steps(const ModelSpec& m);
std::vector<LayerStep> head_steps(const ModelSpec& m);

// Parameters of one block (total and active), and of everything outside the blocks.
ExactParams block_params(const ModelSpec& m, int64_t layer);
ExactParams outside_params(const ModelSpec& m);

// The elements of the largest weight a block holds (a mixture's routed experts count as one, as
// they are gathered as one: under expert parallelism E, a rank's experts / E of them), without and
// with its bias.
int64_t largest_block_weight(const ModelSpec& m, bool with_bias, int64_t expert_parallel = 1);

// The parameters of every layer's routed experts together (0 without a mixture): what expert
// parallelism splits.
int64_t routed_expert_params(const ModelSpec& m);

// Bytes one token's bf16 activations of one block keep for backward, as autograd keeps them: each
// norm's, linear's (linears side by side on one input keep it once) and activation's input, attention's q, k, v and output, a mixture's dispatched
// tokens and their experts' inner activations, and 2 bytes per attention probability (heads x the
// tokens attended). The largest over the block kinds (local and global, dense and mixture).
double layout_activation_bytes_per_token(const ModelSpec& m);

// The module names a family gives its parts (HF's), e.g. Llama's "self_attn.q_proj".
const char* block_prefix(Family f);

}  // namespace zinf::core
