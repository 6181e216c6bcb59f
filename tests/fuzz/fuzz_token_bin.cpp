// Fuzz target: .bin token files, llm.c's 16- and 32-bit (a 1024-byte header) and nanoGPT's (raw uint16), through
// engine::TokenCorpus::load and a BatchLoader over what loads.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/data/token_data.hpp"
#include "fuzz_target.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("zinf_fuzz_" + std::to_string(::getpid()) + ".bin")).string();
  {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(input.data(), std::streamsize(input.size()));
  }
  struct Remove {
    ~Remove() { std::filesystem::remove(path); }
  } remove;
  auto corpus = engine::TokenCorpus::load(path);
  if (corpus.tokens.size() > 9) {
    engine::BatchLoader loader(corpus, 1, 8, 0, 1, 1);
    loader.next();
  }
}
std::vector<std::string> builtin_seeds() {
  std::string llmc(1024, '\0');
  const int32_t head[3] = {20240520, 1, 16};
  std::memcpy(llmc.data(), head, sizeof head);
  for (uint16_t t = 0; t < 16; ++t) llmc.append(reinterpret_cast<const char*>(&t), 2);
  std::string wide(1024, '\0');
  const int32_t wide_head[3] = {20240801, 7, 16};
  std::memcpy(wide.data(), wide_head, sizeof wide_head);
  for (uint32_t t = 70000; t < 70016; ++t) wide.append(reinterpret_cast<const char*>(&t), 4);
  std::string raw;
  for (uint16_t t = 0; t < 32; ++t) raw.append(reinterpret_cast<const char*>(&t), 2);
  return {llmc, wide, raw};
}
}  // namespace zinf::fuzz
