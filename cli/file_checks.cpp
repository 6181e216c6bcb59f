#include "cli/file_checks.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include "cli/command.hpp"
#include "core/bounded_input.hpp"
#include "core/config_paths.hpp"
#include "core/errors.hpp"
#include "engine/io/output_file.hpp"

namespace zinf::cli {

const InputKind kConfigInput{"file", core::kMaxConfigBytes, false};
const InputKind kTokenizerInput{"tokenizer file", 64ull << 20, true};
const InputKind kDataInput{"data file", 8ull << 30, true};
// The largest checkpoint a safetensors header may describe is checked by its reader; this bounds
// the file itself (a 1T-parameter model in fp32 is 4 TB).
const InputKind kWeightsInput{"safetensors file or Hugging Face folder", 16ull << 40, true};

void check_input(const std::string& flag, const std::string& path, const InputKind& kind) {
  if (path.empty()) return;
  struct stat st {};
  // stat follows a link: a link to a directory is a directory, as the readers see it.
  if (kind.directory_too && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  core::check_bounded_file(path, kind.limit, fmt::format("{} given to {}", kind.what, flag));
}

void check_named_input(const std::string& flag, const std::string& name_or_path, const std::string& folder) {
  if (name_or_path.empty()) return;
  std::string path;
  try {
    path = core::resolve_config(name_or_path, folder, core::zinf_root(source_dir()));
  } catch (const core::ConfigError&) {
    // A name that lies nowhere, or a path to nothing: checked for its type if it exists at all.
    struct stat st {};
    if (::lstat(name_or_path.c_str(), &st) != 0) return;
    path = name_or_path;
  }
  // A model may be a Hugging Face folder: its config.json is the file read.
  struct stat st {};
  if (folder == "models" && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) path += "/config.json";
  check_input(flag, path, kConfigInput);
}

void check_output(const std::string& command, const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  engine::check_output_path(engine::default_io_env(), path, fmt::format("zinf {} {}", command, flag));
}

}  // namespace zinf::cli
