#include "formats/hf_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace zinf::models {
namespace {

// Keys any PretrainedConfig may carry that change no parameter, FLOP or byte zinf models: what the
// file is (names, dtype, versions, remote code), token ids, generation and task settings, dropout,
// initialization, numerical epsilons, rotary bases and scaling, routing losses and kernels' options.
const std::set<std::string>& harmless_keys() {
  static const std::set<std::string> keys = {
      "_name_or_path", "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "model_type",
      "use_cache", "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id",
      "decoder_start_token_id", "initializer_range", "init_std", "attention_dropout", "hidden_dropout", "resid_pdrop",
      "embd_pdrop", "attn_pdrop", "dropout", "activation_dropout", "classifier_dropout", "layerdrop", "rms_norm_eps",
      "layer_norm_eps", "layer_norm_epsilon", "rope_theta", "rotary_emb_base", "task_specific_params", "prefix",
      "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "aux_loss_alpha", "seq_aux",
      "norm_topk_prob", "routed_scaling_factor", "scoring_func", "topk_method", "n_group", "topk_group", "ep_size",
      "pretraining_tp", "attention_softmax_in_fp32", "bias_dropout_fusion", "masked_softmax_fusion", "offset_alibi",
      "skip_bias_add", "skip_bias_add_qkv", "slow_but_exact", "summary_type", "summary_use_proj", "summary_activation",
      "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
      "reorder_and_upcast_attn", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
      "cache_implementation", "original_max_position_embeddings", "gradient_checkpointing", "return_dict",
      "output_attentions", "output_hidden_states", "torchscript", "use_bfloat16", "problem_type", "id2label",
      "label2id", "max_length", "min_length", "do_sample", "temperature", "top_k", "top_p", "num_beams",
      "repetition_penalty", "tokenizer_class", "apply_residual_connection_post_layernorm", "use_mrope",
      "use_flash_attn", "_attn_implementation", "attn_implementation", "head_dim_scale",
      // PretrainedConfig's generic attributes (generation and task settings) that
      // save_pretrained writes into many decoder configs, and the legacy sequence-length key of the
      // first converted LLaMA checkpoints (transformers 4.28 kept it as an unused attribute).
      "max_sequence_length", "model_max_length", "_commit_hash", "chunk_size_feed_forward",
      "pruned_heads", "tf_legacy_loss",
      "bad_words_ids", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "length_penalty", "early_stopping",
      "num_return_sequences", "num_beam_groups", "diversity_penalty", "typical_p", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
      "begin_suppress_tokens", "output_scores", "return_dict_in_generate", "finetuning_task", "use_return_dict"};
  return keys;
}

std::string type_name(const nlohmann::json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}

}  // namespace

bool HfReader::has(const std::string& key) const { return root_.contains(key) && !root_[key].is_null(); }

const nlohmann::json* HfReader::at(const std::string& key) {
  read_.insert(key);
  if (!has(key)) return nullptr;
  return &root_[key];
}

std::string HfReader::which(std::initializer_list<const char*> keys) {
  std::string found;
  for (const char* k : keys) {
    read_.insert(k);
    if (!has(k)) continue;
    if (found.empty()) found = k;
    else if (root_[k] != root_[found])
      fail(k, fmt::format("gives {} where '{}' gives {}; they name one setting", root_[k].dump(), found, root_[found].dump()));
  }
  return found;
}

std::optional<int64_t> HfReader::maybe_integer(const std::string& key, int64_t lowest, int64_t highest) {
  const nlohmann::json* v = at(key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() && !v->is_number_unsigned())
    fail(key, fmt::format("must be an integer, not {} ({})", type_name(*v), v->dump()));
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(highest))
    fail(key, fmt::format("{} is out of range; expected {} to {}", v->dump(), lowest, highest));
  const int64_t x = v->get<int64_t>();
  if (x < lowest || x > highest) fail(key, fmt::format("{} is out of range; expected {} to {}", x, lowest, highest));
  return x;
}

int64_t HfReader::integer(const std::string& key, int64_t lowest, int64_t highest, int64_t fallback) {
  return maybe_integer(key, lowest, highest).value_or(fallback);
}

double HfReader::number(const std::string& key, double lowest, double highest, double fallback) {
  const nlohmann::json* v = at(key);
  if (!v) return fallback;
  if (!v->is_number()) fail(key, fmt::format("must be a number, not {} ({})", type_name(*v), v->dump()));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lowest || x > highest)
    fail(key, fmt::format("{} is out of range; expected {} to {}", x, lowest, highest));
  return x;
}

bool HfReader::flag(const std::string& key, bool fallback) {
  const nlohmann::json* v = at(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, fmt::format("must be true or false, not {} ({})", type_name(*v), v->dump()));
  return v->get<bool>();
}

std::string HfReader::text(const std::string& key, const std::string& fallback) {
  const nlohmann::json* v = at(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, fmt::format("must be a string, not {} ({})", type_name(*v), v->dump()));
  return v->get<std::string>();
}

std::string HfReader::choice(const std::string& key, const std::vector<std::string>& allowed, const std::string& fallback) {
  const std::string v = text(key, fallback);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    fail(key, fmt::format("'{}' is not one zinf models; expected one of: {}", v, fmt::join(allowed, ", ")));
  return v;
}

std::vector<int64_t> HfReader::integers(const std::string& key, int64_t lowest, int64_t highest) {
  const nlohmann::json* v = at(key);
  if (!v) return {};
  if (!v->is_array()) fail(key, fmt::format("must be a list of integers, not {}", type_name(*v)));
  std::vector<int64_t> out;
  for (const auto& e : *v) {
    if (!e.is_number_integer() || e.get<int64_t>() < lowest || e.get<int64_t>() > highest)
      fail(key, fmt::format("entry {} must be an integer from {} to {}", e.dump(), lowest, highest));
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::vector<std::string> HfReader::strings(const std::string& key) {
  const nlohmann::json* v = at(key);
  if (!v) return {};
  if (!v->is_array()) fail(key, fmt::format("must be a list of strings, not {}", type_name(*v)));
  std::vector<std::string> out;
  for (const auto& e : *v) {
    if (!e.is_string()) fail(key, fmt::format("entry {} must be a string", e.dump()));
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::string HfReader::rope_scaling() {
  const nlohmann::json* v = at("rope_scaling");
  if (!v) return "";
  if (!v->is_object()) fail("rope_scaling", fmt::format("must be an object or null, not {}", type_name(*v)));
  const std::string kind = v->contains("rope_type") ? "rope_type" : "type";
  if (!v->contains(kind) || !(*v)[kind].is_string()) fail("rope_scaling", "names no rope_type");
  static const std::vector<std::string> known = {"default", "linear", "dynamic", "yarn", "longrope", "su", "llama3"};
  const std::string t = (*v)[kind].get<std::string>();
  if (std::find(known.begin(), known.end(), t) == known.end())
    fail("rope_scaling." + kind, fmt::format("'{}' is not a rope scaling zinf knows; expected one of: {}", t, fmt::join(known, ", ")));
  return t == "default" ? "" : t;
}

void HfReader::accept(std::initializer_list<const char*> keys) {
  for (const char* k : keys) read_.insert(k);
}

void HfReader::finish() const {
  for (auto it = root_.begin(); it != root_.end(); ++it) {
    const std::string& k = it.key();
    if (read_.count(k) || harmless_keys().count(k)) continue;
    fail(k, "is not a key zinf understands for this model_type, and it may change the architecture; zinf "
            "refuses rather than guess (remove it if it changes nothing)");
  }
}

}  // namespace zinf::models
