// The graphs of the Hugging Face families: the exact parameters in one group per module, the
// families' FLOPs (gated MLPs, GQA, sliding windows, latent attention, top-k experts), the memory
// model's closed form on them, and the engine's refusal of what it cannot run.
#include <catch2/catch.hpp>

#include "core/errors.hpp"
#include "core/memory_model.hpp"
#include "core/model_layout.hpp"
#include "core/run_config.hpp"
#include "models/gpt.hpp"

using namespace zinf;
using Catch::Matchers::Contains;

namespace {

core::ModelSpec load(const std::string& model, int64_t seq = 512) {
  auto m = models::find_model(std::string(ZINF_SOURCE_DIR) + "/tests/data/hf/" + model, ZINF_SOURCE_DIR);
  m.seq = seq;
  return m;
}

const core::Operator& op_named(const core::ModelGraph& g, const std::string& name) {
  for (const auto& o : g.ops)
    if (o.name == name) return o;
  FAIL("no operator " << name);
  return g.ops.front();
}

const char* const kModels[] = {"llama-2-7b", "llama-3.1-8b", "mistral-7b-v0.1", "mixtral-8x7b-v0.1", "qwen2.5-7b",
                               "qwen1.5-moe-a2.7b", "gemma-7b", "gemma-2-9b", "phi-3-mini-4k", "pythia-1.4b",
                               "falcon-7b", "falcon-40b", "opt-1.3b", "opt-350m", "bloom-560m", "gpt2", "deepseek-v2-lite"};

}  // namespace

TEST_CASE("each family's graph holds exactly its parameters, and the closed form counts the same", "[hf][graph]") {
  for (const char* name : kModels) {
    INFO(name);
    const auto m = load(name);
    const auto g = models::build_gpt(m);
    CHECK(g.total_params() == core::exact_params(m).total);
    CHECK(core::gpt_param_counts(m).total(m.layers) == core::exact_params(m).total);
    // One group per module: no group is read by two operators but a tied head's.
    std::vector<int> readers(g.params.size(), 0);
    for (const auto& o : g.ops)
      for (int pg : o.param_groups) ++readers[size_t(pg)];
    for (size_t i = 0; i < readers.size(); ++i) CHECK(readers[i] == (m.tied_embeddings && i == 0 ? 2 : 1));
  }
}

TEST_CASE("a Hugging Face GPT-2 builds the graph zinf's GPT-2 YAML builds", "[hf][graph]") {
  const auto hf = models::build_gpt(load("gpt2", 1024));
  const auto yaml = models::build_gpt(models::find_model("gpt2-small", ZINF_SOURCE_DIR));
  REQUIRE(hf.ops.size() == yaml.ops.size());
  REQUIRE(hf.params.size() == yaml.params.size());
  for (size_t i = 0; i < hf.ops.size(); ++i) {
    CHECK(hf.ops[i].name == yaml.ops[i].name);
    CHECK(hf.ops[i].fwd_flops == yaml.ops[i].fwd_flops);
  }
  CHECK(hf.total_params() == yaml.total_params());
}

TEST_CASE("FLOPs follow the family: three matrices of a gated MLP, GQA's keys, the real head size", "[hf][graph]") {
  const auto m = load("llama-3.1-8b");
  const auto g = models::build_gpt(m);
  const double T = double(g.tokens);
  CHECK(op_named(g, "layers.0.mlp.gate_proj").fwd_flops == Approx(2.0 * T * 4096 * 14336));
  CHECK(op_named(g, "layers.0.mlp.up_proj").fwd_flops == Approx(2.0 * T * 4096 * 14336));
  CHECK(op_named(g, "layers.0.mlp.down_proj").fwd_flops == Approx(2.0 * T * 14336 * 4096));
  CHECK(op_named(g, "layers.0.self_attn.k_proj").n == 8 * 128);  // 8 key/value heads of 128
  const auto& attn = op_named(g, "layers.0.self_attn.core");
  CHECK(attn.k == 128);
  CHECK(attn.fwd_flops == Approx(2.0 * T * 512 * 32 * (128 + 128)));
  // Gemma: 16 heads of 256 on a hidden of 3072, so q_proj makes 4096.
  const auto gg = models::build_gpt(load("gemma-7b"));
  CHECK(op_named(gg, "layers.0.self_attn.q_proj").n == 4096);
  CHECK(op_named(gg, "layers.0.self_attn.core").k == 256);
}

TEST_CASE("a block's activations per token are each operator's saved inputs", "[hf][graph]") {
  // Llama 2 7B at seq 512: two norms (2h), the inputs of q/k/v (once), o_proj, gate/up (once) and
  // down (3h + f), the gated activation's two inputs (2f), q, k, v and the output (4·32·128), in
  // bf16, and 2 bytes for each of 32 heads x 512 probabilities.
  const auto m = load("llama-2-7b");
  const double h = 4096, f = 11008;
  const double expected = 2.0 * (2 * h + 3 * h + f + 2 * f + 4 * 32 * 128) + 2.0 * 32 * 512;
  CHECK(core::layout_activation_bytes_per_token(m) == Approx(expected));
  CHECK(core::block_activation_bytes_per_token(m, 1) == Approx(expected));
  // Mistral's sliding window caps the probabilities at 4096 keys whatever the sequence.
  const auto w = load("mistral-7b-v0.1", 32768);
  const auto w4 = load("mistral-7b-v0.1", 4096);
  CHECK(core::layout_activation_bytes_per_token(w) == Approx(core::layout_activation_bytes_per_token(w4)));
}

TEST_CASE("a sliding window bounds the keys a query attends to, layer by layer", "[hf][graph]") {
  const auto g = models::build_gpt(load("mistral-7b-v0.1", 8192));
  CHECK(op_named(g, "layers.3.self_attn.core").n == 4096);
  const auto g2 = models::build_gpt(load("gemma-2-9b", 8192));
  CHECK(op_named(g2, "layers.0.self_attn.core").n == 4096);
  CHECK(op_named(g2, "layers.1.self_attn.core").n == 8192);
  CHECK(op_named(g2, "layers.1.self_attn.core").fwd_flops == Approx(2 * op_named(g2, "layers.0.self_attn.core").fwd_flops));
}

TEST_CASE("a mixture's experts: every expert's parameters in one unit, the top-k experts' FLOPs", "[hf][graph]") {
  const auto m = load("mixtral-8x7b-v0.1");
  const auto g = models::build_gpt(m);
  const auto& e = op_named(g, "layers.0.block_sparse_moe.experts");
  REQUIRE(e.param_groups.size() == 1);
  const auto& pg = g.params[size_t(e.param_groups[0])];
  CHECK(pg.numel == 8LL * 3 * 4096 * 14336);
  CHECK_FALSE(pg.tileable);  // gathered whole, as DeepSpeed gathers a leaf MoE block
  const double T = double(g.tokens);
  CHECK(e.fwd_flops == Approx(2.0 * T * 2 * 3 * 4096 * 14336).epsilon(1e-3));  // two experts per token
  // The largest unit the memory model counts is that block.
  CHECK(core::gpt_param_counts(m).largest_linear_group == pg.numel);
  // Qwen2-MoE: the shared expert and its gate beside the routed ones.
  const auto q = models::build_gpt(load("qwen1.5-moe-a2.7b"));
  CHECK(op_named(q, "layers.0.mlp.shared_expert.gate_proj").n == 5632);
  CHECK(op_named(q, "layers.0.mlp.shared_expert_gate").n == 1);
}

TEST_CASE("latent attention's compressions and DeepSeek's dense first layer are in the graph", "[hf][graph]") {
  const auto g = models::build_gpt(load("deepseek-v2-lite"));
  CHECK(op_named(g, "layers.0.self_attn.kv_a_proj_with_mqa").n == 512 + 64);
  CHECK(op_named(g, "layers.0.self_attn.kv_b_proj").k == 512);
  CHECK(op_named(g, "layers.0.self_attn.core").k == 192);  // nope 128 + rope 64
  CHECK(op_named(g, "layers.0.mlp.down_proj").k == 10944);  // dense
  CHECK(op_named(g, "layers.1.mlp.experts").n == 1408);
}

TEST_CASE("the run config's seq sets a model's sequence; past learned positions it is refused", "[hf][graph]") {
  core::RunConfig c;
  c.seq = 2048;
  CHECK(models::build_gpt(load("llama-2-7b"), c).tokens == 2048);
  c.seq = 4096;
  CHECK_THROWS_WITH(models::build_gpt(load("opt-1.3b"), c), Contains("2048 learned positions"));
}

TEST_CASE("tensor parallelism and the engine are refused for another architecture, naming the file", "[hf][graph]") {
  CHECK_THROWS_WITH(models::build_gpt(load("llama-2-7b"), 2), Contains("GPT-2 architecture only") && Contains("llama"));
  CHECK_THROWS_WITH(models::require_engine_architecture(load("mixtral-8x7b-v0.1"), "zinf train"),
                    Contains("mixtral-8x7b-v0.1/config.json") && Contains("'architecture'") && Contains("mixtral") &&
                        Contains("zinf train"));
  CHECK_NOTHROW(models::require_engine_architecture(models::find_model("gpt-tiny", ZINF_SOURCE_DIR), "zinf train"));
}
