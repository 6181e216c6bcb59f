#include "core/kernel_activations.hpp"

#include <algorithm>

namespace zinf::core {

double block_forward_elements(const ModelSpec& s) {
  return 10.0 * double(s.hidden) + 2.0 * double(s.ffn_hidden()) + 4.0 + double(s.heads) * double(s.seq);
}

double block_backward_elements(const ModelSpec& s) { return 11.0 * double(s.hidden) + 2.0 * double(s.ffn_hidden()); }

RunActivations run_activation_elements(const ModelGraph& g, const std::vector<int32_t>& ops, bool recompute) {
  const auto& s = g.spec;
  const double T = double(g.tokens), TC = T * double(s.hidden), V = double(s.vocab);
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
      case OpKind::LmHead: r.forward += T * V; break;                              // logits
      case OpKind::Loss: r.forward += T * V + T, r.backward += T * V; break;       // probabilities, losses
      default: break;
    }
  }
  if (!blocks.empty()) {
    r.forward += T * double(blocks.size()) * block_forward_elements(s);
    r.backward += T * block_backward_elements(s);
  }
  if (recompute) r.forward += TC;
  return r;
}

}  // namespace zinf::core
