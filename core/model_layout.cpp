#include "core/model_layout.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace zinf::core {
namespace {

// What each family calls its modules (Hugging Face's modeling code). Empty: the family has none.
struct Names {
  const char* block;       // the blocks' list, e.g. "layers" (model.layers.N)
  const char* norm1;       // before attention
  const char* norm2;       // before the MLP
  const char* post_attn;   // Gemma 2's norm of the attention's output
  const char* post_mlp;    // Gemma 2's norm of the MLP's output
  const char* attn;        // the attention module
  const char* qkv;         // fused q, k, v
  const char* out;         // the attention's output projection
  const char* mlp;         // the MLP (or mixture) module
  const char* up;          // non-gated: the up projection; gated: up_proj
  const char* down;
  const char* embed;
  const char* positions;
  const char* final_norm;
};

Names names_of(Family f) {
  switch (f) {
    case Family::Gpt2:
      return {"h", "ln_1", "ln_2", "", "", "attn", "c_attn", "c_proj", "mlp", "c_fc", "c_proj", "wte", "wpe", "ln_f"};
    case Family::GptNeox:
      return {"layers", "input_layernorm", "post_attention_layernorm", "", "", "attention", "query_key_value", "dense",
              "mlp", "dense_h_to_4h", "dense_4h_to_h", "embed_in", "", "final_layer_norm"};
    case Family::Falcon:
    case Family::Bloom:
      return {"h", "input_layernorm", "post_attention_layernorm", "", "", "self_attention", "query_key_value", "dense",
              "mlp", "dense_h_to_4h", "dense_4h_to_h", "word_embeddings", "", "ln_f"};
    case Family::Opt:
      return {"layers", "self_attn_layer_norm", "final_layer_norm", "", "", "self_attn", "", "out_proj", "", "fc1", "fc2",
              "embed_tokens", "embed_positions", "final_layer_norm"};
    case Family::Gemma2:
      return {"layers", "input_layernorm", "pre_feedforward_layernorm", "post_attention_layernorm",
              "post_feedforward_layernorm", "self_attn", "", "o_proj", "mlp", "up_proj", "down_proj", "embed_tokens", "", "norm"};
    case Family::Mixtral:
      return {"layers", "input_layernorm", "post_attention_layernorm", "", "", "self_attn", "", "o_proj", "block_sparse_moe",
              "up_proj", "down_proj", "embed_tokens", "", "norm"};
    case Family::Phi3:
      return {"layers", "input_layernorm", "post_attention_layernorm", "", "", "self_attn", "qkv_proj", "o_proj", "mlp",
              "up_proj", "down_proj", "embed_tokens", "", "norm"};
    default:
      return {"layers", "input_layernorm", "post_attention_layernorm", "", "", "self_attn", "", "o_proj", "mlp", "up_proj",
              "down_proj", "embed_tokens", "", "norm"};
  }
}

int64_t norm_numel(const ModelSpec& m, int64_t width) {
  return m.norm == NormKind::LayerNorm && m.norm_bias ? 2 * width : width;
}

struct Steps {
  const ModelSpec& m;
  std::string prefix;
  std::vector<LayerStep> out;

  LayerStep& add(const std::string& name, StepKind kind) {
    LayerStep s;
    s.name = prefix + name;
    s.kind = kind;
    out.push_back(s);
    return out.back();
  }
  void norm(const std::string& name, int64_t width) {
    auto& s = add(name, StepKind::Norm);
    s.width = width;
    s.numel = s.active = norm_numel(m, width);
  }
  void rms_norm(const std::string& name, int64_t width) {  // MLA's own norms are RMSNorms whatever the block's
    auto& s = add(name, StepKind::Norm);
    s.width = width;
    s.numel = s.active = width;
  }
  void linear(const std::string& name, int64_t in, int64_t outputs, bool bias) {
    auto& s = add(name, StepKind::Linear);
    s.in = in;
    s.out = outputs;
    s.bias = bias;
    s.numel = s.active = in * outputs + (bias ? outputs : 0);
  }
  void elementwise(const std::string& name, StepKind kind, int64_t width) { add(name, kind).width = width; }

  // A dense MLP of inner size f named under `mlp` (gate/up/down, or up/down).
  void mlp(const std::string& mod, int64_t f, bool bias, const Names& n) {
    const int64_t h = m.hidden;
    if (m.gated_mlp()) {
      if (m.fused_gate_up) {
        linear(mod + "gate_up_proj", h, 2 * f, bias);
      } else {
        linear(mod + "gate_proj", h, f, bias);
        linear(mod + n.up, h, f, bias);
      }
      elementwise(mod + "act_fn", StepKind::Activation, f);
      linear(mod + n.down, f, h, bias);
    } else {
      linear(mod + n.up, h, f, bias);
      elementwise(mod + "act", StepKind::Activation, f);
      linear(mod + n.down, f, h, bias);
    }
  }
};

void attention(Steps& s, int64_t layer, const Names& n) {
  const ModelSpec& m = s.m;
  const int64_t h = m.hidden, heads = m.heads, kv = m.kv_head_count(), hd = m.head_dim();
  const std::string a = std::string(n.attn) + ".";
  int64_t qk_dim = hd, v_dim = hd;
  if (m.mla()) {
    qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    v_dim = m.v_head_dim;
    if (m.q_lora_rank > 0) {
      s.linear(a + "q_a_proj", h, m.q_lora_rank, m.qkv_bias);
      s.rms_norm(a + "q_a_layernorm", m.q_lora_rank);
      s.linear(a + "q_b_proj", m.q_lora_rank, heads * qk_dim, false);
    } else {
      s.linear(a + "q_proj", h, heads * qk_dim, false);
    }
    s.linear(a + "kv_a_proj_with_mqa", h, m.kv_lora_rank + m.qk_rope_head_dim, m.qkv_bias);
    s.rms_norm(a + "kv_a_layernorm", m.kv_lora_rank);
    s.linear(a + "kv_b_proj", m.kv_lora_rank, heads * (m.qk_nope_head_dim + v_dim), false);
  } else if (m.fused_qkv) {
    s.linear(a + n.qkv, h, (heads + 2 * kv) * hd, m.qkv_bias);
  } else {
    s.linear(a + "q_proj", h, heads * hd, m.qkv_bias);
    s.linear(a + "k_proj", h, kv * hd, m.qkv_bias);
    s.linear(a + "v_proj", h, kv * hd, m.qkv_bias);
  }
  auto& core = s.add(a + "core", StepKind::Attention);
  core.heads = heads;
  core.qk_dim = qk_dim;
  core.v_dim = v_dim;
  core.span = m.attention_span(layer);
  core.width = heads * v_dim;
  s.linear(a + n.out, heads * v_dim, h, m.attn_out_bias);
}

void feed_forward(Steps& s, int64_t layer, const Names& n) {
  const ModelSpec& m = s.m;
  const int64_t h = m.hidden;
  const std::string mod = std::string(n.mlp).empty() ? "" : std::string(n.mlp) + ".";
  if (!m.moe_layer(layer)) return s.mlp(mod, m.ffn_hidden(), m.mlp_bias, n);
  // The router: a bias-free linear to the experts' scores in every family zinf reads.
  {
    auto& r = s.add(mod + "gate", StepKind::Router);
    r.in = h;
    r.out = m.experts;
    r.numel = r.active = h * m.experts;
  }
  {
    auto& e = s.add(mod + "experts", StepKind::Experts);
    e.in = h;
    e.out = m.expert_intermediate;
    e.experts = m.experts;
    e.top_k = m.experts_per_token;
    e.gated = m.gated_mlp();
    const int64_t one = (e.gated ? 3 : 2) * h * m.expert_intermediate;
    e.numel = m.experts * one;
    e.active = m.experts_per_token * one;
    e.width = m.experts_per_token * m.expert_intermediate;
  }
  if (m.shared_expert_intermediate > 0) {
    s.mlp(mod + (m.family == Family::DeepseekV2 ? "shared_experts." : "shared_expert."), m.shared_expert_intermediate,
          false, n);
    if (m.shared_expert_gate) s.linear(mod + "shared_expert_gate", h, 1, false);
  }
}

}  // namespace

const char* block_prefix(Family f) { return names_of(f).block; }

std::vector<LayerStep> block_steps(const ModelSpec& m, int64_t layer) {
  const Names n = names_of(m.family);
  Steps s{m, fmt::format("{}.{}.", n.block, layer), {}};
  const int64_t h = m.hidden;
  if (m.parallel_attention) {
    // Falcon-40B's ln_attn and ln_mlp, GPT-NeoX's two norms, or Falcon-7B's one.
    const bool two = m.norms_per_block >= 2;
    const bool falcon = m.family == Family::Falcon;
    s.norm(two && falcon ? "ln_attn" : n.norm1, h);
    if (two) s.norm(falcon ? "ln_mlp" : n.norm2, h);
    attention(s, layer, n);
    feed_forward(s, layer, n);
    s.elementwise("residual", StepKind::Residual, h);
    return s.out;
  }
  s.norm(n.norm1, h);
  attention(s, layer, n);
  if (m.norms_per_block >= 4) s.norm(n.post_attn, h);
  s.elementwise("residual_1", StepKind::Residual, h);
  s.norm(n.norm2, h);
  feed_forward(s, layer, n);
  if (m.norms_per_block >= 4) s.norm(n.post_mlp, h);
  s.elementwise("residual_2", StepKind::Residual, h);
  return s.out;
}

std::vector<LayerStep> embedding_steps(const ModelSpec& m) {
  const Names n = names_of(m.family);
  Steps s{m, "", {}};
  const int64_t e = m.embedding_width();
  auto& tok = s.add(n.embed, StepKind::Embedding);
  tok.in = e;
  tok.out = m.vocab;
  tok.width = e;
  tok.numel = tok.active = m.vocab * e;
  if (m.positions == PositionKind::Learned) {
    auto& pos = s.add(n.positions, StepKind::Embedding);
    pos.in = m.hidden;
    pos.out = m.position_rows();
    pos.width = m.hidden;
    pos.numel = pos.active = m.position_rows() * m.hidden;
  }
  if (e != m.hidden) s.linear("project_in", e, m.hidden, false);
  if (m.embedding_norm) s.norm("word_embeddings_layernorm", m.hidden);
  return s.out;
}

std::vector<LayerStep> head_steps(const ModelSpec& m) {
  const Names n = names_of(m.family);
  Steps s{m, "", {}};
  const int64_t e = m.embedding_width();
  if (m.final_norm) s.norm(n.final_norm, m.hidden);
  if (e != m.hidden) s.linear("project_out", m.hidden, e, false);
  auto& head = s.add(m.family == Family::GptNeox ? "embed_out" : "lm_head", StepKind::Head);
  head.in = e;
  head.out = m.vocab;
  head.numel = head.active = m.tied_embeddings ? 0 : m.vocab * e;
  return s.out;
}

ExactParams block_params(const ModelSpec& m, int64_t layer) {
  ExactParams p;
  for (const auto& s : block_steps(m, layer)) p.total += s.numel, p.active += s.active;
  return p;
}

ExactParams outside_params(const ModelSpec& m) {
  ExactParams p;
  for (const auto& steps : {embedding_steps(m), head_steps(m)})
    for (const auto& s : steps) p.total += s.numel, p.active += s.active;
  return p;
}

ExactParams exact_params(const ModelSpec& m) {
  ExactParams p = outside_params(m);
  // Blocks differ only where a layer is dense in a mixture: count one of each kind, not every layer.
  ExactParams moe, dense;
  bool have_moe = false, have_dense = false;
  for (int64_t l = 0; l < m.layers; ++l) {
    const bool is_moe = m.moe_layer(l);
    ExactParams& b = is_moe ? moe : dense;
    bool& have = is_moe ? have_moe : have_dense;
    if (!have) b = block_params(m, l), have = true;
    p.total += b.total;
    p.active += b.active;
  }
  return p;
}

namespace {

// The layers whose blocks differ: the first, the second (Gemma 2 alternates), the first local one
// and the next, the last.
std::vector<int64_t> distinct_layers(const ModelSpec& m) {
  std::vector<int64_t> out;
  for (int64_t l : {int64_t(0), int64_t(1), m.sliding_window_from_layer, m.sliding_window_from_layer + 1, m.layers - 1})
    if (l >= 0 && l < m.layers && std::find(out.begin(), out.end(), l) == out.end()) out.push_back(l);
  for (int64_t l : m.dense_layers)
    if (l < m.layers && std::find(out.begin(), out.end(), l) == out.end()) {
      out.push_back(l);
      break;
    }
  return out;
}

}  // namespace

int64_t routed_expert_params(const ModelSpec& m) {
  if (m.experts <= 0) return 0;
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < m.layers; ++l) moe_layers += m.moe_layer(l) ? 1 : 0;
  return moe_layers * m.experts * (m.gated_mlp() ? 3 : 2) * m.hidden * m.expert_intermediate;
}

int64_t largest_block_weight(const ModelSpec& m, bool with_bias, int64_t expert_parallel) {
  int64_t best = 0;
  for (int64_t l : distinct_layers(m))
    for (const auto& s : block_steps(m, l)) {
      if (s.kind == StepKind::Experts) best = std::max(best, s.numel / std::max<int64_t>(1, expert_parallel));
      if (s.kind == StepKind::Linear || s.kind == StepKind::Router)
        best = std::max(best, with_bias ? s.numel : s.in * s.out);
    }
  return best;
}

double layout_activation_bytes_per_token(const ModelSpec& m) {
  double best = 0;
  for (int64_t l : distinct_layers(m)) {
    double elements = 0, bytes = 0;
    const auto steps = block_steps(m, l);
    for (size_t i = 0; i < steps.size(); ++i) {
      const LayerStep& s = steps[i];
      // Linears side by side on one input (q, k and v; gate and up) keep that input once.
      const bool shares_input = i > 0 && steps[i - 1].kind == StepKind::Linear && steps[i - 1].in == s.in;
      switch (s.kind) {
        case StepKind::Norm: elements += double(s.width); break;
        case StepKind::Linear: elements += shares_input ? 0.0 : double(s.in); break;
        case StepKind::Router: elements += double(s.in + s.out); break;
        case StepKind::Activation: elements += double(s.width) * (m.gated_mlp() ? 2.0 : 1.0); break;
        case StepKind::Attention: {
          const double kv = double(m.mla() ? s.heads : m.kv_head_count());
          elements += double(s.heads) * double(s.qk_dim + s.v_dim) + kv * double(s.qk_dim + s.v_dim);
          bytes += 2.0 * double(s.heads) * (m.flash_attention ? 2.0 : double(s.span));
          break;
        }
        case StepKind::Experts:
          elements += double(s.top_k) * (double(s.in) + double(s.out) * (s.gated ? 3.0 : 2.0));
          break;
        default: break;
      }
    }
    best = std::max(best, 2.0 * elements + bytes);
  }
  return best;
}

}  // namespace zinf::core
