// The activations a device keeps when its working precision is fp32: the tensors the CPU backend's
// GPT-2 kernels (engine/model/gpt2) write and keep for backward, counted as those kernels allocate
// them, so the planner's and the memory model's device bytes are the backend's. (With bf16 the
// paper's formula is used instead: a GPU's fused kernels keep fewer intermediates.) Pure functions.
#pragma once
#include <cstdint>
#include <vector>

#include "core/graph.hpp"

namespace zinf::core {

// Elements per token of one transformer block. Forward: ln1 and ln2 with a mean and rstd each,
// qkv (3 hidden), the attention output, attn.c_proj's output, both residuals (the second is the
// block's output), the MLP's inner activation before and after GELU (ffn each) and mlp.c_proj's
// output, plus the heads x seq attention probabilities. A gated MLP's inner tensor before its
// activation is gate and up side by side (2 ffn), and so is its gradient; the Llama family's
// narrower q/k/v (grouped-query attention) and rstd-only RMSNorms are counted at GPT-2's widths,
// an upper bound. Backward: the gradient of each
// hidden-sized one, of qkv and of the MLP's two, the block's input gradient and the incoming one.
// Under tensor parallelism t a rank keeps 1/t of qkv, of the attention's output and probabilities
// and of the MLP's inner two, and of their gradients (engine/model/gpt2's column-parallel shares);
// the rest is whole on every rank.
double block_forward_elements(const ModelSpec& s, int64_t tensor_parallel = 1);
double block_backward_elements(const ModelSpec& s, int64_t tensor_parallel = 1);

// A run of operators (a checkpointed segment, or the operators outside the blocks): elements held
// through its forward (through its backward when not recomputed), and the activation gradients its
// backward adds, one block at a time (each block frees its own when its backward is done). ln_f,
// the logits (whose gradient the head's backward writes over them, a vocabulary tile at a time) and
// the loss's statistics per token belong to the run of the head; a recomputed run's input, its
// checkpoint, is read until its forward ends.
struct RunActivations {
  double forward = 0;
  double backward = 0;
};
RunActivations run_activation_elements(const ModelGraph& g, const std::vector<int32_t>& ops, bool recompute);

// One tensor (or a few written by one kernel together) that a transformer block keeps from its
// forward for its backward: the activation pass (core/activation_pass.hpp) chooses for each. Its
// producer is the block operator that writes it; `input` is the tensor that operator reads (-1:
// the block's input, the residual stream x[l], which the previous block keeps). The last one,
// "out", is the block's output x[l+1]: the next block's input, never offloaded nor recomputed.
struct BlockTensor {
  const char* name = "";
  OpRole producer = OpRole::None;
  int input = -1;          // index in block_tensors' list; -1: the block's input
  double share = 0;        // fraction of the block's activation bytes
};

// The block tensors in forward order, with shares that sum to 1 and follow the bytes each kernel
// keeps: ln1 and ln2 (output, mean and rstd), qkv (3 hidden), the attention output with its
// probabilities (heads x seq), attn.c_proj's output, the first residual, the MLP's inner
// activation before and after GELU (ffn each), mlp.c_proj's output and the block's output.
// `bf16_formula`: the planner's bf16 count (block_activation_bytes_per_token: the probabilities at
// 2 bytes, the hidden-sized tensors sharing the rest in the same proportions).
std::vector<BlockTensor> block_tensors(const ModelSpec& s, bool bf16_formula, int64_t tensor_parallel = 1);

}  // namespace zinf::core
