#include "core/model_spec.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "formats/config_reader.hpp"
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

Family family_named(ConfigReader& r) {
  std::vector<std::string> names;
  for (Family f : all_families()) names.push_back(to_string(f));
  const std::string v = r.choice("architecture", names, "gpt2");
  for (Family f : all_families())
    if (v == to_string(f)) return f;
  return Family::Gpt2;
}

template <typename E>
E enum_named(ConfigReader& r, const std::string& key, std::initializer_list<E> all, E fallback) {
  std::vector<std::string> names;
  for (E e : all) names.push_back(to_string(e));
  const std::string v = r.choice(key, names, to_string(fallback));
  for (E e : all)
    if (v == to_string(e)) return e;
  return fallback;
}

// The architecture's keys, each defaulting to the family's value (apply_family_defaults).
void read_architecture(ConfigReader& r, ModelSpec& m) {
  constexpr int64_t kBig = 1 << 20;
  m.norm = enum_named(r, "norm", {NormKind::LayerNorm, NormKind::RmsNorm}, m.norm);
  m.norm_bias = r.boolean("norm_bias", m.norm_bias);
  m.norms_per_block = r.int_in("norms_per_block", 1, 4, m.norms_per_block);
  m.embedding_norm = r.boolean("embedding_norm", m.embedding_norm);
  m.final_norm = r.boolean("final_norm", m.final_norm);
  m.mlp = enum_named(r, "mlp", {MlpKind::Gelu, MlpKind::Relu, MlpKind::GatedSilu, MlpKind::GatedGelu}, m.mlp);
  m.kv_heads = r.int_in("kv_heads", 1, 1 << 16, m.kv_head_count());
  m.head_size = r.int_in("head_dim", 1, 1 << 16, m.head_size > 0 ? m.head_size : m.hidden / m.heads);
  m.intermediate = r.int_in("intermediate", 1, 1 << 24, m.ffn_hidden());
  m.qkv_bias = r.boolean("qkv_bias", m.qkv_bias);
  m.attn_out_bias = r.boolean("attn_out_bias", m.attn_out_bias);
  m.mlp_bias = r.boolean("mlp_bias", m.mlp_bias);
  m.fused_qkv = r.boolean("fused_qkv", m.fused_qkv);
  m.fused_gate_up = r.boolean("fused_gate_up", m.fused_gate_up);
  m.positions = enum_named(r, "positions", {PositionKind::Learned, PositionKind::Rotary, PositionKind::Alibi}, m.positions);
  m.learned_positions = r.int_in("learned_positions", 1, 1 << 24, m.position_rows());
  m.rotary_fraction = r.fraction("rotary_fraction", m.rotary_fraction);
  m.parallel_attention = r.boolean("parallel_attention", m.parallel_attention);
  m.embed_dim = r.int_in("embed_dim", 1, kBig, m.embedding_width());
  m.sliding_window = r.int_in("sliding_window", 0, 1 << 24, m.sliding_window);
  m.sliding_window_period = r.int_in("sliding_window_period", 1, 2, m.sliding_window_period);
  m.sliding_window_from_layer = r.int_in("sliding_window_from_layer", 0, 1'000'000, m.sliding_window_from_layer);
  m.experts = r.int_in("experts", 0, 1 << 16, m.experts);
  m.experts_per_token = r.int_in("experts_per_token", 0, 1 << 16, m.experts_per_token);
  m.expert_intermediate = r.int_in("expert_intermediate", 0, 1 << 24, m.expert_intermediate);
  m.shared_expert_intermediate = r.int_in("shared_expert_intermediate", 0, 1 << 24, m.shared_expert_intermediate);
  m.shared_expert_gate = r.boolean("shared_expert_gate", m.shared_expert_gate);
  if (r.has("dense_layers")) m.dense_layers = r.int_list("dense_layers", 0, 1'000'000);
  else r.ignore("dense_layers");
  m.q_lora_rank = r.int_in("q_lora_rank", 0, kBig, m.q_lora_rank);
  m.kv_lora_rank = r.int_in("kv_lora_rank", 0, kBig, m.kv_lora_rank);
  m.qk_rope_head_dim = r.int_in("qk_rope_head_dim", 0, 1 << 16, m.qk_rope_head_dim);
  m.qk_nope_head_dim = r.int_in("qk_nope_head_dim", 0, 1 << 16, m.qk_nope_head_dim);
  m.v_head_dim = r.int_in("v_head_dim", 0, 1 << 16, m.v_head_dim);
}

ModelSpec read(ConfigReader& r) {
  ModelSpec m;
  m.name = r.str("name");
  m.file = r.file();
  // Bounds far above any model zinf plans (100T parameters is ~1e14), so that every product of
  // them below stays exact and inside int64_t.
  m.layers = r.int_in("layers", 1, 1'000'000);
  m.hidden = r.int_in("hidden", 1, 1 << 20);
  m.heads = r.int_in("heads", 1, 1 << 16);
  m.ffn_multiple = r.int_in("ffn_multiple", 1, 64, 4);
  m.seq = r.int_in("seq", 1, 1 << 24);
  m.vocab = r.int_in("vocab", 1, 1 << 24);
  m.micro_batch = r.int_in("micro_batch", 1, 65536, 1);
  const Family f = family_named(r);
  if (f != Family::Gpt2) apply_family_defaults(m, f);
  m.tied_embeddings = r.boolean("tied_embeddings", m.tied_embeddings);
  // A GPT-2 YAML that names none of the architecture's keys stays exactly the GPT-2 it was: the
  // derived sizes are stored only where a key gives them.
  const ModelSpec before = m;
  read_architecture(r, m);
  if (f == Family::Gpt2) {
    if (!r.has("kv_heads")) m.kv_heads = before.kv_heads;
    if (!r.has("head_dim")) m.head_size = before.head_size;
    if (!r.has("intermediate")) m.intermediate = before.intermediate;
    if (!r.has("learned_positions")) m.learned_positions = before.learned_positions;
    if (!r.has("embed_dim")) m.embed_dim = before.embed_dim;
  }
  r.ignore("description");
  r.reject_unread();
  validate(m, r.file());
  return m;
}

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

ModelSpec load_model_spec(const std::string& path) {
  auto r = ConfigReader::from_file(path);
  return read(r);
}

ModelSpec parse_model_spec(const std::string& yaml_text, const std::string& name) {
  auto r = ConfigReader::from_string(yaml_text, name);
  return read(r);
}

}  // namespace zinf::core
