// safetensors files (an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw data) and GPT-2 checkpoints in Hugging Face's tensor
// names. Readers and writers own their buffers and keep no shared state; distinct objects may be
// used from distinct threads. Writes go to a temporary file that is fsynced and then renamed, so a
// crash leaves either the old file or the new one.
#pragma once
#include <cstdint>
#include <functional>
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

enum class TensorDtype { F32, BF16, F16 };
const char* to_string(TensorDtype d);
int64_t element_bytes(TensorDtype d);
// "fp32", "bf16" or "fp16" (as --export-dtype takes them); throws SafetensorsError otherwise.
TensorDtype parse_tensor_dtype(const std::string& text);

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
  // The tensor's elements converted to fp32 (F32, BF16 and F16 are supported; widening is exact).
  std::vector<float> read_f32(const std::string& name) const;
  // The same into `out` (resized; its memory reused), read straight from the file: a streamed
  // load holds one tensor, not two copies of it.
  void read_f32(const std::string& name, std::vector<float>& out) const;

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

// Where a streamed writer sends a file's bytes, in order; it throws to stop the writer.
using ByteSink = std::function<void(const char* data, size_t bytes)>;

// A safetensors file written a tensor at a time: its header (length and JSON) comes first, then
// each tensor's data in the order given, so a writer never holds more than the tensor in hand.
// The `data` pointers of the tensors are not used here.
std::string safetensors_header(std::span<const TensorToWrite> tensors, TensorDtype dtype,
                               const std::map<std::string, std::string>& metadata = {});
// Sends n fp32 elements to `sink` in the file's dtype (converted a bounded chunk at a time).
void write_tensor_data(const ByteSink& sink, const float* data, int64_t n, TensorDtype dtype);

// The file's bytes (header and data), for writers that put them somewhere themselves.
std::string encode_safetensors(std::span<const TensorToWrite> tensors, TensorDtype dtype,
                               const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, std::span<const TensorToWrite> tensors, TensorDtype dtype,
                       const std::map<std::string, std::string>& metadata = {});

// Parameter group g's fp32 tensor, supplied on request (the writers below call it once per group, in order).
using GroupSource = std::function<void(int32_t group, std::vector<float>& out)>;
// Where a streamed GPT-2 writer sends tensor `index` (of gpt2_hf_layout's list)'s bytes, in order.
using TensorSink = std::function<void(size_t index, const char* data, size_t bytes)>;
// GPT-2's tensors in Hugging Face's names and shapes, in the order the writers send them (group order).
// For a Llama graph (models::build_decoder) LlamaForCausalLM's: model.embed_tokens.weight,
// model.layers.N.self_attn.{q,k,v,o}_proj.weight, model.layers.N.mlp.{gate,up,down}_proj.weight,
// model.layers.N.{input,post_attention}_layernorm.weight, model.norm.weight and, untied,
// lm_head.weight; nn.Linear's out x in, as core keeps them. The loaders below read those names
// (an older checkpoint's rotary_emb.inv_freq buffers are ignored) with every shape checked against
// the graph built from config.json, and refuse a misshapen, missing or foreign tensor by name.
std::vector<TensorToWrite> gpt2_hf_layout(const core::ModelGraph& graph);
// Sends every tensor of gpt2_hf_layout(graph) to `sink` in `dtype`, asking `group` for each parameter
// group once, in group order; `path` names the destination in messages.
void stream_gpt2_tensors(const std::string& path, const core::ModelGraph& graph, const GroupSource& group,
                         TensorDtype dtype, const TensorSink& sink);

// GPT-2 in Hugging Face's names (wte.weight, h.N.attn.c_attn.weight, ...; an optional
// "transformer." prefix is accepted on import). HF's Conv1D stores c_attn, c_proj and c_fc weights
// as in x out; they are transposed to core's out x in. A wpe with more rows than the model's seq
// (GPT-2 has 1024 positions) contributes its first seq rows. Tensors the model does not use
// (HF's attn.bias mask buffers, a tied lm_head.weight) are ignored; any other tensor is refused by
// name, as is a missing or misshapen one, before any is read. `path` is a safetensors file or a
// Hugging Face folder (engine/model/hf_weights.hpp: model.safetensors, or shards with their index).
Gpt2Params load_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph);
// Parameter group g's fp32 tensor, read from the file when asked:
// the headers is read and checked at once, each group's tensors on its call, so an import into
// NVMe-resident states holds one group. `graph` must outlive the returned function.
GroupSource gpt2_safetensors_groups(const std::string& path, const core::ModelGraph& graph);
void save_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph, const Gpt2Params& params,
                           TensorDtype dtype);
// The same, streamed: `group(g, out)` supplies parameter group g's fp32 tensor, called once per
// group in group order, and each is written before the next is asked for (the file is still
// written to a temporary name, fsynced and renamed).
void save_gpt2_safetensors(const std::string& path, const core::ModelGraph& graph, const GroupSource& group,
                           TensorDtype dtype);

}  // namespace zinf::engine
