#include "engine/model/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "formats/bounded_input.hpp"
#include "core/errors.hpp"
#include "engine/bf16.hpp"
#include "engine/fp16.hpp"
#include "engine/io/output_file.hpp"
#include "engine/model/hf_weights.hpp"

namespace zinf::engine {

namespace {

constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit on the JSON header

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw SafetensorsError("safetensors: " + path + ": " + why);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

const char* to_string(TensorDtype d) {
  switch (d) {
    case TensorDtype::F32: return "F32";
    case TensorDtype::BF16: return "BF16";
    case TensorDtype::F16: return "F16";
  }
  return "?";
}

int64_t element_bytes(TensorDtype d) { return d == TensorDtype::F32 ? 4 : 2; }

TensorDtype parse_tensor_dtype(const std::string& text) {
  if (text == "fp32") return TensorDtype::F32;
  if (text == "bf16") return TensorDtype::BF16;
  if (text == "fp16") return TensorDtype::F16;
  throw SafetensorsError("safetensors: dtype '" + text + "' is not one of fp32, bf16, fp16");
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  // A FIFO or device would block or never end: only a regular file is opened.
  try {
    core::require_regular_file(path_, "safetensors file");
  } catch (const core::ConfigError& e) {
    throw SafetensorsError(std::string("safetensors: ") + e.what());
  }
  std::ifstream f(path_, std::ios::binary);
  if (!f) fail(path_, std::string("cannot open: ") + std::strerror(errno));
  f.seekg(0, std::ios::end);
  const uint64_t file_size = uint64_t(f.tellg());
  f.seekg(0);
  unsigned char len_bytes[8];
  if (file_size < 8 || !f.read(reinterpret_cast<char*>(len_bytes), 8)) fail(path_, "shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxHeader || n > file_size - 8)
    fail(path_, "header length " + std::to_string(n) + " is larger than the file (" + std::to_string(file_size) +
                    " bytes) allows");
  std::string header(size_t(n), '\0');
  if (!f.read(header.data(), std::streamsize(n))) fail(path_, "cannot read the header");
  data_offset_ = 8 + n;
  const uint64_t data_size = file_size - data_offset_;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail(path_, std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(path_, "header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path_, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail(path_, where + "needs dtype, shape and data_offsets");
    TensorInfo t;
    if (!v["dtype"].is_string()) fail(path_, where + "dtype is not a string");
    t.dtype = v["dtype"].get<std::string>();
    const int64_t esize = dtype_bytes(t.dtype);
    if (esize == 0) fail(path_, where + "unknown dtype " + t.dtype);
    if (!v["shape"].is_array()) fail(path_, where + "shape is not an array");
    // The element count and byte size are products of numbers the file gives: each step is
    // checked, since a wrapped product could pass the size check below and read past the data.
    int64_t numel = 1, bytes = 0;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(path_, where + "shape has a bad dimension");
      t.shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(numel, t.shape.back(), &numel))
        fail(path_, where + "shape " + shape_str(t.shape) + "... has more elements than a 64-bit count holds");
    }
    if (__builtin_mul_overflow(numel, esize, &bytes))
      fail(path_, where + "shape " + shape_str(t.shape) + " " + t.dtype + " needs more bytes than a 64-bit size holds");
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path_, where + "data_offsets must be two non-negative integers");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      fail(path_, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                      ") fall outside the " + std::to_string(data_size) + "-byte data section");
    if (t.end - t.begin != uint64_t(bytes))
      fail(path_, where + shape_str(t.shape) + " " + t.dtype + " needs " + std::to_string(bytes) +
                      " bytes, data_offsets give " + std::to_string(t.end - t.begin));
    tensors_[name] = std::move(t);
  }
}

const TensorInfo& SafetensorsReader::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail(path_, "tensor '" + name + "' is missing");
  return it->second;
}

std::vector<float> SafetensorsReader::read_f32(const std::string& name) const {
  std::vector<float> out;
  read_f32(name, out);
  return out;
}

void SafetensorsReader::read_f32(const std::string& name, std::vector<float>& out) const {
  const TensorInfo& t = info(name);
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    fail(path_, "tensor '" + name + "': dtype " + t.dtype + " is not supported (F32, BF16 or F16)");
  std::ifstream f(path_, std::ios::binary);
  f.seekg(std::streamoff(data_offset_ + t.begin));
  auto read = [&](char* into, uint64_t bytes) {
    if (!f || !f.read(into, std::streamsize(bytes))) fail(path_, "tensor '" + name + "': read failed");
  };
  const uint64_t bytes = t.end - t.begin;
  if (t.dtype == "F32") {
    out.resize(size_t(bytes / 4));
    read(reinterpret_cast<char*>(out.data()), bytes);
    return;
  }
  out.resize(size_t(bytes / 2));
  constexpr size_t kChunk = 1 << 16;  // elements converted per read
  std::vector<uint16_t> raw(std::min(out.size(), kChunk));
  for (size_t begin = 0; begin < out.size(); begin += kChunk) {
    const size_t count = std::min(kChunk, out.size() - begin);
    read(reinterpret_cast<char*>(raw.data()), count * 2);
    if (t.dtype == "BF16")
      for (size_t i = 0; i < count; ++i) out[begin + i] = to_float(bf16{raw[i]});
    else
      for (size_t i = 0; i < count; ++i) out[begin + i] = to_float(fp16{raw[i]});
  }
}

std::string safetensors_header(std::span<const TensorToWrite> tensors, TensorDtype dtype,
                               const std::map<std::string, std::string>& metadata) {
  const int64_t esize = element_bytes(dtype);
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    header[t.name] = {{"dtype", to_string(dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + uint64_t(numel * esize)}}};
    offset += uint64_t(numel * esize);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned

  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  return bytes + h;
}

void write_tensor_data(const ByteSink& sink, const float* data, int64_t n, TensorDtype dtype) {
  if (dtype == TensorDtype::F32) {
    sink(reinterpret_cast<const char*>(data), size_t(n) * 4);
    return;
  }
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint16_t> chunk(size_t(std::min(n, kChunk)));
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t count = std::min(kChunk, n - begin);
    if (dtype == TensorDtype::BF16)
      for (int64_t i = 0; i < count; ++i) chunk[size_t(i)] = to_bf16(data[begin + i]).bits;
    else
      for (int64_t i = 0; i < count; ++i) chunk[size_t(i)] = to_fp16(data[begin + i]).bits;
    sink(reinterpret_cast<const char*>(chunk.data()), size_t(count) * 2);
  }
}

std::string encode_safetensors(std::span<const TensorToWrite> tensors, TensorDtype dtype,
                               const std::map<std::string, std::string>& metadata) {
  std::string bytes = safetensors_header(tensors, dtype, metadata);
  const ByteSink append = [&bytes](const char* p, size_t n) { bytes.append(p, n); };
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    write_tensor_data(append, t.data, numel, dtype);
  }
  return bytes;
}

namespace {

// Writes `path` through `body` by the one writer (engine/io/output_file.hpp): a temporary beside
// it, fsynced and renamed over it; a crash, a failed write or an exception from `body` leaves the
// old file (or none) and no temporary.
void write_file_atomically(const std::string& path, const std::function<void(const ByteSink&)>& body) {
  OutputFile out(default_io_env(), path, "safetensors");
  body([&out](const char* p, size_t n) { out.write(p, n); });
  out.commit();
}

}  // namespace

void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors, TensorDtype dtype,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomically(path, [&](const ByteSink& sink) {
    const std::string header = safetensors_header(tensors, dtype, metadata);
    sink(header.data(), header.size());
    for (const TensorToWrite& t : tensors) {
      int64_t numel = 1;
      for (int64_t d : t.shape) numel *= d;
      write_tensor_data(sink, t.data, numel, dtype);
    }
  });
}

// ---- GPT-2 --------------------------------------------------------------------------------

namespace {

enum class GroupKind { Embedding, LayerNorm, Conv1D, Linear, RmsNorm };

bool is_llama(const core::ModelGraph& graph) { return graph.spec.family == core::Family::Llama; }

// The Llama family's groups (models/decoder.cpp names them below the model): the embedding,
// nn.Linear weights (out x in, no bias) and RMSNorm weights (one row).
GroupKind kind_of(const core::ModelGraph& graph, const core::ParamGroup& g) {
  if (is_llama(graph)) return g.name == "embed_tokens" ? GroupKind::Embedding : g.rows == 1 ? GroupKind::RmsNorm : GroupKind::Linear;
  if (g.name == "wte" || g.name == "wpe") return GroupKind::Embedding;
  if (g.name == "lm_head") return GroupKind::Linear;  // nn.Linear: out x in, no bias
  if (g.name.find("ln_") != std::string::npos) return GroupKind::LayerNorm;
  return GroupKind::Conv1D;
}

// Tensors Hugging Face files carry that the model does not read: the causal-mask buffers older
// transformers saved, and the head when it is tied to wte.
bool ignorable(const std::string& name, bool tied_head, bool llama) {
  auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (tied_head && name == "lm_head.weight") return true;
  // Older Llama checkpoints saved the rotary embedding's inv_freq buffer; the engine computes it.
  if (llama) return ends_with(".rotary_emb.inv_freq");
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}

// A group's tensor name in transformers' files, less ".weight"/".bias": GPT-2's are the group's
// names; LlamaForCausalLM's sit below "model." but for its head.
std::string hf_base(const core::ModelGraph& graph, const core::ParamGroup& g) {
  return is_llama(graph) && g.name != "lm_head" ? "model." + g.name : g.name;
}

}  // namespace

std::vector<TensorToWrite> gpt2_hf_layout(const core::ModelGraph& graph) {
  std::vector<TensorToWrite> layout;
  for (const core::ParamGroup& g : graph.params) {
    const std::string base = hf_base(graph, g);
    switch (kind_of(graph, g)) {
      case GroupKind::Embedding:
      case GroupKind::Linear: layout.push_back({base + ".weight", {g.rows, g.cols}, nullptr}); break;
      case GroupKind::RmsNorm: layout.push_back({base + ".weight", {g.cols}, nullptr}); break;
      case GroupKind::LayerNorm:
        layout.push_back({g.name + ".weight", {g.cols}, nullptr});
        layout.push_back({g.name + ".bias", {g.cols}, nullptr});
        break;
      case GroupKind::Conv1D:  // Hugging Face's Conv1D: in x out
        layout.push_back({g.name + ".weight", {g.cols, g.rows}, nullptr});
        layout.push_back({g.name + ".bias", {g.rows}, nullptr});
        break;
    }
  }
  return layout;
}

GroupSource gpt2_safetensors_groups(const std::string& path, const core::ModelGraph& graph) {
  auto files = std::make_shared<const WeightFiles>(path);
  // Every tensor the model reads is found and its shape checked, and every other tensor refused,
  // before the first is read: a bad file fails before any state is written.
  auto keys = std::make_shared<std::map<std::string, std::string>>();  // Hugging Face name -> name in the files
  std::set<std::string> used;
  const std::string& model = graph.spec.name;
  const bool llama = is_llama(graph);
  for (const TensorToWrite& t : gpt2_hf_layout(graph)) {
    const bool bare = files->has(t.name), prefixed = !llama && files->has("transformer." + t.name);
    if (bare && prefixed)
      fail(path, "tensor '" + t.name + "' is there both with and without the 'transformer.' prefix");
    if (!bare && !prefixed) fail(path, "tensor '" + t.name + "' is missing (model " + model + ")");
    const std::string key = bare ? t.name : "transformer." + t.name;
    const std::vector<int64_t>& have = files->info(key).shape;
    // The file may hold more positions than the model uses (GPT-2 has 1024).
    const bool fits = t.name == "wpe.weight"
                          ? have.size() == 2 && have[1] == t.shape[1] && have[0] >= t.shape[0]
                          : have == t.shape;
    if (!fits)
      fail(files->file_of(key), "tensor '" + key + "' has shape " + shape_str(have) + ", model " + model + " needs " +
                                    (t.name == "wpe.weight" ? "[>= " + std::to_string(t.shape[0]) + ", " +
                                                                  std::to_string(t.shape[1]) + "]"
                                                            : shape_str(t.shape)));
    (*keys)[t.name] = key;
    used.insert(key);
  }
  const bool tied_head = std::none_of(graph.params.begin(), graph.params.end(),
                                      [](const core::ParamGroup& g) { return g.name == "lm_head"; });
  for (const std::string& name : files->names()) {
    const std::string bare = !llama && name.rfind("transformer.", 0) == 0 ? name.substr(12) : name;
    if (!used.count(name) && !ignorable(bare, tied_head, llama))
      fail(files->file_of(name), "tensor '" + name + "' is not part of model " + model + " (" +
                                     (llama ? "Llama" : "GPT-2") + ")");
  }
  return [files, keys, &graph](int32_t group, std::vector<float>& v) {
    auto load = [&](const std::string& name) {
      std::vector<float> out;
      files->read_f32(keys->at(name), out);
      return out;
    };
    const core::ParamGroup& g = graph.params.at(size_t(group));
    v.assign(size_t(g.numel), 0.0f);
    const std::string base = hf_base(graph, g);
    switch (kind_of(graph, g)) {
      case GroupKind::RmsNorm: v = load(base + ".weight"); break;
      case GroupKind::Embedding: {
        auto all = load(base + ".weight");  // wpe may hold more rows: its first ones are used
        std::copy(all.begin(), all.begin() + g.rows * g.cols, v.begin());
        break;
      }
      case GroupKind::LayerNorm: {
        auto w = load(g.name + ".weight"), b = load(g.name + ".bias");
        std::copy(w.begin(), w.end(), v.begin());
        std::copy(b.begin(), b.end(), v.begin() + g.cols);
        break;
      }
      case GroupKind::Conv1D: {
        auto w = load(g.name + ".weight");  // in x out
        auto b = load(g.name + ".bias");
        for (int64_t o = 0; o < g.rows; ++o)
          for (int64_t i = 0; i < g.cols; ++i) v[size_t(o * g.cols + i)] = w[size_t(i * g.rows + o)];
        std::copy(b.begin(), b.end(), v.begin() + g.rows * g.cols);
        break;
      }
      case GroupKind::Linear: v = load(base + ".weight"); break;
    }
  };
}

Gpt2Params load_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph) {
  const GroupSource groups = gpt2_safetensors_groups(path, graph);
  Gpt2Params p(graph.params.size());
  for (const core::ParamGroup& g : graph.params) groups(g.id, p[size_t(g.id)]);
  return p;
}

void save_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph, const Gpt2Params& params,
                           TensorDtype dtype) {
  if (params.size() != graph.params.size())
    fail(path, "model " + graph.spec.name + " has " + std::to_string(graph.params.size()) +
                   " parameter groups, got " + std::to_string(params.size()));
  save_gpt2_safetensors(path, graph, [&params](int32_t g, std::vector<float>& out) { out = params[size_t(g)]; }, dtype);
}

void stream_gpt2_tensors(const std::string& path, const core::ModelGraph& graph, const GroupSource& group,
                         TensorDtype dtype, const TensorSink& sink) {
  size_t index = 0;  // the tensor of gpt2_hf_layout being sent
  auto send = [&](const float* data, int64_t n) {
    write_tensor_data([&](const char* p, size_t bytes) { sink(index, p, bytes); }, data, n, dtype);
  };
  std::vector<float> v, columns;
  for (const core::ParamGroup& g : graph.params) {
    group(g.id, v);
    if (int64_t(v.size()) != g.numel)
      fail(path, "parameter group " + g.name + " has " + std::to_string(v.size()) + " elements, expected " +
                     std::to_string(g.numel));
    switch (kind_of(graph, g)) {
      case GroupKind::Embedding:
      case GroupKind::Linear:
      case GroupKind::RmsNorm:
        send(v.data(), g.numel);
        ++index;
        break;
      case GroupKind::LayerNorm:
        send(v.data(), g.cols);
        ++index;
        send(v.data() + g.cols, g.cols);
        ++index;
        break;
      case GroupKind::Conv1D: {
        // HF's in x out order, transposed a bounded band of input columns at a time.
        const int64_t band = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(g.rows, 1));
        columns.resize(size_t(std::min(band, g.cols) * g.rows));
        for (int64_t i0 = 0; i0 < g.cols; i0 += band) {
          const int64_t i1 = std::min(g.cols, i0 + band);
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t o = 0; o < g.rows; ++o) columns[size_t((i - i0) * g.rows + o)] = v[size_t(o * g.cols + i)];
          send(columns.data(), (i1 - i0) * g.rows);
        }
        ++index;
        send(v.data() + g.rows * g.cols, g.rows);
        ++index;
        break;
      }
    }
  }
}

void save_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph, const GroupSource& group,
                           TensorDtype dtype) {
  const std::vector<TensorToWrite> layout = gpt2_hf_layout(graph);
  write_file_atomically(path, [&](const ByteSink& sink) {
    const std::string header = safetensors_header(layout, dtype, {{"format", "pt"}});
    sink(header.data(), header.size());
    stream_gpt2_tensors(path, graph, group, dtype, [&sink](size_t, const char* p, size_t n) { sink(p, n); });
  });
}

}  // namespace zinf::engine
