// The model graph: parameter groups and operators in forward order, with what the memory model,
// the planner and the cost models need of each — parameter count, FLOPs of forward and backward,
// bytes of activations, and whether the operator is a linear that tiling may split. Built by
// models/ from a ModelSpec; immutable afterwards and safe to share between threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_spec.hpp"

namespace zinf::core {

enum class OpKind { Embedding, LayerNorm, Linear, Attention, Gelu, Residual, LmHead, Loss };
const char* to_string(OpKind k);

struct ParamGroup {
  int id = 0;
  std::string name;        // Hugging Face GPT-2 name of the main tensor, e.g. h.3.mlp.c_fc
  int64_t rows = 0;        // a linear's weight is rows x cols = out x in; biases are counted in numel
  int64_t cols = 0;
  int64_t numel = 0;       // all elements of the group (weight + bias, or gamma + beta)
  bool tileable = false;   // a weight that memory-centric tiling may split along rows
  // Rows are the vocabulary (wte, an untied lm_head): the vocabulary-wide operators' weight, tiled
  // to the size of the linears' tiles (core::vocabulary_tiles), not by the tiling factor alone.
  bool vocabulary = false;
  // Tensor parallelism: the elements at the group's end that every rank of the tensor-parallel group
  // holds whole rather than a slice of (a layernorm or position embedding: all of them; a
  // row-parallel linear: its bias). Their gradients are equal on every rank, so a gradient norm
  // over the group counts them once.
  int64_t tp_replicated = 0;
  // The routed experts of a mixture (all of one layer's, one group as ZeRO-3 gathers them): expert
  // parallelism splits them over its group, each rank holding experts / E of them.
  bool experts = false;
};

// What an operator is within its model, for a backend that runs it (a GPT's: its place in the
// model and in a block). Set by the model builder (models/gpt.cpp), so that no backend parses names.
enum class OpRole { None, Embed, Ln1, CAttn, Attn, AttnProj, Res1, Ln2, Fc, Gelu, MlpProj, Res2, LnF, LmHead, Loss };

struct Operator {
  int id = 0;
  std::string name;
  OpKind kind = OpKind::Linear;
  OpRole role = OpRole::None;
  int block = -1;              // transformer block index, -1 outside the blocks
  std::vector<int> param_groups;  // parameter groups the operator reads (empty: none)
  int64_t m = 0, n = 0, k = 0; // GEMM shape of a linear (tokens x out x in), or of one head's GEMMs in
                               // attention (seq x seq x head size); 0 otherwise
  double fwd_flops = 0;
  double bwd_flops = 0;
  double fwd_bytes = 0;        // memory traffic of the forward kernel(s)
  double out_bytes = 0;        // bytes of the output activation (bf16)
  // Tensor parallelism: bytes all-reduced over the tensor-parallel group right after the forward
  // (a row-parallel linear's partial sums, a vocabulary-parallel embedding) and after the backward
  // (a column-parallel linear's input gradient) of this operator; 0 without tensor parallelism.
  double tp_fwd_allreduce_bytes = 0;
  double tp_bwd_allreduce_bytes = 0;
  // False: the operator has no backward of its own (the loss: the gradient of the softmax over the
  // vocabulary is computed by the head's backward, one vocabulary tile at a time, in place of that
  // tile's logits), so the planner emits no backward task for it.
  bool backward = true;
  // A mixture's routed experts: how many, and how many each token goes to (0: not a mixture's).
  // The planner sizes the experts' capacity and the all-to-alls of expert parallelism from them.
  int64_t experts = 0;
  int64_t top_k = 0;
};

struct ModelGraph {
  ModelSpec spec;
  int64_t tokens = 0;  // tokens per micro-batch per rank = micro_batch * seq
  // Ranks that split each layer (Megatron-style tensor parallelism); the graph is one such rank's
  // share: its slice of every split linear, its heads, its part of the vocabulary.
  int64_t tensor_parallel = 1;
  std::vector<ParamGroup> params;
  std::vector<Operator> ops;

  int64_t total_params() const;
  double total_fwd_flops() const;
  double total_bwd_flops() const;
  // Largest parameter group by elements; the memory model's model-state working memory.
  const ParamGroup& largest_group() const;
};

}  // namespace zinf::core
