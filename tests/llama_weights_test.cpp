// Llama weights in transformers' names (engine/model/safetensors.hpp, hf_weights.hpp) for the tiny
// Llama of tests/data/llama-tiny: export then import is bitwise in fp32 and, in bf16, export ->
// import -> export writes the same bytes; one file or shards with their index; the config.json
// written beside them reads back as the same model; a misshapen, missing or foreign tensor is
// refused naming it, and an older checkpoint's rotary inv_freq buffers are read past.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "engine/bf16.hpp"
#include "engine/model/gpt2.hpp"
#include "engine/model/hf_weights.hpp"
#include "models/decoder.hpp"
#include "formats/hf_config.hpp"
#include "temp_dir.hpp"
#include "test_paths.hpp"

using namespace zinf;
using namespace zinf::engine;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

core::ModelGraph tiny_llama(bool tied = false) {
  auto spec = models::load_hf_config(test::source("tests/data/llama-tiny/config.json"));
  spec.tied_embeddings = tied;
  return models::build_decoder(spec);
}

// Distinct values in every group (norm weights too), representable in bf16 when asked.
Gpt2Params random_params(const core::ModelGraph& g, bool bf16_exact) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  Gpt2Params p;
  for (const auto& group : g.params) {
    std::vector<float> v(size_t(group.numel));
    for (float& x : v) x = bf16_exact ? to_float(to_bf16(normal(rng))) : normal(rng);
    p.push_back(std::move(v));
  }
  return p;
}

GroupSource from(const Gpt2Params& p) {
  return [&p](int32_t g, std::vector<float>& out) { out = p[size_t(g)]; };
}

std::string bytes_of(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The layout's tensors with fresh values, one of them (by name) given another shape, written as
// one model.safetensors; `extra` adds a tensor of that name.
void write_with(const fs::path& dir, const core::ModelGraph& g, const std::string& reshape, std::vector<int64_t> shape,
                const std::string& extra = "") {
  std::vector<TensorToWrite> layout = gpt2_hf_layout(g);
  if (!extra.empty()) layout.push_back({extra, {8}, nullptr});
  std::vector<std::vector<float>> data;
  for (auto& t : layout) {
    if (t.name == reshape) t.shape = shape;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    data.emplace_back(size_t(n), 0.25f);
  }
  for (size_t i = 0; i < layout.size(); ++i) layout[i].data = data[i].data();
  fs::create_directories(dir);
  write_safetensors((dir / kHfSingleFile).string(), layout, TensorDtype::F32);
}

}  // namespace

TEST_CASE("Llama weights carry transformers' names and shapes", "[llama][weights]") {
  const auto g = tiny_llama();
  const auto layout = gpt2_hf_layout(g);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& t : layout) shapes[t.name] = t.shape;
  CHECK(layout.size() == 2 + 2 * 9 + 1);  // embedding, head, 9 per layer, final norm
  CHECK(shapes.at("model.embed_tokens.weight") == std::vector<int64_t>{256, 64});
  CHECK(shapes.at("model.layers.1.self_attn.q_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(shapes.at("model.layers.1.self_attn.k_proj.weight") == std::vector<int64_t>{32, 64});  // 2 kv heads of 16
  CHECK(shapes.at("model.layers.1.self_attn.v_proj.weight") == std::vector<int64_t>{32, 64});
  CHECK(shapes.at("model.layers.0.self_attn.o_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(shapes.at("model.layers.0.mlp.gate_proj.weight") == std::vector<int64_t>{176, 64});
  CHECK(shapes.at("model.layers.0.mlp.up_proj.weight") == std::vector<int64_t>{176, 64});
  CHECK(shapes.at("model.layers.0.mlp.down_proj.weight") == std::vector<int64_t>{64, 176});
  CHECK(shapes.at("model.layers.0.input_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.0.post_attention_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.norm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("lm_head.weight") == std::vector<int64_t>{256, 64});
  CHECK(gpt2_hf_layout(tiny_llama(true)).size() == layout.size() - 1);  // a tied head has no tensor
}

TEST_CASE("Llama export then import round-trips bitwise, in one file and in shards", "[llama][weights]") {
  for (const bool tied : {false, true}) {
    for (const uint64_t shard : {uint64_t(5'000'000'000), uint64_t(60'000)}) {
      INFO("tied " << tied << ", shard bytes " << shard);
      const auto g = tiny_llama(tied);
      const auto params = random_params(g, false);
      test::TempDir dir("llama_w");
      HfExport how;
      how.shard_bytes = shard;
      save_gpt2_hf_folder(dir.path.string(), g, from(params), how);
      CHECK(fs::exists(dir.path / kHfIndexFile) == (shard < 1'000'000));
      const auto back = load_gpt2_safetensors(dir.path.string(), g);
      REQUIRE(back.size() == params.size());
      for (size_t i = 0; i < params.size(); ++i) CHECK(back[i] == params[i]);
      // The config.json beside them is the same model.
      const auto spec = models::load_hf_config((dir.path / "config.json").string());
      CHECK(spec.family == core::Family::Llama);
      CHECK(spec.kv_head_count() == 2);
      CHECK(spec.ffn_hidden() == 176);
      CHECK(spec.tied_embeddings == tied);
      CHECK(spec.rope_theta == g.spec.rope_theta);
      CHECK(spec.norm_eps == g.spec.norm_eps);
      CHECK(models::build_decoder(spec).total_params() == g.total_params());
    }
  }
  // bf16: export, import, export again writes the same bytes.
  const auto g = tiny_llama();
  const auto params = random_params(g, true);
  test::TempDir one("llama_bf16a"), two("llama_bf16b");
  HfExport how;
  how.dtype = TensorDtype::BF16;
  save_gpt2_hf_folder(one.path.string(), g, from(params), how);
  const auto back = load_gpt2_safetensors(one.path.string(), g);
  for (size_t i = 0; i < params.size(); ++i) CHECK(back[i] == params[i]);
  save_gpt2_hf_folder(two.path.string(), g, from(back), how);
  CHECK(bytes_of(one.path / kHfSingleFile) == bytes_of(two.path / kHfSingleFile));
}

TEST_CASE("Llama weights of the wrong shape, missing or foreign are refused by name", "[llama][weights]") {
  const auto g = tiny_llama();
  {
    test::TempDir dir("llama_shape");
    write_with(dir.path, g, "model.layers.1.self_attn.k_proj.weight", {64, 64});
    CHECK_THROWS_WITH(load_gpt2_safetensors(dir.path.string(), g),
                      Contains("model.layers.1.self_attn.k_proj.weight") && Contains("[64, 64]") && Contains("[32, 64]"));
  }
  {
    test::TempDir dir("llama_norm");
    write_with(dir.path, g, "model.norm.weight", {65});
    CHECK_THROWS_WITH(load_gpt2_safetensors(dir.path.string(), g), Contains("'model.norm.weight' has shape [65]"));
  }
  {
    test::TempDir dir("llama_extra");
    write_with(dir.path, g, "", {}, "model.layers.0.self_attn.q_norm.weight");
    CHECK_THROWS_WITH(load_gpt2_safetensors(dir.path.string(), g),
                      Contains("'model.layers.0.self_attn.q_norm.weight' is not part of model") && Contains("(Llama)"));
  }
  {
    test::TempDir dir("llama_missing");
    write_with(dir.path, tiny_llama(true), "", {});  // no lm_head.weight for an untied model
    CHECK_THROWS_WITH(load_gpt2_safetensors(dir.path.string(), g), Contains("'lm_head.weight' is missing"));
  }
  {
    test::TempDir dir("llama_inv_freq");
    write_with(dir.path, g, "", {}, "model.layers.0.self_attn.rotary_emb.inv_freq");
    const auto p = load_gpt2_safetensors(dir.path.string(), g);
    CHECK(p.size() == g.params.size());
    CHECK(p[0][0] == 0.25f);
  }
}
