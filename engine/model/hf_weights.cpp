#include "engine/model/hf_weights.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "formats/bounded_input.hpp"
#include "core/errors.hpp"
#include "engine/io/output_file.hpp"
#include "engine/io/safe_files.hpp"

namespace zinf::engine {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxIndexBytes = 100u << 20;  // as large as a safetensors header may be

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw SafetensorsError("safetensors: " + path + ": " + why);
}

std::string shard_name(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

}  // namespace

WeightFiles::WeightFiles(const std::string& path) : path_(path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    files_.emplace_back(path);
  } else if (fs::exists(fs::path(path) / kHfIndexFile, ec)) {
    open_index(path);
    return;
  } else if (fs::exists(fs::path(path) / kHfSingleFile, ec)) {
    files_.emplace_back((fs::path(path) / kHfSingleFile).string());
  } else {
    fail(path, std::string("the folder holds neither ") + kHfSingleFile + " nor " + kHfIndexFile);
  }
  for (const auto& entry : files_[0].tensors()) owner_[entry.first] = 0;
}

void WeightFiles::open_index(const std::string& dir) {
  const std::string index = (fs::path(dir) / kHfIndexFile).string();
  nlohmann::json j;
  // JSON keeps the last of two equal keys: a tensor the weight_map names twice is found here.
  std::string top_key, named_twice;
  std::set<std::string> mapped;
  const nlohmann::json::parser_callback_t watch = [&](int depth, nlohmann::json::parse_event_t event,
                                                      nlohmann::json& parsed) {
    if (event != nlohmann::json::parse_event_t::key || !parsed.is_string()) return true;
    if (depth == 1) top_key = parsed.get<std::string>();
    if (depth == 2 && top_key == "weight_map" && !mapped.insert(parsed.get<std::string>()).second && named_twice.empty())
      named_twice = parsed.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(core::read_bounded_file(index, kMaxIndexBytes, "safetensors index"), watch);
  } catch (const core::ConfigError& e) {
    throw SafetensorsError(std::string("safetensors: ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    fail(index, std::string("not valid JSON: ") + e.what());
  }
  if (!named_twice.empty()) fail(index, "tensor '" + named_twice + "' is named twice in the weight_map");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(index, "needs a 'weight_map' object (tensor name -> shard file)");
  std::map<std::string, std::string> weight_map;
  std::map<std::string, size_t> shard_index;  // shard file -> index in files_
  const nlohmann::json& map = j["weight_map"];
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string& tensor = it.key();
    const nlohmann::json& shard = it.value();
    if (!shard.is_string()) fail(index, "weight_map entry '" + tensor + "' is not a file name");
    const std::string file = shard.get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos)
      fail(index, "weight_map entry '" + tensor + "' names '" + file + "', not a file in the folder");
    weight_map[tensor] = file;
    if (shard_index.count(file)) continue;
    const std::string shard_path = (fs::path(dir) / file).string();
    std::error_code ec;
    if (!fs::exists(shard_path, ec))
      fail(index, "shard '" + file + "' (holding tensor '" + tensor + "') is not in the folder");
    shard_index[file] = files_.size();
    files_.emplace_back(shard_path);
  }
  for (size_t f = 0; f < files_.size(); ++f)
    for (const auto& entry : files_[f].tensors()) {
      const std::string& name = entry.first;
      auto [it, fresh] = owner_.emplace(name, f);
      if (!fresh)
        fail(index, "tensor '" + name + "' is in two shards, " + files_[it->second].path() + " and " + files_[f].path());
    }
  for (const auto& [tensor, file] : weight_map) {
    auto it = owner_.find(tensor);
    if (it == owner_.end())
      fail(index, "tensor '" + tensor + "' is in no shard (the weight_map names " + file + ", which lacks it)");
    if (it->second != shard_index.at(file))
      fail(index, "tensor '" + tensor + "' is in " + files_[it->second].path() + ", the weight_map names " + file);
  }
  for (const auto& [tensor, f] : owner_)
    if (!weight_map.count(tensor))
      fail(files_[f].path(), "tensor '" + tensor + "' is not in " + index + "'s weight_map");
}

const TensorInfo& WeightFiles::info(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail(path_, "tensor '" + name + "' is missing");
  return files_[it->second].info(name);
}

const std::string& WeightFiles::file_of(const std::string& name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail(path_, "tensor '" + name + "' is missing");
  return files_[it->second].path();
}

std::vector<std::string> WeightFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : owner_) out.push_back(name);
  return out;
}

void WeightFiles::read_f32(const std::string& name, std::vector<float>& out) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail(path_, "tensor '" + name + "' is missing");
  files_[it->second].read_f32(name, out);
}

uint64_t parse_shard_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  for (char& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, uint64_t> units = {
      {"", 1},          {"B", 1},           {"KB", 1000},      {"MB", 1000000}, {"GB", 1000000000},
      {"KIB", 1 << 10}, {"MIB", 1 << 20},   {"GIB", 1u << 30}};
  auto u = units.find(unit);
  if (digits == 0 || digits > 15 || u == units.end())
    throw SafetensorsError("shard size '" + text + "' is not a count of bytes such as 5GB, 500MB or 2GiB");
  const uint64_t count = std::stoull(text.substr(0, digits));
  if (count > UINT64_MAX / u->second) throw SafetensorsError("shard size '" + text + "' is too large");
  const uint64_t bytes = count * u->second;
  if (bytes == 0) throw SafetensorsError("shard size '" + text + "' is zero");
  return bytes;
}

namespace {

// One shard at a time, written to <name>.tmp through the project's checked file calls and fsynced;
// the shards are renamed into place only when every one is written, so a write that fails (a full
// disk) leaves the folder's earlier export whole and no temporary file behind.
class ShardWriter {
 public:
  ShardWriter(IoEnv& env, std::string dir, std::string who) : env_(env), dir_(std::move(dir)), who_(std::move(who)) {}
  ~ShardWriter() {
    if (fd_ >= 0) env_.close(fd_);
    for (const auto& names : written_) env_.remove(names.first);
  }
  void open(const std::string& name, const std::string& header) {
    const std::string path = dir_ + "/" + name, tmp = path + ".tmp";
    const int r = env_.remove(tmp);  // a leftover of a crash; O_EXCL refuses anything put there since
    if (r < 0 && r != -ENOENT) throw FileError(who_, "remove", tmp, -r);
    fd_ = open_own_file(env_, tmp, O_WRONLY | O_CREAT | O_EXCL, 0644, who_);
    written_.emplace_back(tmp, path);
    offset_ = 0;
    write(header.data(), header.size());
  }
  void write(const char* data, size_t bytes) {
    while (bytes > 0) {
      const int64_t w = env_.pwrite(fd_, data, bytes, offset_);
      if (w <= 0) throw FileError(who_, "write", written_.back().first, w < 0 ? int(-w) : EIO);
      data += w, bytes -= size_t(w), offset_ += uint64_t(w);
    }
  }
  void close() {
    const std::string& tmp = written_.back().first;
    fsync_checked(env_, fd_, tmp, who_);
    const int r = env_.close(std::exchange(fd_, -1));
    if (r < 0) throw FileError(who_, "close", tmp, -r);
  }
  void rename_all() {
    for (auto it = written_.begin(); it != written_.end(); it = written_.erase(it)) {
      const int r = env_.rename(it->first, it->second);
      if (r < 0) throw FileError(who_, "rename " + it->first + " to", it->second, -r);
    }
  }

 private:
  IoEnv& env_;
  std::string dir_, who_;
  std::vector<std::pair<std::string, std::string>> written_;  // temporary name, final name
  int fd_ = -1;
  uint64_t offset_ = 0;
};

// Removes what an earlier export left that this one did not write: its single file or index, or
// shards of another count, so the folder reads as this export alone.
void remove_stale(IoEnv& env, const std::string& dir, const std::vector<std::string>& written, const std::string& who) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool ours = name == kHfSingleFile || name == kHfIndexFile ||
                      (name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
                       name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0);
    if (!ours || std::find(written.begin(), written.end(), name) != written.end()) continue;
    const int r = env.remove(entry.path().string());
    if (r < 0 && r != -ENOENT) throw FileError(who, "remove", entry.path().string(), -r);
  }
}

// The config.json transformers needs beside the weights to build the same GPT-2: the engine's
// GELU is the tanh form ("gelu_new") and its LayerNorm epsilon 1e-5; dropout is off.
std::string gpt2_hf_config(const core::ModelSpec& spec, TensorDtype dtype) {
  const char* torch_dtype = dtype == TensorDtype::F32 ? "float32" : dtype == TensorDtype::BF16 ? "bfloat16" : "float16";
  const nlohmann::json config = {{"architectures", nlohmann::json::array({"GPT2LMHeadModel"})},
                                 {"model_type", "gpt2"},
                                 {"activation_function", "gelu_new"},
                                 {"n_embd", spec.hidden},
                                 {"n_head", spec.heads},
                                 {"n_layer", spec.layers},
                                 {"n_inner", spec.ffn_hidden()},
                                 {"n_positions", spec.seq},
                                 {"n_ctx", spec.seq},
                                 {"vocab_size", spec.vocab},
                                 {"layer_norm_epsilon", 1e-5},
                                 {"resid_pdrop", 0.0},
                                 {"embd_pdrop", 0.0},
                                 {"attn_pdrop", 0.0},
                                 {"tie_word_embeddings", spec.tied_embeddings},
                                 {"torch_dtype", torch_dtype}};
  return config.dump(2) + "\n";
}

// LlamaForCausalLM's config.json for the engine's Llama: its shapes, rotary base and RMSNorm
// epsilon, no biases, and as many positions as the model trained on.
std::string llama_hf_config(const core::ModelSpec& spec, TensorDtype dtype) {
  const char* torch_dtype = dtype == TensorDtype::F32 ? "float32" : dtype == TensorDtype::BF16 ? "bfloat16" : "float16";
  const nlohmann::json config = {{"architectures", nlohmann::json::array({"LlamaForCausalLM"})},
                                 {"model_type", "llama"},
                                 {"hidden_act", "silu"},
                                 {"hidden_size", spec.hidden},
                                 {"intermediate_size", spec.ffn_hidden()},
                                 {"num_hidden_layers", spec.layers},
                                 {"num_attention_heads", spec.heads},
                                 {"num_key_value_heads", spec.kv_head_count()},
                                 {"head_dim", spec.head_dim()},
                                 {"vocab_size", spec.vocab},
                                 {"max_position_embeddings", spec.seq},
                                 {"rms_norm_eps", spec.norm_eps},
                                 {"rope_theta", spec.rope_theta},
                                 {"attention_bias", false},
                                 {"mlp_bias", false},
                                 {"attention_dropout", 0.0},
                                 {"tie_word_embeddings", spec.tied_embeddings},
                                 {"torch_dtype", torch_dtype}};
  return config.dump(2) + "\n";
}

}  // namespace

void save_gpt2_hf_folder(const std::string& dir, const core::ModelGraph& graph, const GroupSource& group,
                         const HfExport& how, IoEnv& env) {
  const std::string who = "export";
  ensure_own_directory(env, dir, who);
  // Shards filled in order: a tensor that would take the shard past the limit starts the next one.
  const std::vector<TensorToWrite> layout = gpt2_hf_layout(graph);
  std::vector<std::vector<TensorToWrite>> shards(1);
  std::vector<size_t> shard_of;
  uint64_t in_shard = 0, total = 0;
  for (const TensorToWrite& t : layout) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const uint64_t bytes = uint64_t(numel * element_bytes(how.dtype));
    if (!shards.back().empty() && in_shard + bytes > how.shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    shard_of.push_back(shards.size() - 1);
    in_shard += bytes, total += bytes;
  }
  const size_t n = shards.size();
  std::vector<std::string> names;
  for (size_t s = 0; s < n; ++s) names.push_back(n == 1 ? kHfSingleFile : shard_name(s, n));

  ShardWriter out(env, dir, who);
  size_t current = 0;
  out.open(names[0], safetensors_header(shards[0], how.dtype, {{"format", "pt"}}));
  stream_gpt2_tensors(dir, graph, group, how.dtype, [&](size_t tensor, const char* data, size_t bytes) {
    if (shard_of[tensor] != current) {
      out.close();
      current = shard_of[tensor];
      out.open(names[current], safetensors_header(shards[current], how.dtype, {{"format", "pt"}}));
    }
    out.write(data, bytes);
  });
  out.close();
  out.rename_all();
  if (n > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", nlohmann::json::object()}};
    for (size_t i = 0; i < layout.size(); ++i) index["weight_map"][layout[i].name] = names[shard_of[i]];
    names.push_back(kHfIndexFile);
    // As transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n".
    write_output_file(env, dir + "/" + kHfIndexFile, index.dump(2) + "\n", who);
  }
  const bool llama = graph.spec.family == core::Family::Llama;
  write_output_file(env, dir + "/config.json",
                    llama ? llama_hf_config(graph.spec, how.dtype) : gpt2_hf_config(graph.spec, how.dtype), who);
  remove_stale(env, dir, names, who);
  fsync_directory(env, dir, who);
}

ExportTarget export_target(const std::string& path, const std::string& dtype, const std::string& shard_size) {
  ExportTarget t{path, {}, false};
  if (!dtype.empty()) t.how.dtype = parse_tensor_dtype(dtype);
  if (!shard_size.empty()) t.how.shard_bytes = parse_shard_size(shard_size);
  std::error_code ec;
  t.folder = !shard_size.empty() || (!path.empty() && path.back() == '/') || fs::is_directory(path, ec);
  return t;
}

void save_gpt2_export(const ExportTarget& target, const core::ModelGraph& graph, const GroupSource& group) {
  if (target.folder)
    save_gpt2_hf_folder(target.path, graph, group, target.how);
  else
    save_gpt2_safetensors(target.path, graph, group, target.how.dtype);
}

}  // namespace zinf::engine
