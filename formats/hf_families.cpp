#include "formats/hf_families.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace zinf::models {
namespace {

using core::Family;
using core::MlpKind;
using core::ModelSpec;

// Bounds far above any published model, so that products of them stay exact in int64_t.
constexpr int64_t kVocab = 1 << 24, kHidden = 1 << 20, kInter = 1 << 24, kLayers = 1'000'000, kHeads = 1 << 16;
constexpr int64_t kPositions = int64_t(1) << 30;

// A configuration class's defaults for the shape keys most families share.
struct Shape {
  int64_t vocab, hidden, inter, layers, heads, kv, max_pos;  // kv 0: as many as heads
  bool tie;
};

int64_t read_shape(HfReader& r, ModelSpec& m, const Shape& d) {
  m.vocab = r.integer("vocab_size", 1, kVocab, d.vocab);
  m.hidden = r.integer("hidden_size", 1, kHidden, d.hidden);
  m.intermediate = r.integer("intermediate_size", 1, kInter, d.inter);
  m.layers = r.integer("num_hidden_layers", 1, kLayers, d.layers);
  m.heads = r.integer("num_attention_heads", 1, kHeads, d.heads);
  m.kv_heads = r.integer("num_key_value_heads", 1, kHeads, d.kv > 0 ? d.kv : m.heads);
  m.tied_embeddings = r.flag("tie_word_embeddings", d.tie);
  return r.integer("max_position_embeddings", 1, kPositions, d.max_pos);
}

void read_head_dim(HfReader& r, ModelSpec& m, int64_t fallback) { m.head_size = r.integer("head_dim", 1, kHeads, fallback); }

MlpKind gated_activation(HfReader& r, const std::string& key, const std::string& fallback) {
  const std::string a =
      r.choice(key, {"silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python"}, fallback);
  return a == "silu" || a == "swish" ? MlpKind::GatedSilu : MlpKind::GatedGelu;
}

MlpKind plain_activation(HfReader& r, const std::string& key, const std::string& fallback) {
  const std::string a = r.choice(key, {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_python", "relu"}, fallback);
  return a == "relu" ? MlpKind::Relu : MlpKind::Gelu;
}

// A sliding window: absent gives the class's default, null none.
int64_t window(HfReader& r, const std::string& key, int64_t fallback) {
  if (!r.contains(key)) return fallback;
  return r.maybe_integer(key, 1, kPositions).value_or(0);
}

int64_t llama(HfReader& r, ModelSpec& m) {
  const int64_t max_pos = read_shape(r, m, {32000, 4096, 11008, 32, 32, 0, 2048, false});
  read_head_dim(r, m, m.hidden / m.heads);
  m.mlp = gated_activation(r, "hidden_act", "silu");
  m.qkv_bias = m.attn_out_bias = r.flag("attention_bias", false);
  m.mlp_bias = r.flag("mlp_bias", false);
  m.rope_theta = r.number("rope_theta", 1.0, 1e12, 10000.0);
  m.norm_eps = r.number("rms_norm_eps", 0.0, 1.0, 1e-6);
  m.rope_scaling = r.rope_scaling();
  return max_pos;
}

int64_t mistral(HfReader& r, ModelSpec& m, bool mixture) {
  const int64_t max_pos = read_shape(r, m, {32000, 4096, 14336, 32, 32, 8, 4096 * 32, false});
  read_head_dim(r, m, m.hidden / m.heads);
  m.mlp = gated_activation(r, "hidden_act", "silu");
  m.sliding_window = window(r, "sliding_window", mixture ? 0 : 4096);
  if (mixture) {
    m.experts = r.integer("num_local_experts", 1, kHeads, 8);
    m.experts_per_token = r.integer("num_experts_per_tok", 1, kHeads, 2);
    m.expert_intermediate = m.intermediate;  // every layer's MLP is the mixture
  }
  r.rope_scaling();
  return max_pos;
}

int64_t qwen2(HfReader& r, ModelSpec& m, bool mixture) {
  const int64_t max_pos = mixture ? read_shape(r, m, {151936, 2048, 5632, 24, 16, 16, 32768, false})
                                  : read_shape(r, m, {151936, 4096, 22016, 32, 32, 32, 32768, false});
  m.mlp = gated_activation(r, "hidden_act", "silu");
  const bool sliding = r.flag("use_sliding_window", false);
  const int64_t w = window(r, "sliding_window", 4096);
  const int64_t from = r.integer("max_window_layers", 0, kLayers, 28);
  if (sliding) m.sliding_window = w, m.sliding_window_from_layer = from;
  r.rope_scaling();
  if (!mixture) return max_pos;
  m.experts = r.integer("num_experts", 0, kHeads, 60);
  m.experts_per_token = r.integer("num_experts_per_tok", 1, kHeads, 4);
  m.expert_intermediate = r.integer("moe_intermediate_size", 1, kInter, 1408);
  m.shared_expert_intermediate = r.integer("shared_expert_intermediate_size", 1, kInter, 5632);
  const int64_t step = r.integer("decoder_sparse_step", 1, kLayers, 1);
  const std::vector<int64_t> mlp_only = r.integers("mlp_only_layers", 0, kLayers);
  if (m.experts == 0) {  // no mixture anywhere: every layer's MLP is the dense one
    m.experts_per_token = m.expert_intermediate = m.shared_expert_intermediate = 0;
    return max_pos;
  }
  m.experts_per_token = std::min(m.experts_per_token, m.experts);
  m.shared_expert_gate = true;
  // Qwen2MoeDecoderLayer: a mixture where the layer is not in mlp_only_layers and (layer + 1) is a
  // multiple of decoder_sparse_step.
  for (int64_t l = 0; l < m.layers; ++l)
    if (std::find(mlp_only.begin(), mlp_only.end(), l) != mlp_only.end() || (l + 1) % step != 0) m.dense_layers.push_back(l);
  return max_pos;
}

int64_t gemma(HfReader& r, ModelSpec& m, bool second) {
  const int64_t max_pos = second ? read_shape(r, m, {256000, 2304, 9216, 26, 8, 4, 8192, true})
                                 : read_shape(r, m, {256000, 3072, 24576, 28, 16, 16, 8192, true});
  read_head_dim(r, m, 256);
  // GemmaMLP uses hidden_activation when the config gives one, hidden_act otherwise.
  const std::string key = r.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  r.accept({"hidden_activation", "hidden_act"});
  m.mlp = gated_activation(r, key, "gelu_pytorch_tanh");
  m.qkv_bias = m.attn_out_bias = r.flag("attention_bias", false);
  r.rope_scaling();
  if (second) {
    // Gemma2Attention: the even layers attend through the sliding window, the odd ones globally.
    m.sliding_window = window(r, "sliding_window", 4096);
    m.sliding_window_period = 2;
    r.accept({"sliding_window_size"});
  }
  return max_pos;
}

int64_t phi3(HfReader& r, ModelSpec& m) {
  const int64_t max_pos = read_shape(r, m, {32064, 3072, 8192, 32, 32, 0, 4096, false});
  m.mlp = gated_activation(r, "hidden_act", "silu");
  m.rotary_fraction = r.number("partial_rotary_factor", 0.0, 1.0, 1.0);
  m.sliding_window = window(r, "sliding_window", 0);
  if (r.flag("attention_bias", false)) r.fail("attention_bias", "Phi-3's qkv_proj and o_proj carry no bias; true is not Phi-3");
  r.rope_scaling();
  return max_pos;
}

int64_t gpt_neox(HfReader& r, ModelSpec& m) {
  const int64_t max_pos = read_shape(r, m, {50432, 6144, 24576, 44, 64, 0, 2048, false});
  if (r.has("num_key_value_heads")) r.fail("num_key_value_heads", "GPT-NeoX attention has no grouped key/value heads");
  m.kv_heads = 0;
  m.mlp = plain_activation(r, "hidden_act", "gelu");
  m.rotary_fraction = r.number("rotary_pct", 0.0, 1.0, 0.25);
  m.parallel_attention = r.flag("use_parallel_residual", true);
  m.qkv_bias = m.attn_out_bias = r.flag("attention_bias", true);
  r.rope_scaling();
  return max_pos;
}

int64_t falcon(HfReader& r, ModelSpec& m) {
  m.vocab = r.integer("vocab_size", 1, kVocab, 65024);
  const std::string hidden = r.which({"hidden_size", "n_embed"});
  m.hidden = r.integer(hidden.empty() ? "hidden_size" : hidden, 1, kHidden, 4544);
  const std::string layers = r.which({"num_hidden_layers", "n_layer"});
  m.layers = r.integer(layers.empty() ? "num_hidden_layers" : layers, 1, kLayers, 32);
  const std::string heads = r.which({"num_attention_heads", "n_head"});
  m.heads = r.integer(heads.empty() ? "num_attention_heads" : heads, 1, kHeads, 71);
  const std::string kv = r.which({"num_kv_heads", "n_head_kv"});
  const int64_t kv_given = r.integer(kv.empty() ? "num_kv_heads" : kv, 1, kHeads, m.heads);
  const bool new_arch = r.flag("new_decoder_architecture", false), multi_query = r.flag("multi_query", true);
  // FalconAttention: the new architecture's grouped heads, else one shared key/value head under
  // multi_query, else as many as the queries.
  m.kv_heads = new_arch ? kv_given : multi_query ? 1 : m.heads;
  m.positions = r.flag("alibi", false) ? core::PositionKind::Alibi : core::PositionKind::Rotary;
  m.parallel_attention = r.flag("parallel_attn", true);
  m.qkv_bias = m.attn_out_bias = m.mlp_bias = r.flag("bias", false);
  m.intermediate = r.integer("ffn_hidden_size", 1, kInter, 4 * m.hidden);
  m.mlp = plain_activation(r, "activation", "gelu");
  m.tied_embeddings = r.flag("tie_word_embeddings", true);
  // FalconDecoderLayer: num_ln_in_parallel_attn defaults to 2 under the new architecture; a
  // parallel block has that many norms, a sequential one its input and post-attention norms.
  const int64_t lns = r.integer("num_ln_in_parallel_attn", 1, 2, new_arch ? 2 : 1);
  m.norms_per_block = m.parallel_attention ? lns : 2;
  r.rope_scaling();
  return r.integer("max_position_embeddings", 1, kPositions, 2048);
}

int64_t opt(HfReader& r, ModelSpec& m) {
  m.vocab = r.integer("vocab_size", 1, kVocab, 50272);
  m.hidden = r.integer("hidden_size", 1, kHidden, 768);
  m.layers = r.integer("num_hidden_layers", 1, kLayers, 12);
  m.intermediate = r.integer("ffn_dim", 1, kInter, 3072);
  m.heads = r.integer("num_attention_heads", 1, kHeads, 12);
  const int64_t max_pos = r.integer("max_position_embeddings", 1, kPositions, 2048);
  m.learned_positions = max_pos + 2;  // OPTLearnedPositionalEmbedding keeps two rows before position 0
  m.embed_dim = r.integer("word_embed_proj_dim", 1, kHidden, m.hidden);
  m.mlp = plain_activation(r, "activation_function", "relu");
  m.qkv_bias = m.attn_out_bias = m.mlp_bias = r.flag("enable_bias", true);
  if (!r.flag("layer_norm_elementwise_affine", true))
    r.fail("layer_norm_elementwise_affine", "layer norms without weights are not modeled; only true is read");
  const bool before = r.flag("do_layer_norm_before", true), removed = r.flag("_remove_final_layer_norm", false);
  m.final_norm = before && !removed;
  m.tied_embeddings = r.flag("tie_word_embeddings", true);
  return max_pos;
}

int64_t bloom(HfReader& r, ModelSpec& m) {
  m.vocab = r.integer("vocab_size", 1, kVocab, 250880);
  const std::string hidden = r.which({"hidden_size", "n_embed"});
  m.hidden = r.integer(hidden.empty() ? "hidden_size" : hidden, 1, kHidden, 64);
  const std::string layers = r.which({"n_layer", "num_hidden_layers"});
  m.layers = r.integer(layers.empty() ? "n_layer" : layers, 1, kLayers, 2);
  const std::string heads = r.which({"n_head", "num_attention_heads"});
  m.heads = r.integer(heads.empty() ? "n_head" : heads, 1, kHeads, 8);
  // BloomMLP is 4·hidden whatever n_inner says; a value there would be read by no one.
  if (r.maybe_integer("n_inner", 1, kInter))
    r.fail("n_inner", "BLOOM's MLP is 4 x hidden_size in transformers, which never reads n_inner; give null");
  m.tied_embeddings = r.flag("tie_word_embeddings", true);
  return 0;
}

int64_t gpt2(HfReader& r, ModelSpec& m) {
  m.vocab = r.integer("vocab_size", 1, kVocab, 50257);
  const std::string pos = r.which({"n_positions", "max_position_embeddings"});
  const int64_t positions = r.integer(pos.empty() ? "n_positions" : pos, 1, kPositions, 1024);
  const std::string hidden = r.which({"n_embd", "hidden_size"});
  m.hidden = r.integer(hidden.empty() ? "n_embd" : hidden, 1, kHidden, 768);
  const std::string layers = r.which({"n_layer", "num_hidden_layers"});
  m.layers = r.integer(layers.empty() ? "n_layer" : layers, 1, kLayers, 12);
  const std::string heads = r.which({"n_head", "num_attention_heads"});
  m.heads = r.integer(heads.empty() ? "n_head" : heads, 1, kHeads, 12);
  if (auto inner = r.maybe_integer("n_inner", 1, kInter); inner && *inner != 4 * m.hidden) m.intermediate = *inner;
  m.mlp = plain_activation(r, "activation_function", "gelu_new");
  if (r.flag("add_cross_attention", false)) r.fail("add_cross_attention", "cross-attention blocks are not modeled");
  m.tied_embeddings = r.flag("tie_word_embeddings", true);
  m.learned_positions = positions;
  r.accept({"n_ctx"});
  return positions;
}

int64_t deepseek_v2(HfReader& r, ModelSpec& m) {
  const int64_t max_pos = read_shape(r, m, {102400, 4096, 11008, 30, 32, 0, 2048, false});
  m.kv_heads = 0;  // MLA's keys and values come from the latent, one per query head
  m.mlp = gated_activation(r, "hidden_act", "silu");
  m.qkv_bias = m.attn_out_bias = r.flag("attention_bias", false);
  m.fused_qkv = false;
  m.q_lora_rank = r.maybe_integer("q_lora_rank", 1, kHidden).value_or(r.contains("q_lora_rank") ? 0 : 1536);
  m.kv_lora_rank = r.integer("kv_lora_rank", 1, kHidden, 512);
  m.qk_rope_head_dim = r.integer("qk_rope_head_dim", 1, kHeads, 64);
  m.qk_nope_head_dim = r.integer("qk_nope_head_dim", 0, kHeads, 128);
  m.v_head_dim = r.integer("v_head_dim", 1, kHeads, 128);
  const int64_t moe_inter = r.integer("moe_intermediate_size", 1, kInter, 1407);
  const auto routed = r.maybe_integer("n_routed_experts", 1, kHeads);
  const int64_t shared = r.maybe_integer("n_shared_experts", 1, kHeads).value_or(0);
  const auto top_k = r.maybe_integer("num_experts_per_tok", 1, kHeads);
  const int64_t freq = r.integer("moe_layer_freq", 1, kLayers, 1);
  const int64_t first_dense = r.integer("first_k_dense_replace", 0, kLayers, 0);
  r.rope_scaling();
  if (!routed) return max_pos;  // DeepseekV2DecoderLayer: no routed experts, every MLP dense
  if (!top_k) r.fail("num_experts_per_tok", "a mixture of n_routed_experts needs its experts per token");
  m.experts = *routed;
  m.experts_per_token = *top_k;
  m.expert_intermediate = moe_inter;
  m.shared_expert_intermediate = shared * moe_inter;  // DeepseekV2MoE: one MLP of n_shared_experts' width
  // A mixture where layer >= first_k_dense_replace and layer % moe_layer_freq == 0.
  for (int64_t l = 0; l < m.layers; ++l)
    if (l < first_dense || l % freq != 0) m.dense_layers.push_back(l);
  return max_pos;
}

// Newer transformers write layer_types, each layer's "full_attention" or "sliding_attention": it
// must say what the family's keys say, layer by layer.
void check_layer_types(HfReader& r, const ModelSpec& m) {
  if (!r.contains("layer_types")) return;
  const auto types = r.strings("layer_types");
  if (int64_t(types.size()) != m.layers)
    r.fail("layer_types", fmt::format("lists {} layers for a model of {}", types.size(), m.layers));
  for (int64_t l = 0; l < m.layers; ++l) {
    const bool local = m.sliding_window > 0 && l >= m.sliding_window_from_layer &&
                       (l - m.sliding_window_from_layer) % m.sliding_window_period == 0;
    const std::string& t = types[size_t(l)];
    if (t != "full_attention" && t != "sliding_attention")
      r.fail("layer_types", fmt::format("layer {} is '{}'; expected full_attention or sliding_attention", l, t));
    if ((t == "sliding_attention") != local)
      r.fail("layer_types", fmt::format("layer {} is {} where the config's sliding-window keys make it {}", l, t,
                                        local ? "sliding_attention" : "full_attention"));
  }
}

int64_t family(HfReader& r, ModelSpec& m) {
  switch (m.family) {
    case Family::Llama: return llama(r, m);
    case Family::Mistral: return mistral(r, m, false);
    case Family::Mixtral: return mistral(r, m, true);
    case Family::Qwen2: return qwen2(r, m, false);
    case Family::Qwen2Moe: return qwen2(r, m, true);
    case Family::Gemma: return gemma(r, m, false);
    case Family::Gemma2: return gemma(r, m, true);
    case Family::Phi3: return phi3(r, m);
    case Family::GptNeox: return gpt_neox(r, m);
    case Family::Falcon: return falcon(r, m);
    case Family::Opt: return opt(r, m);
    case Family::Bloom: return bloom(r, m);
    case Family::Gpt2: return gpt2(r, m);
    case Family::DeepseekV2: return deepseek_v2(r, m);
  }
  return 0;
}

}  // namespace

int64_t read_family(HfReader& r, ModelSpec& m) {
  const int64_t max_pos = family(r, m);
  check_layer_types(r, m);
  return max_pos;
}

}  // namespace zinf::models
