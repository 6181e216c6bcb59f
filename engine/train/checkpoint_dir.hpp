// CheckpointDir is the directory of a run's checkpoints: step-NNNNNNNN/ directories and a `latest`
// file naming the one a resume continues from. A step directory holds state.safetensors, meta.json,
// whatever other files a step carries, and checksums.json, written last, which records the size and
// CRC32C of every other file in it: the checksum covers a step whole, whatever files are added to it
// (the list is made from the directory as written, not from a list of known names). Loading refuses
// a step directory with a file checksums.json does not list, a listed file missing or different, or
// no checksums.json at all unless told to accept an unverified checkpoint.
// A checkpoint is never replaced before its successor is durable: the new one is written and
// fsynced under <name>.tmp, then swapped in atomically (renameat2 RENAME_EXCHANGE when <name>
// exists, rename otherwise), the directory fsynced, and only then `latest` replaced durably (or
// later, by publish(), when the caller waits for a step to confirm the state). A step directory
// that `latest` does not name is never deleted: it is kept as <name>.replaced-K, or set aside as
// <name>.<why>-K. Holding a CheckpointDir locks the directory (one run at a time) and opens it once
// (O_DIRECTORY | O_NOFOLLOW): every save, `latest` and rename goes through that handle (openat,
// mkdirat, renameat), so a path swapped for a link mid-run redirects no write; each save also checks
// the path still names the directory locked, and refuses (naming it) when it does not.
// All file system writes go through an IoEnv, so tests can fail each one; every fsync is checked.
// One object per process (rank 0 writes); not thread-safe.
// The state file is written as it streams in (save with a StateWriter): the checksum is computed on
// the way, and loading verifies every file a bounded buffer at a time.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/dir_handle.hpp"
#include "engine/io/io_env.hpp"
#include "engine/io/safe_files.hpp"
#include "engine/model/safetensors.hpp"

namespace zinf::engine {

inline constexpr const char* kChecksumsFile = "checksums.json";

// A checkpoint found by `latest`, verified whole (or accepted unverified when asked); or, when
// there is no `latest`, the newest step directory that verifies whole.
struct LoadedCheckpoint {
  std::string name;        // step-NNNNNNNN
  std::string dir;         // <root>/step-NNNNNNNN
  std::string state_path;  // <dir>/state.safetensors
  std::string meta_path;   // <dir>/meta.json
  nlohmann::json meta;
  bool verified = false;   // false only when accepted without checksums.json
  // False when no `latest` named it: a run saves a step and points `latest` at it only once the
  // next step's figures confirmed it, so a run stopped in between (kill -9, power loss) leaves
  // its newest checkpoint unconfirmed. The resumed run's first step confirms it or sets it aside.
  bool confirmed = true;
  std::vector<std::string> skipped;  // newer step directories passed over, each with why
};

// Reads <root>/latest and the checkpoint it names; throws std::runtime_error naming the file at
// fault (missing, a link, not a step directory, bad JSON, a file not covered by the checksums, a
// size or checksum mismatch, no checksums.json unless `accept_unverified`). Without `latest`, the
// newest step-NNNNNNNN directory that verifies whole against its checksums (unconfirmed; damaged
// or unverifiable ones are passed over and listed in `skipped`); none: "no checkpoint has been
// saved there".
LoadedCheckpoint load_latest_checkpoint(IoEnv& env, const std::string& root, bool accept_unverified = false);

// The name in <root>/latest, or "" when there is none (a missing root counts as none).
std::string latest_checkpoint_name(IoEnv& env, const std::string& root);

// meta.json's text as JSON: an object whose `format` is zinf-checkpoint-1, with no NUL byte (a
// padded file is damaged, not a shorter document). Throws std::runtime_error naming `path`.
nlohmann::json parse_checkpoint_meta(const std::string& text, const std::string& path);

// checksums.json's text: file name -> (bytes, CRC32C). Throws std::runtime_error naming `path`.
std::vector<std::pair<std::string, std::pair<uint64_t, uint32_t>>> parse_checksums(const std::string& text,
                                                                                    const std::string& path);

class CheckpointDir {
public:
  // Checks that `root`'s ancestors cannot be replaced by another user, creates `root` if missing
  // (mode 0700), checks it is this user's real directory, and locks it.
  CheckpointDir(IoEnv& env, std::string root);

  const std::string& root() const { return root_; }
  // Whether the directory holds checkpoints of a run: a `latest` file or step directories.
  bool holds_checkpoints() const;

  // The files a step carries beside its state: name and content (meta.json, and any other).
  using Files = std::vector<std::pair<std::string, std::string>>;
  // Whether `latest` moves to the new checkpoint once it is durable, or stays until publish().
  enum class Latest { Move, Keep };
  using StateWriter = std::function<void(const ByteSink& sink)>;

  // Writes checkpoint `name` (step-NNNNNNNN): the state streamed by `write_state` (each piece goes
  // to the file and into its checksum at once, so the state is never whole in memory), `files`,
  // and checksums.json over all of them. Returns notes for the user (a step directory kept
  // aside); throws FileError naming the path at fault, leaving `latest` as it was. An exception
  // from `write_state` (or the sink) leaves only <name>.tmp behind.
  std::vector<std::string> save(const std::string& name, const StateWriter& write_state, const Files& files,
                                Latest latest = Latest::Move);
  // The same with meta.json as the only other file.
  std::vector<std::string> save(const std::string& name, const StateWriter& write_state, const nlohmann::json& meta,
                                Latest latest = Latest::Move);
  std::vector<std::string> save(const std::string& name, const std::string& state_bytes, const nlohmann::json& meta,
                                Latest latest = Latest::Move);

  // Points `latest` at step directory `name`, durably.
  void publish(const std::string& name);
  // Renames step directory `name` to <name>.<why>-K (K from 1, the first free), out of reach of
  // `latest` and resumes; returns the new path.
  std::string set_aside(const std::string& name, const std::string& why);

private:
  void check_still_locked() const;
  std::vector<std::string> save_checked(const std::string& name, const StateWriter& write_state, const Files& files,
                                        Latest latest);

  IoEnv& env_;
  std::string root_;
  std::unique_ptr<DirLock> lock_;
  std::unique_ptr<DirHandle> dir_;  // the directory locked, opened once; all writes go through it
  uint64_t device_ = 0, inode_ = 0;  // the directory locked
};

}  // namespace zinf::engine
