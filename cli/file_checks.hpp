// The files a command names on its command line or in its spec, checked before its work starts:
// every input as the bounded reader will read it (formats/bounded_input.hpp: a regular file within
// its kind's limit; a directory only where the option takes one), every output as the one writer
// will write it (engine/io/output_file.hpp). A refusal names the flag and the file, so a FIFO,
// /dev/zero, a directory or a 100 GB file is refused at once instead of read. The readers behind
// the commands read every file through the bounded reader again. Stateless, thread-safe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zinf::cli {

// What an input is, and the most zinf reads of it.
struct InputKind {
  const char* what;      // "run config", in messages
  uint64_t limit;        // bytes
  bool directory_too;    // the option also takes a directory (read file by file)
  // A directory is taken only when it holds one of these (empty: any directory is taken).
  std::vector<const char*> directory_holds = {};
};

extern const InputKind kConfigInput;     // run configs, DeepSpeed JSON, models, profiles, sweep specs
extern const InputKind kTokenizerInput;  // a tokenizer file, or a directory holding one
extern const InputKind kDataInput;       // text or token data, or a directory of text files
extern const InputKind kWeightsInput;    // a safetensors file, or a Hugging Face folder of them

// Refuses (ConfigError naming `flag` and `path`) what the kind's reader would refuse by its type or
// size. Empty paths are skipped (the option was not given).
void check_input(const std::string& flag, const std::string& path, const InputKind& kind);
// The same for a name or path as --model, --hw and --config take (core::resolve_config's lookup
// under `folder` of the zinf tree); an unknown name is left to the loader's own message.
void check_named_input(const std::string& flag, const std::string& name_or_path, const std::string& folder);
// Refuses (engine::FileError naming `command flag` and `path`) an output the one writer would
// refuse; empty paths are skipped.
void check_output(const std::string& command, const std::string& flag, const std::string& path);

}  // namespace zinf::cli
