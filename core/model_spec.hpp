// ModelSpec is what zinf knows of a model: its shape, its architecture (which family's blocks: their
// norms, MLP, attention, positions, experts) and the micro-batch it trains with. A models/*.yaml
// file or a Hugging Face config.json (formats/hf_config.hpp) gives it. Every architecture field has a
// default that is GPT-2's, so a YAML that names none of them describes the GPT-2 it always did.
// Plain value type.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zinf::core {

// The families zinf describes, by the Hugging Face model_type that names them.
enum class Family { Gpt2, Llama, Mistral, Mixtral, Qwen2, Qwen2Moe, Gemma, Gemma2, Phi3, GptNeox, Falcon, Opt, Bloom, DeepseekV2 };
const char* to_string(Family f);  // the model_type: "gpt2", "llama", ...
const std::vector<Family>& all_families();

enum class NormKind { LayerNorm, RmsNorm };
// The MLP: one up-projection and an activation, or a gated pair (gate and up, act(gate) * up).
enum class MlpKind { Gelu, Relu, GatedSilu, GatedGelu };
enum class PositionKind { Learned, Rotary, Alibi };
const char* to_string(NormKind k);
const char* to_string(MlpKind k);
const char* to_string(PositionKind k);

struct ModelSpec {
  std::string name;
  std::string file;  // where it was read from, for messages (empty when built in code)
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t ffn_multiple = 4;  // MLP inner size = ffn_multiple * hidden, unless `intermediate` is set
  int64_t seq = 0;           // the sequence length trained on
  int64_t vocab = 0;
  int64_t micro_batch = 1;   // sequences per rank per micro-batch
  bool tied_embeddings = true;

  // Architecture. Defaults: GPT-2's.
  Family family = Family::Gpt2;
  NormKind norm = NormKind::LayerNorm;
  bool norm_bias = true;             // a LayerNorm's beta
  int64_t norms_per_block = 2;       // 1: Falcon-7B's one norm before parallel attention and MLP; 4: Gemma 2
  bool embedding_norm = false;       // BLOOM's word_embeddings_layernorm
  bool final_norm = true;            // OPT without do_layer_norm_before has none
  MlpKind mlp = MlpKind::Gelu;
  int64_t kv_heads = 0;              // key/value heads (grouped-query attention); 0: heads
  int64_t head_size = 0;             // one head's size; 0: hidden / heads
  int64_t intermediate = 0;          // the MLP's inner size; 0: ffn_multiple * hidden
  bool qkv_bias = true;              // query, key and value projections carry biases
  bool attn_out_bias = true;         // the attention's output projection carries one
  bool mlp_bias = true;              // the MLP's linears carry them
  bool fused_qkv = true;             // one linear makes q, k and v (c_attn, qkv_proj, query_key_value)
  bool fused_gate_up = false;        // one linear makes gate and up (Phi-3's gate_up_proj)
  PositionKind positions = PositionKind::Learned;
  int64_t learned_positions = 0;     // rows of a learned position embedding; 0: seq
  double rotary_fraction = 1.0;      // the share of a head's dimensions rotated (GPT-NeoX's rotary_pct)
  double rope_theta = 10000.0;       // the rotary base (config.json's rope_theta)
  double norm_eps = 1e-5;            // the norms' epsilon (rms_norm_eps, layer_norm_eps)
  std::string rope_scaling;          // config.json's rope_scaling type ("llama3", "linear", ...); empty: none
  bool parallel_attention = false;   // attention and MLP read the same input (GPT-NeoX, Falcon)
  int64_t embed_dim = 0;             // the token embedding's width (OPT's word_embed_proj_dim); 0: hidden
  int64_t sliding_window = 0;        // tokens a query attends to in a local layer; 0: all
  int64_t sliding_window_period = 1; // 1: every layer from sliding_window_from_layer is local; 2: every other (Gemma 2)
  int64_t sliding_window_from_layer = 0;
  // Mixture of experts: `experts` routed experts, `experts_per_token` of them per token, each a
  // gated MLP of expert_intermediate; shared experts, one MLP of shared_expert_intermediate that
  // every token uses (with a sigmoid gate of its own in Qwen2-MoE); dense_layers keep a plain MLP.
  int64_t experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_intermediate = 0;
  int64_t shared_expert_intermediate = 0;
  bool shared_expert_gate = false;
  std::vector<int64_t> dense_layers;
  // Multi-head latent attention (DeepSeek-V2): queries through a rank-q_lora_rank bottleneck (0: a
  // plain projection), keys and values through one of kv_lora_rank; q/k heads of qk_nope_head_dim +
  // qk_rope_head_dim, value heads of v_head_dim. kv_lora_rank 0: not MLA.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t v_head_dim = 0;
  // The attention kernel (`attention: flash` in a model YAML): eager attention writes the
  // probabilities (heads x span per token) to memory and keeps them for backward; FlashAttention
  // (Dao et al., NeurIPS 2022, Algorithms 1-2) keeps one fp32 log-sum-exp per head and query, and its
  // backward recomputes the scores: 5 matrix products where eager attention's backward has 4.
  // Planned and simulated; the engine's kernels are eager (models::require_engine_architecture).
  bool flash_attention = false;

  // Elements per token of one block's attention kept for backward beyond q, k, v and the output,
  // counted in 16-bit elements: the probabilities over `span` keys, or FlashAttention's fp32
  // log-sum-exp (2 per head).
  double kept_attention_elements(int64_t span) const {
    return double(heads) * (flash_attention ? 2.0 : double(span));
  }

  int64_t ffn_hidden() const { return intermediate > 0 ? intermediate : ffn_multiple * hidden; }
  int64_t head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  int64_t kv_head_count() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t position_rows() const { return learned_positions > 0 ? learned_positions : seq; }
  int64_t embedding_width() const { return embed_dim > 0 ? embed_dim : hidden; }
  bool mla() const { return kv_lora_rank > 0; }
  bool gated_mlp() const { return mlp == MlpKind::GatedSilu || mlp == MlpKind::GatedGelu; }
  bool moe_layer(int64_t layer) const;
  // Tokens a query of `layer` attends to: the sequence, or the sliding window where it is local.
  int64_t attention_span(int64_t layer) const;
  // The architecture the GPT-2 engine trains and the closed forms of the paper describe: GPT-2's
  // blocks with positions for exactly the sequence.
  bool is_gpt2() const;
};

// The architecture fields of `f` as its Hugging Face configuration class sets them (norms, MLP,
// biases, positions, tied head); shape fields untouched.
void apply_family_defaults(ModelSpec& m, Family f);

// Parameters counted as transformers counts them: every nn.Parameter once (a tied head once), no
// buffers. `active`: the parameters one token uses (with experts: the shared experts, its top-k
// routed experts and everything else).
struct ExactParams {
  int64_t total = 0;
  int64_t active = 0;
};
ExactParams exact_params(const ModelSpec& m);

// Checks a model spec as its readers give it (formats/model_spec_reader.hpp,
// formats/hf_config.hpp); throws ConfigError naming the file and key.
void validate(const ModelSpec& m, const std::string& file);

}  // namespace zinf::core
