// CheckpointDir is the directory of a run's checkpoints: step-NNNNNNNN/ directories (each a
// state.safetensors and a meta.json that records the state file's size and CRC32C) and a `latest`
// file naming the newest. A checkpoint is never replaced before its successor is durable: the new
// one is written and fsynced under <name>.tmp, then swapped in atomically (renameat2
// RENAME_EXCHANGE when <name> exists, rename otherwise), the directory fsynced, and only then
// `latest` replaced durably. A step directory that `latest` does not name is never deleted: it is
// kept as <name>.replaced-K. Holding a CheckpointDir locks the directory (one run at a time).
// Loading verifies the checksum and refuses a `latest` that names anything but a step directory.
// All file system writes go through an IoEnv, so tests can fail each one; every fsync is checked.
// One object per process (rank 0 writes); not thread-safe.
// The state file is written as it streams in (save with a StateWriter): the checksum is computed on
// the way, and reading it back verifies it a bounded buffer at a time.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/io_env.hpp"
#include "engine/io/safe_files.hpp"
#include "engine/model/safetensors.hpp"

namespace zinf::engine {

// A checkpoint found by `latest`, its checksum verified.
struct LoadedCheckpoint {
  std::string dir;         // <root>/step-NNNNNNNN
  std::string state_path;  // <dir>/state.safetensors
  std::string meta_path;   // <dir>/meta.json
  nlohmann::json meta;
  bool verified = false;   // false for a checkpoint written before checksums (none recorded)
};

// Reads <root>/latest and the checkpoint it names; throws std::runtime_error naming the file at
// fault (missing, a link, not a step directory, bad JSON, checksum or size mismatch).
LoadedCheckpoint load_latest_checkpoint(IoEnv& env, const std::string& root);

// The name in <root>/latest, or "" when there is none (a missing root counts as none).
std::string latest_checkpoint_name(IoEnv& env, const std::string& root);

class CheckpointDir {
public:
  // Creates `root` if missing (mode 0700), checks it is this user's real directory, and locks it.
  CheckpointDir(IoEnv& env, std::string root);

  const std::string& root() const { return root_; }
  // Whether the directory holds checkpoints of a run: a `latest` file or step directories.
  bool holds_checkpoints() const;

  // Writes checkpoint `name` (step-NNNNNNNN) from the encoded state file and its metadata (the
  // checksum is added to `meta`), then points `latest` at it. Returns notes for the user (a step
  // directory kept aside); throws FileError naming the path at fault, leaving `latest` as it was.
  std::vector<std::string> save(const std::string& name, const std::string& state_bytes, nlohmann::json meta);
  // The same, streamed: `write_state` sends the state file's bytes to the sink it is given, in
  // order, and each piece goes to the file (and into its checksum) at once, so the state is never
  // whole in memory. An exception from `write_state` (or the sink) leaves only <name>.tmp behind.
  using StateWriter = std::function<void(const ByteSink& sink)>;
  std::vector<std::string> save(const std::string& name, const StateWriter& write_state, nlohmann::json meta);

private:
  IoEnv& env_;
  std::string root_;
  std::unique_ptr<DirLock> lock_;
};

}  // namespace zinf::engine
