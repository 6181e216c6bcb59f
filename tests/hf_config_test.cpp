// Hugging Face config.json files read into ModelSpecs with the parameter counts transformers gives
// them, their refusals, and zinf's own YAML taking the same architecture fields.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "core/memory_model.hpp"
#include "core/model_layout.hpp"
#include "core/model_spec.hpp"
#include "models/gpt.hpp"
#include "formats/hf_config.hpp"
#include "formats/model_spec_reader.hpp"

using namespace zinf;
using Catch::Matchers::Contains;

namespace {

std::string hf(const std::string& model) { return std::string(ZINF_SOURCE_DIR) + "/tests/data/hf/" + model; }
core::ModelSpec load(const std::string& model) { return models::find_model(hf(model), ZINF_SOURCE_DIR); }

// The files under tests/data/hf are the public repositories' config.json. The counts are what
// transformers' model.num_parameters() gives for them (every nn.Parameter once, a tied head once),
// as published where a figure is cited.
struct Known {
  const char* model;
  int64_t total;
  int64_t active;  // = total for a dense model
  const char* source;
};

const Known kKnown[] = {
    // Llama 2 paper's 7B, the count transformers prints for meta-llama/Llama-2-7b-hf.
    {"llama-2-7b", 6'738'415'616, 6'738'415'616, "Llama-2-7b-hf"},
    // LLaMA paper, Table 2: 32.5B for "33B" (huggyllama/llama-30b's config, 2023's key names).
    {"llama-33b", 32'528'943'616, 32'528'943'616, "llama-30b"},
    // Meta's "8B": 8,030,261,248 (transformers' count of Meta-Llama-3.1-8B).
    {"llama-3.1-8b", 8'030'261'248, 8'030'261'248, "Llama-3.1-8B"},
    // "70B": 70,553,706,496 (transformers' count of Meta-Llama-3.1-70B).
    {"llama-3.1-70b", 70'553'706'496, 70'553'706'496, "Llama-3.1-70B"},
    // Mistral 7B: 7,241,732,096.
    {"mistral-7b-v0.1", 7'241'732'096, 7'241'732'096, "Mistral-7B-v0.1"},
    // Mixtral paper: 46.7B total, 12.9B active (46,702,792,704 and 12,879,925,248 exactly).
    {"mixtral-8x7b-v0.1", 46'702'792'704, 12'879'925'248, "Mixtral-8x7B-v0.1"},
    // Qwen2.5-7B model card: 7.61B, 6.53B non-embedding (7,615,616,512 exactly).
    {"qwen2.5-7b", 7'615'616'512, 7'615'616'512, "Qwen2.5-7B"},
    // Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated (with both embeddings).
    {"qwen1.5-moe-a2.7b", 14'315'784'192, 2'689'173'504, "Qwen1.5-MoE-A2.7B"},
    // Gemma report: 8.54B for "7B" (8,537,680,896 exactly).
    {"gemma-7b", 8'537'680'896, 8'537'680'896, "gemma-7b"},
    // Gemma 2 9B: 9,241,705,984.
    {"gemma-2-9b", 9'241'705'984, 9'241'705'984, "gemma-2-9b"},
    // Phi-3-mini: 3.8B (3,821,079,552 exactly).
    {"phi-3-mini-4k", 3'821'079'552, 3'821'079'552, "Phi-3-mini-4k-instruct"},
    // Pythia paper, Table 1: 1,414,647,808 total parameters.
    {"pythia-1.4b", 1'414'647'808, 1'414'647'808, "pythia-1.4b"},
    // GPT-NeoX-20B paper: 20,554,567,680 parameters.
    {"gpt-neox-20b", 20'554'567'680, 20'554'567'680, "gpt-neox-20b"},
    // Falcon-7B: 6,921,720,704 (transformers' count).
    {"falcon-7b", 6'921'720'704, 6'921'720'704, "falcon-7b"},
    // OPT-1.3B: 1,315,758,080 (transformers' count).
    {"opt-1.3b", 1'315'758'080, 1'315'758'080, "opt-1.3b"},
    // BLOOM-560m: 559,214,592 (the model card's 559M).
    {"bloom-560m", 559'214'592, 559'214'592, "bloom-560m"},
    // GPT-2 small: 124,439,808.
    {"gpt2", 124'439'808, 124'439'808, "gpt2"},
    // DeepSeek-V2 paper: Lite has 15.7B total, 2.4B activated per token; the 2.4B leaves out the
    // token embedding (209,715,200), which a token does read: 2,661,150,208 with it.
    {"deepseek-v2-lite", 15'706'484'224, 2'661'150'208, "DeepSeek-V2-Lite"},
};

}  // namespace

TEST_CASE("every family's config.json gives transformers' exact parameter count, total and active", "[hf]") {
  for (const auto& k : kKnown) {
    INFO(k.source);
    const core::ModelSpec m = load(k.model);
    const core::ExactParams p = core::exact_params(m);
    CHECK(p.total == k.total);
    CHECK(p.active == k.active);
  }
}

TEST_CASE("counts whose published figures are rounded are checked from the layout's arithmetic", "[hf]") {
  // Falcon-40B: 60 blocks of ln_attn and ln_mlp (with biases), query_key_value of (128 + 2·8)·64
  // outputs, dense, and a 4·8192 MLP, no linear biases; a tied head. "40B" on its card.
  const auto f = core::exact_params(load("falcon-40b"));
  const int64_t block = 4 * 8192 + 8192 * (144 * 64) + 8192 * 8192 + 2 * 8192 * 32768;
  CHECK(f.total == 60 * block + 65024 * 8192 + 2 * 8192);
  CHECK(f.total == 41'303'293'952);
  // OPT-350m: no final norm (do_layer_norm_before false), embeddings of 512 projected in and out.
  const auto o = core::exact_params(load("opt-350m"));
  const int64_t opt_block = 4 * (1024 * 1024 + 1024) + 2 * 2048 + (1024 * 4096 + 4096) + (4096 * 1024 + 1024);
  CHECK(o.total == 24 * opt_block + 50272 * 512 + 2050 * 1024 + 2 * 512 * 1024);
}

TEST_CASE("the families' architecture reaches the spec", "[hf]") {
  const auto l = load("llama-3.1-70b");
  CHECK(l.family == core::Family::Llama);
  CHECK(l.kv_head_count() == 8);
  CHECK(l.ffn_hidden() == 28672);
  CHECK(l.mlp == core::MlpKind::GatedSilu);
  CHECK(l.norm == core::NormKind::RmsNorm);
  CHECK_FALSE(l.tied_embeddings);
  // max_position_embeddings (131072) is not the training sequence: the default is capped.
  CHECK(l.seq == models::kDefaultHfSeq);
  CHECK(l.name == "llama-3.1-70b");
  const auto g = load("gemma-2-9b");
  CHECK(g.head_dim() == 256);
  CHECK(g.norms_per_block == 4);
  CHECK(g.mlp == core::MlpKind::GatedGelu);
  CHECK(g.attention_span(0) == 4096);  // local
  CHECK(g.attention_span(1) == g.seq);  // global
  const auto mis = load("mistral-7b-v0.1");
  CHECK(mis.attention_span(5) == 4096);
  const auto q = load("qwen1.5-moe-a2.7b");
  CHECK(q.experts == 60);
  CHECK(q.shared_expert_gate);
  CHECK(q.moe_layer(0));
  const auto d = load("deepseek-v2-lite");
  CHECK(d.mla());
  CHECK(d.q_lora_rank == 0);  // null: a plain q_proj
  CHECK_FALSE(d.moe_layer(0));  // first_k_dense_replace 1
  CHECK(d.moe_layer(1));
  const auto b = load("bloom-560m");
  CHECK(b.positions == core::PositionKind::Alibi);
  CHECK(b.embedding_norm);
  const auto o = load("opt-1.3b");
  CHECK(o.position_rows() == 2050);
  // A Hugging Face GPT-2 is the architecture the engine trains; the others are not.
  CHECK(load("gpt2").is_gpt2());
  CHECK_FALSE(l.is_gpt2());
}

TEST_CASE("a config.json is found as a file or as the folder holding it", "[hf]") {
  CHECK(models::find_model(hf("gpt2") + "/config.json", ZINF_SOURCE_DIR).layers == 12);
  CHECK(models::find_model(hf("gpt2"), ZINF_SOURCE_DIR).layers == 12);
  CHECK_THROWS_WITH(models::find_model(hf(""), ZINF_SOURCE_DIR), Contains("no config.json"));
}

TEST_CASE("every shipped models/*.yaml is still the GPT-2 the GPT builder builds", "[hf]") {
  for (const auto& name : core::list_configs("models", ZINF_SOURCE_DIR)) {
    INFO(name);
    CHECK(models::find_model(name, ZINF_SOURCE_DIR).is_gpt2());
  }
}

TEST_CASE("the layout counts a GPT-2 YAML as the closed form does", "[hf]") {
  for (const char* name : {"gpt2-small", "gpt2-xl", "gpt-8b-128k", "gpt-tiny"}) {
    const auto m = models::find_model(name, ZINF_SOURCE_DIR);
    INFO(name);
    CHECK(m.is_gpt2());
    CHECK(core::exact_params(m).total == core::gpt_param_counts(m).total(m.layers));
  }
}

namespace {

core::ModelSpec parse(const std::string& json) { return models::parse_hf_config(json, "x/config.json"); }

}  // namespace

TEST_CASE("an unknown model_type, an unknown key, or a bad value is refused by name", "[hf]") {
  CHECK_THROWS_WITH(parse(R"({"model_type": "t5"})"), Contains("x/config.json") && Contains("model_type") && Contains("'t5'"));
  CHECK_THROWS_WITH(parse(R"({"vocab_size": 10})"), Contains("model_type") && Contains("missing"));
  // A key the family's reader does not know may change the architecture: refused, not ignored.
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "num_experts": 8})"), Contains("'num_experts'") && Contains("refuses"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "quantization_config": {}})"), Contains("quantization_config"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "hidden_size": "4096"})"),
                    Contains("'hidden_size'") && Contains("must be an integer"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "hidden_size": 4096.5})"), Contains("'hidden_size'"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "num_hidden_layers": 0})"),
                    Contains("'num_hidden_layers'") && Contains("out of range"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "tie_word_embeddings": 1})"), Contains("'tie_word_embeddings'"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "hidden_act": "tanh"})"), Contains("'hidden_act'") && Contains("tanh"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "rope_scaling": {"rope_type": "warp"}})"), Contains("rope_scaling"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "num_key_value_heads": 5})"), Contains("kv_heads"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "bloom", "n_inner": 4096})"), Contains("'n_inner'"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "bloom", "n_layer": 2, "num_hidden_layers": 3})"), Contains("'num_hidden_layers'"));
  CHECK_THROWS_WITH(parse(R"({"model_type": "gpt2", "add_cross_attention": true})"), Contains("'add_cross_attention'"));
  CHECK_THROWS_WITH(parse("{\"model_type\": "), Contains("not valid JSON"));
  // Shapes past what zinf plans are refused before anything is counted in integers.
  CHECK_THROWS_WITH(parse(R"({"model_type": "mixtral", "num_hidden_layers": 1000000, "num_local_experts": 65536,
                              "intermediate_size": 16777216})"),
                    Contains("parameters; zinf plans models up to"));
  CHECK_THROWS_WITH(parse("[1]"), Contains("JSON object"));
}

TEST_CASE("generic and legacy keys that change no parameter are read past", "[hf]") {
  // The first converted LLaMA checkpoints (huggyllama/llama-30b, transformers 4.28) carry
  // max_sequence_length; generation settings ride in many configs. LLaMA-33B, the paper's 32.5B:
  // 60 x (4 x 6656^2 + 3 x 6656 x 17920 + 2 x 6656) + 2 x 32000 x 6656 + 6656.
  const auto m = parse(R"({"model_type": "llama", "hidden_size": 6656, "intermediate_size": 17920,
      "num_attention_heads": 52, "num_hidden_layers": 60, "vocab_size": 32000, "max_sequence_length": 2048,
      "rms_norm_eps": 1e-06, "pad_token_id": 0, "early_stopping": false, "length_penalty": 1.0})");
  CHECK(core::exact_params(m).total == 32'528'943'616);
  // A key of the same kind that does change the model is still refused.
  CHECK_THROWS_WITH(parse(R"({"model_type": "llama", "is_encoder_decoder": true})"), Contains("'is_encoder_decoder'"));
}

TEST_CASE("layer_types must say what the sliding-window keys say", "[hf]") {
  const std::string two = R"({"model_type": "gemma2", "num_hidden_layers": 2, )";
  CHECK(parse(two + R"("layer_types": ["sliding_attention", "full_attention"]})").sliding_window == 4096);
  CHECK_THROWS_WITH(parse(two + R"("layer_types": ["full_attention", "full_attention"]})"),
                    Contains("'layer_types'") && Contains("layer 0"));
  CHECK_THROWS_WITH(parse(two + R"("layer_types": ["full_attention"]})"), Contains("lists 1 layers"));
  CHECK(parse(R"({"model_type": "qwen2", "num_hidden_layers": 2, "layer_types": ["full_attention", "full_attention"]})")
            .sliding_window == 0);
}

TEST_CASE("absent keys take the configuration class's defaults", "[hf]") {
  // LlamaConfig(): 32 layers of 4096, 32 heads, 11008 MLP, 32000 tokens, untied: Llama 2 7B.
  CHECK(core::exact_params(parse(R"({"model_type": "llama"})")).total == 6'738'415'616);
  // MixtralConfig(): Mixtral 8x7B's shape.
  CHECK(core::exact_params(parse(R"({"model_type": "mixtral"})")).total == 46'702'792'704);
  // GPT2Config(): GPT-2 small.
  CHECK(core::exact_params(parse(R"({"model_type": "gpt2"})")).total == 124'439'808);
  const auto m = parse(R"({"model_type": "mistral"})");
  CHECK(m.sliding_window == 4096);
  CHECK(parse(R"({"model_type": "mistral", "sliding_window": null})").sliding_window == 0);
}

TEST_CASE("zinf's YAML takes the architecture fields, and a GPT YAML stays as it was", "[hf]") {
  const auto llama = core::parse_model_spec(
      "name: l\narchitecture: llama\nlayers: 32\nhidden: 4096\nheads: 32\nintermediate: 11008\nseq: 4096\nvocab: 32000\n", "l.yaml");
  CHECK(core::exact_params(llama).total == 6'738'415'616);
  const auto moe = core::parse_model_spec(
      "name: m\narchitecture: mixtral\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nintermediate: 14336\nseq: 4096\n"
      "vocab: 32000\nexperts: 8\nexperts_per_token: 2\nexpert_intermediate: 14336\n",
      "m.yaml");
  CHECK(core::exact_params(moe).total == 46'702'792'704);
  CHECK(core::exact_params(moe).active == 12'879'925'248);
  CHECK_THROWS_WITH(core::parse_model_spec("name: x\narchitecture: t5\nlayers: 1\nhidden: 8\nheads: 1\nseq: 8\nvocab: 8\n", "x.yaml"),
                    Contains("architecture") && Contains("t5"));
  CHECK_THROWS_WITH(core::parse_model_spec("name: x\nlayers: 1\nhidden: 8\nheads: 1\nseq: 8\nvocab: 8\nexperts: 4\n", "x.yaml"),
                    Contains("experts_per_token"));
  const auto gpt = models::find_model("gpt2-small", ZINF_SOURCE_DIR);
  CHECK(gpt.kv_heads == 0);
  CHECK(gpt.intermediate == 0);
  CHECK(gpt.learned_positions == 0);
  CHECK(gpt.family == core::Family::Gpt2);
}
