// Hugging Face weight folders for GPT-2 (gpt-tiny): sharded model-0000N-of-0000M.safetensors with
// model.safetensors.index.json in F32, F16 and BF16, with and without the "transformer." prefix,
// loaded and exported back bitwise, directly and through a Trainer whose states live on NVMe; a
// full disk while exporting leaves the earlier export whole; a single model.safetensors folder; shard sizes and the index as
// transformers writes them; refusals of a missing shard, a tensor in no shard or in two, a
// misshapen tensor and an extra one, each naming the tensor or file.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/bounded_input.hpp"
#include "engine/bf16.hpp"
#include "engine/fp16.hpp"
#include "core/hwprofile.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/model/hf_weights.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "forwarding_io_env.hpp"
#include "temp_dir.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::engine;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

zinf::core::ModelGraph tiny() { return zinf::models::build_gpt(zinf::models::find_model("gpt-tiny", ZINF_SOURCE_DIR)); }

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // representable in the file's dtype, so writing them is exact
};

float representable(float x, TensorDtype d) {
  if (d == TensorDtype::BF16) return to_float(to_bf16(x));
  if (d == TensorDtype::F16) return to_float(to_fp16(x));
  return x;
}

// GPT-2's tensors as transformers saves them, written here from the model's own groups (Conv1D in
// x out), with distinct random values and the attention mask buffer older checkpoints carry.
std::vector<Tensor> hf_tensors(const zinf::core::ModelGraph& g, TensorDtype dtype, const std::string& prefix) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<Tensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Tensor t{prefix + name, std::move(shape), std::vector<float>(size_t(n))};
    for (float& x : t.values) x = representable(normal(rng), dtype);
    out.push_back(std::move(t));
  };
  for (const auto& p : g.params) {
    if (p.name == "wte" || p.name == "wpe" || p.name == "lm_head") {
      add(p.name + ".weight", {p.rows, p.cols});
    } else if (p.name.find("ln_") != std::string::npos) {
      add(p.name + ".weight", {p.cols});
      add(p.name + ".bias", {p.cols});
    } else {
      add(p.name + ".weight", {p.cols, p.rows});
      add(p.name + ".bias", {p.rows});
    }
  }
  add("h.0.attn.bias", {1, 1, 4, 4});
  return out;
}

// Writes `tensors` as `shards` shard files and their index, as transformers lays a folder out.
void write_folder(const fs::path& dir, const std::vector<Tensor>& tensors, TensorDtype dtype, size_t shards) {
  fs::create_directories(dir);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (size_t s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards);
    std::vector<TensorToWrite> part;
    for (size_t i = s; i < tensors.size(); i += shards) {  // interleaved: shards need not follow group order
      part.push_back({tensors[i].name, tensors[i].shape, tensors[i].values.data()});
      index["weight_map"][tensors[i].name] = name;
    }
    write_safetensors((dir / name).string(), part, dtype, {{"format", "pt"}});
  }
  std::ofstream(dir / kHfIndexFile) << index.dump(2);
}

// The bytes of tensor `name` in safetensors file `path`.
std::string raw_bytes(const std::string& path, const std::string& name) {
  SafetensorsReader r(path);
  const TensorInfo& t = r.info(name);
  std::ifstream f(path, std::ios::binary);
  char len[8];
  f.read(len, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(len[i]);
  f.seekg(std::streamoff(8 + n + t.begin));
  std::string bytes(size_t(t.end - t.begin), '\0');
  f.read(bytes.data(), std::streamsize(bytes.size()));
  return bytes;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("sharded Hugging Face folders load and export bitwise in each dtype", "[hf_weights]") {
  const auto graph = tiny();
  for (TensorDtype dtype : {TensorDtype::F32, TensorDtype::F16, TensorDtype::BF16}) {
    const std::string prefix = dtype == TensorDtype::BF16 ? "transformer." : "";
    DYNAMIC_SECTION(to_string(dtype) << (prefix.empty() ? "" : " with the transformer. prefix")) {
      zinf::test::TempDir tmp("hf");
      const fs::path in = tmp.path / "in", out = tmp.path / "out";
      const auto tensors = hf_tensors(graph, dtype, prefix);
      write_folder(in, tensors, dtype, 3);

      std::ifstream in_index_file(in / kHfIndexFile);
      const auto in_index = nlohmann::json::parse(in_index_file);
      const uint64_t limit = 100000;
      save_gpt2_hf_folder(out.string(), graph, gpt2_safetensors_groups(in.string(), graph), {dtype, limit});

      const std::string index_text = zinf::core::read_bounded_file((out / kHfIndexFile).string(), 1 << 20, "index");
      const auto index = nlohmann::json::parse(index_text);
      CHECK(index_text == index.dump(2) + "\n");  // sorted keys, two-space indent, a final newline
      CHECK_FALSE(fs::exists(out / kHfSingleFile));
      std::map<std::string, uint64_t> shard_bytes;
      uint64_t total = 0;
      for (const Tensor& t : tensors) {
        const std::string name = t.name.substr(prefix.size());
        if (name == "h.0.attn.bias") {
          CHECK_FALSE(index["weight_map"].contains(name));  // a buffer, not a weight: not written back
          continue;
        }
        REQUIRE(index["weight_map"].contains(name));
        const std::string shard = index["weight_map"][name];
        const std::string before = raw_bytes((in / in_index["weight_map"][t.name].get<std::string>()).string(), t.name);
        CHECK(raw_bytes((out / shard).string(), name) == before);
        shard_bytes[shard] += before.size();
        total += before.size();
      }
      CHECK(index["metadata"]["total_size"] == total);
      CHECK(shard_bytes.size() > 2);
      size_t i = 0;
      for (const auto& [shard, bytes] : shard_bytes) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", ++i, shard_bytes.size());
        CHECK(shard == name);
        CHECK(bytes <= limit);
        CHECK(SafetensorsReader((out / shard).string()).metadata().at("format") == "pt");
      }
      const auto config = nlohmann::json::parse(zinf::core::read_bounded_file((out / "config.json").string(), 1 << 20, "config"));
      CHECK(config["model_type"] == "gpt2");
      CHECK(config["n_layer"] == 2);
      CHECK(config["n_embd"] == 64);
      CHECK(config["vocab_size"] == 256);
      CHECK(config["torch_dtype"] == (dtype == TensorDtype::F32 ? "float32" : dtype == TensorDtype::F16 ? "float16" : "bfloat16"));
      // What was exported loads to the same fp32 values.
      CHECK(load_gpt2_safetensors(out.string(), graph) == load_gpt2_safetensors(in.string(), graph));
    }
  }
}

TEST_CASE("a folder with one model.safetensors loads, and an export that fits one shard writes one", "[hf_weights]") {
  const auto graph = tiny();
  zinf::test::TempDir tmp("hf");
  const fs::path in = tmp.path / "in", out = tmp.path / "out";
  write_folder(in, hf_tensors(graph, TensorDtype::F16, ""), TensorDtype::F16, 2);
  // An earlier, sharded export into the same folder: its shards and index must not outlive this one.
  save_gpt2_hf_folder(out.string(), graph, gpt2_safetensors_groups(in.string(), graph), {TensorDtype::F16, 100000});
  REQUIRE(fs::exists(out / kHfIndexFile));
  save_gpt2_hf_folder(out.string(), graph, gpt2_safetensors_groups(in.string(), graph), {TensorDtype::F16});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"config.json", kHfSingleFile});
  CHECK(load_gpt2_safetensors(out.string(), graph) == load_gpt2_safetensors(in.string(), graph));

  // Exported in another dtype: values rounded the way that dtype rounds.
  const fs::path wide = tmp.path / "wide";
  save_gpt2_hf_folder(wide.string(), graph, gpt2_safetensors_groups(out.string(), graph), {TensorDtype::F32});
  CHECK(SafetensorsReader((wide / kHfSingleFile).string()).info("wte.weight").dtype == "F32");
  CHECK(load_gpt2_safetensors(wide.string(), graph) == load_gpt2_safetensors(in.string(), graph));
}

TEST_CASE("shard sizes read as transformers reads them", "[hf_weights]") {
  CHECK(parse_shard_size("5GB") == 5000000000ull);
  CHECK(parse_shard_size("2gib") == 2ull << 30);
  CHECK(parse_shard_size("500MB") == 500000000ull);
  CHECK(parse_shard_size("4096") == 4096);
  CHECK_THROWS_WITH(parse_shard_size("5 GB"), Contains("'5 GB'"));
  CHECK_THROWS_WITH(parse_shard_size("GB"), Contains("'GB'"));
  CHECK_THROWS_WITH(parse_shard_size("0MB"), Contains("zero"));
  CHECK(parse_tensor_dtype("fp16") == TensorDtype::F16);
  CHECK_THROWS_WITH(parse_tensor_dtype("f16"), Contains("'f16'"));
}

TEST_CASE("broken Hugging Face folders are refused naming the tensor or file", "[hf_weights]") {
  const auto graph = tiny();
  zinf::test::TempDir tmp("hf");
  const fs::path dir = tmp.path / "m";
  const auto tensors = hf_tensors(graph, TensorDtype::BF16, "");
  auto load = [&] { return message_of([&] { gpt2_safetensors_groups(dir.string(), graph); }); };
  auto edit_index = [&](const std::function<void(nlohmann::json&)>& edit) {
    std::ifstream f(dir / kHfIndexFile);
    auto j = nlohmann::json::parse(f);
    edit(j);
    std::ofstream(dir / kHfIndexFile) << j.dump(2);
  };
  write_folder(dir, tensors, TensorDtype::BF16, 3);
  REQUIRE(load() == "(no error)");

  SECTION("a shard the index names is not there") {
    fs::remove(dir / "model-00002-of-00003.safetensors");
    CHECK_THAT(load(), Contains("shard 'model-00002-of-00003.safetensors'") && Contains("is not in the folder"));
  }
  SECTION("the index maps a tensor to a shard that lacks it") {
    edit_index([](nlohmann::json& j) { j["weight_map"]["h.1.mlp.c_fc.bias"] = "model-00001-of-00003.safetensors"; });
    const std::string m = load();
    CHECK_THAT(m, Contains("tensor 'h.1.mlp.c_fc.bias'"));
    CHECK_THAT(m, Contains("model-00001-of-00003.safetensors"));
  }
  SECTION("a tensor in no shard at all") {
    edit_index([](nlohmann::json& j) { j["weight_map"]["h.9.attn.c_proj.weight"] = "model-00003-of-00003.safetensors"; });
    CHECK_THAT(load(), Contains("tensor 'h.9.attn.c_proj.weight' is in no shard"));
  }
  SECTION("a tensor in two shards") {
    std::vector<float> v(64, 0.5f);
    std::vector<TensorToWrite> extra = {{"ln_f.weight", {64}, v.data()}};
    write_safetensors((dir / "model-00004-of-00004.safetensors").string(), extra, TensorDtype::BF16);
    edit_index([](nlohmann::json& j) { j["weight_map"]["zz"] = "model-00004-of-00004.safetensors"; });
    CHECK_THAT(load(), Contains("tensor 'ln_f.weight' is in two shards"));
  }
  SECTION("a tensor the weight_map names twice") {
    std::ifstream f(dir / kHfIndexFile);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const std::string entry = "\"weight_map\": {";
    text.insert(text.find(entry) + entry.size(), "\"ln_f.bias\": \"model-00001-of-00003.safetensors\",");
    std::ofstream(dir / kHfIndexFile) << text;
    CHECK_THAT(load(), Contains("tensor 'ln_f.bias' is named twice"));
  }
  SECTION("a misshapen tensor") {
    auto bad = tensors;
    for (Tensor& t : bad)
      if (t.name == "h.1.attn.c_attn.weight") std::swap(t.shape[0], t.shape[1]);  // out x in, not Conv1D's in x out
    fs::remove_all(dir);
    write_folder(dir, bad, TensorDtype::BF16, 3);
    CHECK_THAT(load(), Contains("tensor 'h.1.attn.c_attn.weight' has shape [192, 64]") && Contains("needs [64, 192]"));
  }
  SECTION("an extra tensor") {
    auto more = tensors;
    more.push_back({"h.0.mlp.gate_proj.weight", {2}, {1.0f, 2.0f}});
    fs::remove_all(dir);
    write_folder(dir, more, TensorDtype::BF16, 3);
    CHECK_THAT(load(), Contains("tensor 'h.0.mlp.gate_proj.weight' is not part of model gpt-tiny"));
  }
  SECTION("a missing tensor") {
    auto fewer = tensors;
    fewer.erase(std::remove_if(fewer.begin(), fewer.end(), [](const Tensor& t) { return t.name == "ln_f.bias"; }),
                fewer.end());
    fs::remove_all(dir);
    write_folder(dir, fewer, TensorDtype::BF16, 3);
    CHECK_THAT(load(), Contains("tensor 'ln_f.bias' is missing"));
  }
  SECTION("a tensor both with and without the transformer. prefix") {
    auto both = tensors;
    both.push_back({"transformer.wte.weight", tensors[0].shape, tensors[0].values});
    fs::remove_all(dir);
    write_folder(dir, both, TensorDtype::BF16, 3);
    CHECK_THAT(load(), Contains("'wte.weight' is there both with and without"));
  }
  SECTION("a folder with no weights") {
    fs::remove_all(dir);
    fs::create_directories(dir);
    CHECK_THAT(load(), Contains(dir.string()) && Contains("neither model.safetensors nor"));
  }
}

TEST_CASE("a Trainer with its states on NVMe starts from a sharded folder and exports it bitwise", "[hf_weights]") {
  const auto graph = tiny();
  zinf::test::TempDir tmp("hf");
  const fs::path in = tmp.path / "in", out = tmp.path / "out";
  const auto tensors = hf_tensors(graph, TensorDtype::BF16, "transformer.");
  write_folder(in, tensors, TensorDtype::BF16, 4);

  zinf::engine::TrainerOptions o;
  o.model = zinf::core::load_model_spec(zinf::test::source("models/gpt-tiny.yaml"));
  o.hw = zinf::core::load_hwprofile(zinf::test::source("hwprofiles/cpu-dev.yaml"));
  o.config = zinf::core::parse_run_config(
      "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {lr: 1.0e-3, sub_group_size: 20000}\n", "test");
  o.nvme_dir = (tmp.path / "nvme").string();
  fs::create_directories(o.nvme_dir);
  o.init_from = in.string();
  zinf::engine::LocalCollectives comm;
  zinf::engine::Trainer trainer(o, comm);
  trainer.export_weights(export_target(out.string(), "bf16", "60KB"));

  std::ifstream in_index_file(in / kHfIndexFile), out_index_file(out / kHfIndexFile);
  const auto in_index = nlohmann::json::parse(in_index_file), out_index = nlohmann::json::parse(out_index_file);
  CHECK(out_index["weight_map"].size() + 1 == tensors.size());  // all but the mask buffer
  for (const Tensor& t : tensors) {
    const std::string name = t.name.substr(std::string("transformer.").size());
    if (name == "h.0.attn.bias") continue;
    INFO(name);
    REQUIRE(out_index["weight_map"].contains(name));
    CHECK(raw_bytes((out / out_index["weight_map"][name].get<std::string>()).string(), name) ==
          raw_bytes((in / in_index["weight_map"][t.name].get<std::string>()).string(), t.name));
  }
}

namespace {

// Fails the n-th write of a shard with ENOSPC, as a disk that fills during an export would.
class FullDiskEnv final : public zinf::test::ForwardingIoEnv {
 public:
  explicit FullDiskEnv(int fail_at) : left_(fail_at) {}
  int64_t pwrite(int fd, const void* d, uint64_t n, uint64_t o) override {
    if (--left_ == 0) return -ENOSPC;
    return ForwardingIoEnv::pwrite(fd, d, n, o);
  }

 private:
  int left_;
};

}  // namespace

TEST_CASE("a disk that fills while exporting leaves the earlier export whole and no temporary file", "[hf_weights]") {
  const auto graph = tiny();
  zinf::test::TempDir tmp("hf");
  const fs::path in = tmp.path / "in", out = tmp.path / "out";
  write_folder(in, hf_tensors(graph, TensorDtype::F32, ""), TensorDtype::F32, 2);
  save_gpt2_hf_folder(out.string(), graph, gpt2_safetensors_groups(in.string(), graph), {TensorDtype::F32, 100000});
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(out))
    before[e.path().filename().string()] = zinf::core::read_bounded_file(e.path().string(), 1 << 20, "export");

  FullDiskEnv full(12);  // past the export's first shard
  const std::string m = message_of([&] {
    save_gpt2_hf_folder(out.string(), graph, gpt2_safetensors_groups(in.string(), graph), {TensorDtype::BF16, 50000},
                        full);
  });
  CHECK_THAT(m, Contains("export") && Contains(".safetensors.tmp") && Contains("No space left"));
  CHECK_THAT(m, !Contains("model-00001-of"));  // a shard written before it is set aside too
  std::map<std::string, std::string> after;
  for (const auto& e : fs::directory_iterator(out))
    after[e.path().filename().string()] = zinf::core::read_bounded_file(e.path().string(), 1 << 20, "export");
  CHECK(after == before);
}
