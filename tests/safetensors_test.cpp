// safetensors: GPT-2 round trips in F32 (exact) and BF16 (rounded), Hugging Face's Conv1D layout,
// its name prefix and longer wpe, and errors that name the file and the tensor.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/backend/cpu/convert.hpp"
#include "engine/model/safetensors.hpp"
#include "models/gpt.hpp"

using namespace zinf::engine;
namespace fs = std::filesystem;

namespace {

zinf::core::ModelSpec small_spec() {
  zinf::core::ModelSpec s;
  s.name = "gpt-small-test";
  s.layers = 2;
  s.hidden = 8;
  s.heads = 2;
  s.seq = 6;
  s.vocab = 11;
  return s;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("zinf_st_test_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// Every tensor of a model as Hugging Face lays it out, with one tensor renamed, dropped or reshaped.
void write_hf(const std::string& path, const zinf::core::ModelGraph& g, const Gpt2Params& p,
              const std::string& prefix = "", const std::string& drop = "", int64_t wpe_rows = 0) {
  std::vector<std::vector<float>> keep;
  keep.reserve(64);
  std::vector<TensorToWrite> t;
  for (const auto& grp : g.params) {
    const auto& v = p[size_t(grp.id)];
    auto add = [&](std::string name, std::vector<int64_t> shape, std::vector<float> data) {
      if (name == drop) return;
      keep.push_back(std::move(data));
      t.push_back({prefix + name, std::move(shape), keep.back().data()});
    };
    if (grp.name == "wte") {
      add("wte.weight", {grp.rows, grp.cols}, v);
    } else if (grp.name == "wpe") {
      auto w = v;
      w.resize(size_t(std::max(grp.rows, wpe_rows) * grp.cols), 9.0f);
      add("wpe.weight", {std::max(grp.rows, wpe_rows), grp.cols}, w);
    } else if (grp.name.find("ln_") != std::string::npos) {
      add(grp.name + ".weight", {grp.cols}, {v.begin(), v.begin() + grp.cols});
      add(grp.name + ".bias", {grp.cols}, {v.begin() + grp.cols, v.end()});
    } else {
      std::vector<float> w(size_t(grp.rows * grp.cols));
      for (int64_t o = 0; o < grp.rows; ++o)
        for (int64_t i = 0; i < grp.cols; ++i) w[size_t(i * grp.rows + o)] = v[size_t(o * grp.cols + i)];
      add(grp.name + ".weight", {grp.cols, grp.rows}, w);
      add(grp.name + ".bias", {grp.rows}, {v.begin() + grp.rows * grp.cols, v.end()});
    }
  }
  std::vector<float> mask(36, 1.0f);  // HF's attn.bias buffer: present in old checkpoints, ignored
  t.push_back({prefix + "h.0.attn.bias", {1, 1, 6, 6}, mask.data()});
  write_safetensors(path, t, TensorDtype::F32);
}

Gpt2Params test_params(const Gpt2& m) {
  Gpt2Params p = m.init_params(3);
  float k = 0.001f;
  for (auto& g : p)
    for (auto& x : g) x += (k += 0.001f);  // distinct values everywhere, biases included
  return p;
}

}  // namespace

TEST_CASE("gpt2 safetensors round trip: F32 exact, BF16 rounded", "[safetensors]") {
  TempDir dir;
  Gpt2 m(zinf::models::build_gpt(small_spec()));
  Gpt2Params p = test_params(m);
  save_gpt2_safetensors(dir / "m.safetensors", m.graph(), p, TensorDtype::F32);
  CHECK(load_gpt2_safetensors(dir / "m.safetensors", m.graph()) == p);

  save_gpt2_safetensors(dir / "m16.safetensors", m.graph(), p, TensorDtype::BF16);
  Gpt2Params r = p;
  for (auto& g : r) zinf::engine::cpu::round_to_bf16(g.data(), int64_t(g.size()));
  CHECK(load_gpt2_safetensors(dir / "m16.safetensors", m.graph()) == r);

  SafetensorsReader reader(dir / "m.safetensors");
  CHECK(reader.info("h.1.mlp.c_fc.weight").shape == std::vector<int64_t>{8, 32});  // Conv1D: in x out
  CHECK(reader.info("h.1.attn.c_attn.bias").shape == std::vector<int64_t>{24});
  CHECK(reader.info("ln_f.weight").dtype == "F32");
  CHECK(reader.metadata().at("format") == "pt");
  CHECK_FALSE(reader.has("lm_head.weight"));  // tied to wte
  int leftovers = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) leftovers += e.path().string().find(".tmp.") != std::string::npos;
  CHECK(leftovers == 0);
}

TEST_CASE("gpt2 imports Hugging Face's layout: Conv1D transposed, prefix, longer wpe", "[safetensors]") {
  TempDir dir;
  Gpt2 m(zinf::models::build_gpt(small_spec()));
  Gpt2Params p = test_params(m);
  write_hf(dir / "hf.safetensors", m.graph(), p, "transformer.", "", 1024);
  CHECK(load_gpt2_safetensors(dir / "hf.safetensors", m.graph()) == p);
}

TEST_CASE("safetensors errors name the file and the tensor", "[safetensors]") {
  TempDir dir;
  Gpt2 m(zinf::models::build_gpt(small_spec()));
  Gpt2Params p = test_params(m);

  write_hf(dir / "missing.safetensors", m.graph(), p, "", "h.1.mlp.c_fc.bias");
  CHECK_THROWS_AS(load_gpt2_safetensors(dir / "missing.safetensors", m.graph()), SafetensorsError);
  CHECK_THROWS_WITH(load_gpt2_safetensors(dir / "missing.safetensors", m.graph()),
                    Catch::Contains("missing.safetensors") && Catch::Contains("h.1.mlp.c_fc.bias") &&
                        Catch::Contains("missing"));

  auto other = small_spec();
  other.hidden = 12;
  other.heads = 3;
  CHECK_THROWS_WITH(load_gpt2_safetensors(dir / "missing.safetensors", zinf::models::build_gpt(other)),
                    Catch::Contains("wte.weight") && Catch::Contains("[11, 8]") && Catch::Contains("[11, 12]"));

  auto write_raw = [&](const std::string& name, const std::string& header, size_t data_bytes, uint64_t len) {
    std::ofstream f(dir / name, std::ios::binary);
    for (int i = 0; i < 8; ++i) f.put(char((len >> (8 * i)) & 0xff));
    f << header << std::string(data_bytes, '\0');
  };
  write_raw("garbage.safetensors", "{not json", 0, 9);
  CHECK_THROWS_WITH(SafetensorsReader(dir / "garbage.safetensors"),
                    Catch::Contains("garbage.safetensors") && Catch::Contains("not valid JSON"));
  write_raw("huge.safetensors", "{}", 0, 1u << 30);
  CHECK_THROWS_WITH(SafetensorsReader(dir / "huge.safetensors"),
                    Catch::Contains("huge.safetensors") && Catch::Contains("header length"));
  const std::string h = R"({"wte.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
  write_raw("sizes.safetensors", h, 24, h.size());
  CHECK_THROWS_WITH(SafetensorsReader(dir / "sizes.safetensors"),
                    Catch::Contains("sizes.safetensors") && Catch::Contains("wte.weight") && Catch::Contains("24"));
  const std::string h2 = R"({"wte.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  write_raw("short.safetensors", h2, 10, h2.size());
  CHECK_THROWS_WITH(SafetensorsReader(dir / "short.safetensors"), Catch::Contains("outside"));
  CHECK_THROWS_WITH(SafetensorsReader(dir / "nonexistent.safetensors"), Catch::Contains("nonexistent.safetensors"));
}

TEST_CASE("a shape whose element count or byte size overflows 64 bits is refused before any size comparison",
          "[safetensors]") {
  // 2^32 x 2^32 elements wrap to 0, which 16 bytes of data_offsets [0, 0] would match; 2^62 F32
  // elements are 2^64 bytes, which wrap to 0 as well. Each was accepted and read past the data.
  TempDir dir;
  auto write_raw = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    std::ofstream f(dir / name, std::ios::binary);
    for (int i = 0; i < 8; ++i) f.put(char((uint64_t(header.size()) >> (8 * i)) & 0xff));
    f << header << std::string(data_bytes, '\0');
  };
  write_raw("count.safetensors", R"({"wte.weight":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 16);
  CHECK_THROWS_WITH(SafetensorsReader(dir / "count.safetensors"),
                    Catch::Contains("count.safetensors") && Catch::Contains("wte.weight") && Catch::Contains("64-bit count"));
  write_raw("bytes.safetensors", R"({"wte.weight":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 16);
  CHECK_THROWS_WITH(SafetensorsReader(dir / "bytes.safetensors"),
                    Catch::Contains("bytes.safetensors") && Catch::Contains("64-bit size"));
  write_raw("many.safetensors", R"({"x":{"dtype":"BF16","shape":[3037000500,3037000500,2],"data_offsets":[0,8]}})", 8);
  CHECK_THROWS_AS(SafetensorsReader(dir / "many.safetensors"), SafetensorsError);
}
