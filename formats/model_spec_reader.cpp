#include "formats/model_spec_reader.hpp"

#include <string>
#include <vector>

#include "formats/config_reader.hpp"

namespace zinf::core {

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
  m.flash_attention = r.choice("attention", {"eager", "flash"}, m.flash_attention ? "flash" : "eager") == "flash";
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

}  // namespace

ModelSpec load_model_spec(const std::string& path) {
  auto r = ConfigReader::from_file(path);
  return read(r);
}

ModelSpec parse_model_spec(const std::string& yaml_text, const std::string& name) {
  auto r = ConfigReader::from_string(yaml_text, name);
  return read(r);
}

}  // namespace zinf::core
