#include "core/model_spec.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/errors.hpp"
#include "core/model_layout.hpp"

namespace zinf::core {

const char* to_string(Family f) {
  switch (f) {
    case Family::Gpt2: return "gpt2";
    case Family::Llama: return "llama";
    case Family::Mistral: return "mistral";
    case Family::Mixtral: return "mixtral";
    case Family::Qwen2: return "qwen2";
    case Family::Qwen2Moe: return "qwen2_moe";
    case Family::Gemma: return "gemma";
    case Family::Gemma2: return "gemma2";
    case Family::Phi3: return "phi3";
    case Family::GptNeox: return "gpt_neox";
    case Family::Falcon: return "falcon";
    case Family::Opt: return "opt";
    case Family::Bloom: return "bloom";
    case Family::DeepseekV2: return "deepseek_v2";
  }
  return "?";
}

const std::vector<Family>& all_families() {
  static const std::vector<Family> all = {Family::Gpt2,    Family::Llama,  Family::Mistral, Family::Mixtral, Family::Qwen2,
                                          Family::Qwen2Moe, Family::Gemma, Family::Gemma2,  Family::Phi3,    Family::GptNeox,
                                          Family::Falcon,  Family::Opt,    Family::Bloom,   Family::DeepseekV2};
  return all;
}

const char* to_string(NormKind k) { return k == NormKind::LayerNorm ? "layernorm" : "rmsnorm"; }

const char* to_string(MlpKind k) {
  switch (k) {
    case MlpKind::Gelu: return "gelu";
    case MlpKind::Relu: return "relu";
    case MlpKind::GatedSilu: return "gated-silu";
    case MlpKind::GatedGelu: return "gated-gelu";
  }
  return "?";
}

const char* to_string(PositionKind k) {
  switch (k) {
    case PositionKind::Learned: return "learned";
    case PositionKind::Rotary: return "rotary";
    case PositionKind::Alibi: return "alibi";
  }
  return "?";
}

bool ModelSpec::moe_layer(int64_t layer) const {
  return experts > 0 && std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

int64_t ModelSpec::attention_span(int64_t layer) const {
  if (sliding_window <= 0 || layer < sliding_window_from_layer) return seq;
  if ((layer - sliding_window_from_layer) % std::max<int64_t>(1, sliding_window_period) != 0) return seq;
  return std::min(seq, sliding_window);
}

bool ModelSpec::is_gpt2() const {
  return family == Family::Gpt2 && norm == NormKind::LayerNorm && norm_bias && norms_per_block == 2 && !embedding_norm &&
         final_norm && mlp == MlpKind::Gelu && kv_head_count() == heads && head_dim() * heads == hidden && qkv_bias &&
         attn_out_bias && mlp_bias && fused_qkv && !fused_gate_up && positions == PositionKind::Learned &&
         position_rows() == seq && !parallel_attention && embedding_width() == hidden && sliding_window == 0 &&
         experts == 0 && !mla();
}

void apply_family_defaults(ModelSpec& m, Family f) {
  const int64_t keep_ffn = m.ffn_multiple;
  ModelSpec d;  // GPT-2's
  d.name = m.name, d.file = m.file, d.layers = m.layers, d.hidden = m.hidden, d.heads = m.heads, d.seq = m.seq;
  d.vocab = m.vocab, d.micro_batch = m.micro_batch, d.ffn_multiple = keep_ffn;
  d.family = f;
  auto llama_like = [&d](MlpKind mlp) {
    d.norm = NormKind::RmsNorm;
    d.mlp = mlp;
    d.qkv_bias = d.attn_out_bias = d.mlp_bias = false;
    d.fused_qkv = false;
    d.positions = PositionKind::Rotary;
    d.tied_embeddings = false;
  };
  switch (f) {
    case Family::Gpt2: break;
    case Family::Llama:
    case Family::Mistral:
    case Family::Mixtral:
    case Family::Qwen2Moe:
    case Family::Qwen2:
    case Family::DeepseekV2:
      llama_like(MlpKind::GatedSilu);
      d.qkv_bias = f == Family::Qwen2 || f == Family::Qwen2Moe;
      break;
    case Family::Gemma:
    case Family::Gemma2:
      llama_like(MlpKind::GatedGelu);
      d.tied_embeddings = true;
      d.norms_per_block = f == Family::Gemma2 ? 4 : 2;
      break;
    case Family::Phi3:
      llama_like(MlpKind::GatedSilu);
      d.fused_qkv = d.fused_gate_up = true;
      break;
    case Family::GptNeox:
      d.positions = PositionKind::Rotary;
      d.parallel_attention = true;
      d.tied_embeddings = false;
      break;
    case Family::Falcon:
      d.positions = PositionKind::Rotary;
      d.parallel_attention = true;
      d.norms_per_block = 1;
      d.qkv_bias = d.attn_out_bias = d.mlp_bias = false;
      break;
    case Family::Opt:
      d.mlp = MlpKind::Relu;
      d.fused_qkv = false;
      break;
    case Family::Bloom:
      d.positions = PositionKind::Alibi;
      d.embedding_norm = true;
      break;
  }
  m = d;
}

namespace {

void validate_moe(const ModelSpec& m, const std::string& file) {
  if (m.experts == 0) {
    if (m.experts_per_token || m.expert_intermediate || m.shared_expert_intermediate || !m.dense_layers.empty())
      throw ConfigError(file, "experts", "the mixture's keys are given but experts is 0");
    return;
  }
  if (m.experts_per_token < 1 || m.experts_per_token > m.experts)
    throw ConfigError(file, "experts_per_token",
                      fmt::format("{} experts per token of {} experts; give 1 to {}", m.experts_per_token, m.experts, m.experts));
  if (m.expert_intermediate < 1) throw ConfigError(file, "expert_intermediate", "a mixture needs its experts' size");
  for (int64_t l : m.dense_layers)
    if (l >= m.layers)
      throw ConfigError(file, "dense_layers", fmt::format("layer {} is past the model's {} layers", l, m.layers));
}

}  // namespace

void validate(const ModelSpec& m, const std::string& file) {
  if (m.head_size == 0 && m.hidden % m.heads != 0)
    throw ConfigError(file, "heads", fmt::format("hidden ({}) must be divisible by heads ({})", m.hidden, m.heads));
  if (m.heads % m.kv_head_count() != 0)
    throw ConfigError(file, "kv_heads",
                      fmt::format("heads ({}) must be a multiple of the key/value heads ({})", m.heads, m.kv_head_count()));
  if (m.fused_gate_up && !m.gated_mlp())
    throw ConfigError(file, "fused_gate_up", fmt::format("the {} MLP has no gate to fuse", to_string(m.mlp)));
  if (m.mla() && (m.qk_nope_head_dim + m.qk_rope_head_dim < 1 || m.v_head_dim < 1))
    throw ConfigError(file, "kv_lora_rank", "latent attention needs qk_nope_head_dim + qk_rope_head_dim and v_head_dim");
  if (m.mla() && m.kv_lora_rank > 0 && m.fused_qkv)
    throw ConfigError(file, "fused_qkv", "latent attention has no fused q/k/v projection");
  validate_moe(m, file);
  // Parameters, in doubles (no overflow): the layout's count of a block of each kind.
  double params = double(m.vocab + m.position_rows()) * double(m.hidden);
  if (m.is_gpt2()) {
    const double hd = double(m.hidden);
    params += double(m.layers) * (4.0 + 2.0 * double(m.ffn_multiple)) * hd * hd;
  } else {
    // The larger of a dense and a mixture block stands for every block: an upper bound.
    int64_t moe = 0;
    while (moe + 1 < m.layers && m.experts > 0 && !m.moe_layer(moe)) ++moe;
    params += double(m.layers) * double(std::max(block_params(m, 0).total, block_params(m, moe).total));
  }
  constexpr double kMaxParams = 1e16;
  if (params > kMaxParams)
    throw ConfigError(file, "layers",
                      fmt::format("the model would have {:.3g} parameters; zinf plans models up to {:.0e}", params, kMaxParams));
}

}  // namespace zinf::core
