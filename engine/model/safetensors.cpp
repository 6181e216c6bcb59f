#include "engine/model/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/bf16.hpp"

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

const char* to_string(TensorDtype d) { return d == TensorDtype::F32 ? "F32" : "BF16"; }

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
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
    int64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) fail(path_, where + "shape has a bad dimension");
      t.shape.push_back(d.get<int64_t>());
      numel *= t.shape.back();
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(path_, where + "data_offsets must be two non-negative integers");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      fail(path_, where + "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                      ") fall outside the " + std::to_string(data_size) + "-byte data section");
    if (t.end - t.begin != uint64_t(numel * esize))
      fail(path_, where + shape_str(t.shape) + " " + t.dtype + " needs " + std::to_string(numel * esize) +
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
  const TensorInfo& t = info(name);
  if (t.dtype != "F32" && t.dtype != "BF16")
    fail(path_, "tensor '" + name + "': dtype " + t.dtype + " is not supported (F32 or BF16)");
  std::ifstream f(path_, std::ios::binary);
  std::string raw(size_t(t.end - t.begin), '\0');
  f.seekg(std::streamoff(data_offset_ + t.begin));
  if (!f || !f.read(raw.data(), std::streamsize(raw.size()))) fail(path_, "tensor '" + name + "': read failed");
  std::vector<float> out;
  if (t.dtype == "F32") {
    out.resize(raw.size() / 4);
    std::memcpy(out.data(), raw.data(), raw.size());
  } else {
    out.resize(raw.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      bf16 h;
      std::memcpy(&h.bits, raw.data() + 2 * i, 2);
      out[i] = to_float(h);
    }
  }
  return out;
}

std::string encode_safetensors(std::span<const TensorToWrite> tensors, TensorDtype dtype,
                               const std::map<std::string, std::string>& metadata) {
  const int64_t esize = dtype == TensorDtype::F32 ? 4 : 2;
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
  bytes += h;
  bytes.reserve(bytes.size() + offset);
  for (const TensorToWrite& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    if (dtype == TensorDtype::F32) {
      bytes.append(reinterpret_cast<const char*>(t.data), size_t(numel) * 4);
    } else {
      for (int64_t i = 0; i < numel; ++i) {
        const bf16 v = to_bf16(t.data[i]);
        bytes.append(reinterpret_cast<const char*>(&v.bits), 2);
      }
    }
  }
  return bytes;
}

void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors, TensorDtype dtype,
                       const std::map<std::string, std::string>& metadata) {
  const std::string bytes = encode_safetensors(tensors, dtype, metadata);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // O_EXCL | O_NOFOLLOW: never write through a file or link someone else put at the temporary name.
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(path, std::string("write failed: ") + std::strerror(e));
    }
    done += size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, std::string("fsync failed: ") + std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, std::string("rename failed: ") + std::strerror(e));
  }
  // make the rename itself durable
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) {
    const int e = errno;
    if (dfd >= 0) ::close(dfd);
    fail(path, "fsync of its directory failed: " + std::string(std::strerror(e)));
  }
  ::close(dfd);
}

// ---- GPT-2 --------------------------------------------------------------------------------

namespace {

enum class GroupKind { Embedding, LayerNorm, Conv1D, Linear };

GroupKind kind_of(const core::ParamGroup& g) {
  if (g.name == "wte" || g.name == "wpe") return GroupKind::Embedding;
  if (g.name == "lm_head") return GroupKind::Linear;  // nn.Linear: out x in, no bias
  if (g.name.find("ln_") != std::string::npos) return GroupKind::LayerNorm;
  return GroupKind::Conv1D;
}

}  // namespace

Gpt2Params load_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph) {
  SafetensorsReader r(path);
  auto resolve = [&](const std::string& name) {
    if (r.has(name)) return name;
    if (r.has("transformer." + name)) return "transformer." + name;
    fail(path, "tensor '" + name + "' is missing (model " + graph.spec.name + ")");
  };
  auto load = [&](const std::string& name, const std::vector<int64_t>& want) {
    const std::string key = resolve(name);
    const TensorInfo& t = r.info(key);
    if (t.shape != want)
      fail(path, "tensor '" + key + "' has shape " + shape_str(t.shape) + ", model " + graph.spec.name + " needs " +
                     shape_str(want));
    return r.read_f32(key);
  };

  Gpt2Params p;
  for (const core::ParamGroup& g : graph.params) {
    std::vector<float> v(size_t(g.numel));
    switch (kind_of(g)) {
      case GroupKind::Embedding: {
        if (g.name == "wpe") {  // the file may hold more positions than the model uses
          const std::string key = resolve("wpe.weight");
          const TensorInfo& t = r.info(key);
          if (t.shape.size() != 2 || t.shape[1] != g.cols || t.shape[0] < g.rows)
            fail(path, "tensor '" + key + "' has shape " + shape_str(t.shape) + ", model " + graph.spec.name +
                           " needs [>= " + std::to_string(g.rows) + ", " + std::to_string(g.cols) + "]");
          auto all = r.read_f32(key);
          std::copy(all.begin(), all.begin() + g.rows * g.cols, v.begin());
        } else {
          v = load(g.name + ".weight", {g.rows, g.cols});
        }
        break;
      }
      case GroupKind::LayerNorm: {
        auto w = load(g.name + ".weight", {g.cols}), b = load(g.name + ".bias", {g.cols});
        std::copy(w.begin(), w.end(), v.begin());
        std::copy(b.begin(), b.end(), v.begin() + g.cols);
        break;
      }
      case GroupKind::Conv1D: {
        auto w = load(g.name + ".weight", {g.cols, g.rows});  // in x out
        auto b = load(g.name + ".bias", {g.rows});
        for (int64_t o = 0; o < g.rows; ++o)
          for (int64_t i = 0; i < g.cols; ++i) v[size_t(o * g.cols + i)] = w[size_t(i * g.rows + o)];
        std::copy(b.begin(), b.end(), v.begin() + g.rows * g.cols);
        break;
      }
      case GroupKind::Linear: v = load(g.name + ".weight", {g.rows, g.cols}); break;
    }
    p.push_back(std::move(v));
  }
  return p;
}

void save_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph, const Gpt2Params& params,
                           TensorDtype dtype) {
  if (params.size() != graph.params.size())
    fail(path, "model " + graph.spec.name + " has " + std::to_string(graph.params.size()) +
                   " parameter groups, got " + std::to_string(params.size()));
  std::vector<std::vector<float>> transposed;  // Conv1D weights in HF's in x out order
  transposed.reserve(graph.params.size());
  std::vector<TensorToWrite> out;
  for (const core::ParamGroup& g : graph.params) {
    const std::vector<float>& v = params[size_t(g.id)];
    if (int64_t(v.size()) != g.numel)
      fail(path, "parameter group " + g.name + " has " + std::to_string(v.size()) + " elements, expected " +
                     std::to_string(g.numel));
    switch (kind_of(g)) {
      case GroupKind::Embedding:
      case GroupKind::Linear: out.push_back({g.name + ".weight", {g.rows, g.cols}, v.data()}); break;
      case GroupKind::LayerNorm:
        out.push_back({g.name + ".weight", {g.cols}, v.data()});
        out.push_back({g.name + ".bias", {g.cols}, v.data() + g.cols});
        break;
      case GroupKind::Conv1D: {
        std::vector<float> w(size_t(g.rows * g.cols));
        for (int64_t o = 0; o < g.rows; ++o)
          for (int64_t i = 0; i < g.cols; ++i) w[size_t(i * g.rows + o)] = v[size_t(o * g.cols + i)];
        transposed.push_back(std::move(w));
        out.push_back({g.name + ".weight", {g.cols, g.rows}, transposed.back().data()});
        out.push_back({g.name + ".bias", {g.rows}, v.data() + g.rows * g.cols});
        break;
      }
    }
  }
  write_safetensors(path, out, dtype, {{"format", "pt"}});
}

}  // namespace zinf::engine
