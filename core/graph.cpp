#include "core/graph.hpp"

#include <algorithm>
#include <stdexcept>

namespace zinf::core {

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::Embedding: return "embedding";
    case OpKind::LayerNorm: return "layernorm";
    case OpKind::Linear: return "linear";
    case OpKind::Attention: return "attention";
    case OpKind::Gelu: return "gelu";
    case OpKind::Residual: return "residual";
    case OpKind::LmHead: return "lm_head";
    case OpKind::Loss: return "loss";
  }
  return "?";
}

int64_t ModelGraph::total_params() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel;
  return n;
}

double ModelGraph::total_fwd_flops() const {
  double f = 0;
  for (const auto& o : ops) f += o.fwd_flops;
  return f;
}

double ModelGraph::total_bwd_flops() const {
  double f = 0;
  for (const auto& o : ops) f += o.bwd_flops;
  return f;
}

const ParamGroup& ModelGraph::largest_group() const {
  if (params.empty()) throw std::logic_error("model graph has no parameters");
  return *std::max_element(params.begin(), params.end(),
                           [](const ParamGroup& a, const ParamGroup& b) { return a.numel < b.numel; });
}

}  // namespace zinf::core
