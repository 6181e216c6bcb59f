#include "core/kernel_activations.hpp"

#include <algorithm>
#include <string_view>

#include "core/memory_model.hpp"

namespace zinf::core {

namespace {
// The MLP's inner tensor before the activation: gate and up side by side in a gated MLP.
double mlp_inner(const ModelSpec& s) { return double(s.ffn_hidden()) * (s.gated_mlp() ? 2.0 : 1.0); }
}  // namespace

double block_forward_elements(const ModelSpec& s, int64_t tensor_parallel) {
  const double t = double(std::max<int64_t>(1, tensor_parallel)), h = double(s.hidden);
  return 6.0 * h + 4.0 + (4.0 * h + mlp_inner(s) + double(s.ffn_hidden()) + s.kept_attention_elements(s.seq)) / t;
}

double block_backward_elements(const ModelSpec& s, int64_t tensor_parallel) {
  const double t = double(std::max<int64_t>(1, tensor_parallel)), h = double(s.hidden);
  return 7.0 * h + (4.0 * h + mlp_inner(s) + double(s.ffn_hidden())) / t;
}

RunActivations run_activation_elements(const ModelGraph& g, const std::vector<int32_t>& ops, bool recompute) {
  const auto& s = g.spec;
  const int64_t tp = std::max<int64_t>(1, g.tensor_parallel);
  // A rank's logits: its ceil(V / t) rows of the vocabulary.
  const double T = double(g.tokens), TC = T * double(s.hidden), V = double((s.vocab + tp - 1) / tp);
  RunActivations r;
  std::vector<int> blocks;
  for (int32_t id : ops) {
    const auto& o = g.ops[static_cast<size_t>(id)];
    if (o.block >= 0) {
      if (std::find(blocks.begin(), blocks.end(), o.block) == blocks.end()) blocks.push_back(o.block);
      continue;
    }
    switch (o.kind) {
      case OpKind::Embedding: r.forward += TC, r.backward += TC; break;            // the first block's input, its gradient
      case OpKind::LayerNorm: r.forward += TC + 2 * T, r.backward += 2 * TC; break;  // ln_f: output, mean, rstd
      // The logits; the head's backward turns each tile of them into its gradient in place.
      case OpKind::LmHead: r.forward += T * V; break;
      case OpKind::Loss: r.forward += 3 * T; break;  // per token: largest logit, sum of exponentials, loss
      default: break;
    }
  }
  if (!blocks.empty()) {
    r.forward += T * double(blocks.size()) * block_forward_elements(s, tp);
    r.backward += T * block_backward_elements(s, tp);
  }
  if (recompute) r.forward += TC;
  return r;
}

std::vector<BlockTensor> block_tensors(const ModelSpec& s, bool bf16_formula, int64_t tensor_parallel) {
  const double tp = double(std::max<int64_t>(1, tensor_parallel));
  const double h = double(s.hidden), f = double(s.ffn_hidden()), probs = s.kept_attention_elements(s.seq);
  // Elements per token as the fp32 kernels keep them on one rank (block_forward_elements).
  std::vector<BlockTensor> t = {
      {"ln1", OpRole::Ln1, -1, h + 2},  {"qkv", OpRole::CAttn, 0, 3 * h},     {"attn", OpRole::Attn, 1, h + probs},
      {"attproj", OpRole::AttnProj, 2, h}, {"res1", OpRole::Res1, 3, h},   {"ln2", OpRole::Ln2, 4, h + 2},
      {"fch", OpRole::Fc, 5, mlp_inner(s)},         {"gelu", OpRole::Gelu, 6, f},      {"mlpproj", OpRole::MlpProj, 7, h},
      {"out", OpRole::Res2, 8, h}};
  if (bf16_formula) {
    // block_activation_bytes_per_token: the probabilities at 2 bytes per element, the rest hidden-sized.
    const double total = block_activation_bytes_per_token(s, tensor_parallel), p = 2.0 * probs / tp;
    double hidden_elems = 0;
    for (auto& x : t) hidden_elems += x.share - (std::string_view(x.name) == "attn" ? probs : 0);
    for (auto& x : t) {
      const double hid = x.share - (std::string_view(x.name) == "attn" ? probs : 0);
      x.share = ((total - p) * hid / hidden_elems + (std::string_view(x.name) == "attn" ? p : 0)) / total;
    }
    return t;
  }
  // A tensor-parallel rank keeps its share of qkv, the attention and the MLP's inner activations.
  for (auto& x : t)
    if (x.producer == OpRole::CAttn || x.producer == OpRole::Attn || x.producer == OpRole::Fc || x.producer == OpRole::Gelu)
      x.share /= tp;
  const double total = block_forward_elements(s, tensor_parallel);
  for (auto& x : t) x.share /= total;
  return t;
}

}  // namespace zinf::core
