// Hugging Face weight folders: model.safetensors, or shards model-0000N-of-0000M.safetensors with
// model.safetensors.index.json naming the shard of every tensor, read as one set of tensors
// (WeightFiles) and written back the way transformers' save_pretrained lays them out
// (save_gpt2_hf_folder). A WeightFiles keeps only the headers and reads a tensor when asked; it is
// immutable after construction and may be read from several threads. The writer is a function
// with no shared state.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "engine/io/io_env.hpp"
#include "engine/model/safetensors.hpp"

namespace zinf::engine {

inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
inline constexpr const char* kHfSingleFile = "model.safetensors";

class WeightFiles {
 public:
  // `path` is one safetensors file or a folder holding model.safetensors or an index and its
  // shards. Throws SafetensorsError naming the file and tensor at fault: a shard the index names
  // that is not there, a tensor in two shards or named twice in the index, a tensor the index maps
  // to a shard that lacks it, a tensor in a shard the index does not map there.
  explicit WeightFiles(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return owner_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;  // the file that holds it
  std::vector<std::string> names() const;
  // The tensor converted to fp32, read straight from its file into `out` (resized).
  void read_f32(const std::string& name, std::vector<float>& out) const;

 private:
  void open_index(const std::string& dir);

  std::string path_;
  std::vector<SafetensorsReader> files_;
  std::map<std::string, size_t> owner_;  // tensor -> index in files_
};

struct HfExport {
  TensorDtype dtype = TensorDtype::F32;
  uint64_t shard_bytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"
};

// "5GB" (10^9 bytes a GB, as transformers counts), "500MB", "2GiB" (2^30), "64KiB", or a plain
// count of bytes; throws SafetensorsError naming the text otherwise, or for zero.
uint64_t parse_shard_size(const std::string& text);

// Writes the model's tensors (gpt2_hf_layout: GPT-2's names, or LlamaForCausalLM's for the Llama
// family) into folder `dir` (created if missing; it must be this
// user's own, as safe_files checks) in `how.dtype`: one model.safetensors when they fit in one
// shard, else shards of at most how.shard_bytes tensor bytes each (a tensor larger than that
// alone in its shard) and model.safetensors.index.json with metadata.total_size and weight_map,
// and a config.json from which transformers builds the same model.
// Files are filled in group order, one open at a time, each under a temporary name and fsynced;
// all are renamed into place once written (a failed write leaves an earlier export whole), then
// the index and config are replaced and files of an earlier export this one did not write removed.
void save_gpt2_hf_folder(const std::string& dir, const core::ModelGraph& graph, const GroupSource& group,
                         const HfExport& how, IoEnv& env = default_io_env());

// Where `zinf train --export` writes: a folder when the path is an existing directory, ends in
// '/', or a shard size was given; otherwise one safetensors file, as before folders were written.
struct ExportTarget {
  std::string path;
  HfExport how;
  bool folder = false;
};
ExportTarget export_target(const std::string& path, const std::string& dtype, const std::string& shard_size);
void save_gpt2_export(const ExportTarget& target, const core::ModelGraph& graph, const GroupSource& group);

}  // namespace zinf::engine
