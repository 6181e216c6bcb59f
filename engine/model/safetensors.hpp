// safetensors files (an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw data) and GPT-2 checkpoints in Hugging Face's tensor
// names. Readers and writers own their buffers and keep no shared state; distinct objects may be
// used from distinct threads. Writes go to a temporary file that is fsynced and then renamed, so a
// crash leaves either the old file or the new one.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "engine/model/gpt2.hpp"

namespace zinf::engine {

// A file that is not valid safetensors, or lacks what the model needs; the message names the file
// and the tensor.
class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class TensorDtype { F32, BF16 };
const char* to_string(TensorDtype d);

struct TensorInfo {
  std::string dtype;            // as written in the file: "F32", "BF16", "F16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsReader {
 public:
  // Reads and validates the header (offsets inside the file, sizes matching dtype x shape).
  explicit SafetensorsReader(std::string path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws naming the missing tensor
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's elements converted to fp32 (F32 and BF16 are supported).
  std::vector<float> read_f32(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_offset_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // product(shape) fp32 elements, converted to the file's dtype
};

// The file's bytes (header and data), for writers that put them somewhere themselves.
std::string encode_safetensors(std::span<const TensorToWrite> tensors, TensorDtype dtype,
                               const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors, TensorDtype dtype,
                       const std::map<std::string, std::string>& metadata = {});

// GPT-2 in Hugging Face's names (wte.weight, h.N.attn.c_attn.weight, ...; an optional
// "transformer." prefix is accepted on import). HF's Conv1D stores c_attn, c_proj and c_fc weights
// as in x out; they are transposed to core's out x in. A wpe with more rows than the model's seq
// (GPT-2 has 1024 positions) contributes its first seq rows. Tensors the model does not use
// (HF's attn.bias mask buffers, a tied lm_head.weight) are ignored.
Gpt2Params load_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph);
void save_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph, const Gpt2Params& params,
                           TensorDtype dtype);

}  // namespace zinf::engine
