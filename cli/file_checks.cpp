#include "cli/file_checks.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include "cli/command.hpp"
#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "engine/io/output_file.hpp"

namespace zinf::cli {

const InputKind kConfigInput{"file", core::kMaxConfigBytes, false};
const InputKind kTokenizerInput{"tokenizer file", 64ull << 20, true};
const InputKind kDataInput{"data file", 8ull << 30, true};
// The largest checkpoint a safetensors header may describe is checked by its reader; this bounds
// the file itself (a 1T-parameter model in fp32 is 4 TB).
const InputKind kWeightsInput{"safetensors file", 16ull << 40, true,
                               {"model.safetensors", "model.safetensors.index.json"}};
// A model given as a folder is a Hugging Face one: its config.json is the file read.
const InputKind kModelFolderInput{"file", core::kMaxConfigBytes, true, {"config.json"}};

namespace {

// A directory `path` given to `flag`: taken when the kind takes directories and it holds what the
// kind's reader looks for; otherwise refused as the directory it is, naming what was looked for.
void check_directory(const std::string& flag, const std::string& path, const InputKind& kind) {
  if (kind.directory_too && kind.directory_holds.empty()) return;
  std::string looked;
  for (const char* name : kind.directory_holds) {
    const std::string inside = path + "/" + name;
    struct stat st {};
    if (::lstat(inside.c_str(), &st) == 0) {
      // What the reader will open in the folder is held to the same bounds as a file given alone.
      core::check_bounded_file(inside, kind.limit, fmt::format("{} given to {}", kind.what, flag));
      return;
    }
    looked += (looked.empty() ? "" : " or ") + std::string(name);
  }
  throw core::ConfigError(path, "", fmt::format("the {} given to {} is a directory{}", kind.what, flag,
                                                looked.empty() ? std::string() : " holding no " + looked));
}

}  // namespace

void check_input(const std::string& flag, const std::string& path, const InputKind& kind) {
  if (path.empty()) return;
  struct stat st {};
  // stat follows a link: a link to a directory is a directory, as the readers see it.
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return check_directory(flag, path, kind);
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
  check_input(flag, path, folder == "models" ? kModelFolderInput : kConfigInput);
}

void check_output(const std::string& command, const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  engine::check_output_path(engine::default_io_env(), path, fmt::format("zinf {} {}", command, flag));
}

}  // namespace zinf::cli
