// Fuzz target: safetensors files (engine::SafetensorsReader: the header, then every tensor read).
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/model/safetensors.hpp"
#include "fuzz_target.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("zinf_fuzz_" + std::to_string(::getpid()) + ".safetensors")).string();
  {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(input.data(), std::streamsize(input.size()));
  }
  struct Remove {
    ~Remove() { std::filesystem::remove(path); }
  } remove;
  engine::SafetensorsReader r(path);
  for (const auto& [name, info] : r.tensors())
    if (info.dtype == "F32" || info.dtype == "BF16") r.read_f32(name);
}
std::vector<std::string> builtin_seeds() {
  const float a[6] = {1, 2, 3, 4, 5, 6};
  std::vector<engine::TensorToWrite> t = {{"w", {2, 3}, a}, {"b", {3}, a + 3}};
  return {engine::encode_safetensors(t, engine::TensorDtype::F32, {{"format", "pt"}}),
          engine::encode_safetensors(t, engine::TensorDtype::BF16)};
}
}  // namespace zinf::fuzz
