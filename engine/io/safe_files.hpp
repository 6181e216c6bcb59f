// Safe file operations on the directories zinf writes (the NVMe store's, the checkpoints'), all
// through an IoEnv so tests can make each call fail: a directory is used only if it is a real
// directory (not a symbolic link) owned by this user and not writable by every user; files in it are
// opened with O_NOFOLLOW and checked to be regular files of this user; one process at a time holds
// a directory (DirLock); small files are replaced durably (write, fsync, rename, fsync the
// directory), and every fsync's result is checked. Stateless functions, safe from any thread;
// a DirLock is owned by one thread.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/io/io_env.hpp"

namespace zinf::engine {

// A failed file operation: "<who>: <op> <path>: <reason>".
// Closes a descriptor (through its IoEnv) when the scope ends, unless released.
struct ScopedFd {
  IoEnv& env;
  int fd;
  ~ScopedFd() {
    if (fd >= 0) env.close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

class FileError : public std::runtime_error {
public:
  FileError(const std::string& who, const std::string& op, const std::string& path, int error,
            const std::string& detail = "");
  int error() const { return error_; }  // a positive errno value
  const std::string& path() const { return path_; }

private:
  std::string path_;
  int error_;
};

// Creates `dir` (last component, mode 0700) if missing, then checks it is a directory (not a
// link) of this user that not every user can write, below ancestors that pass check_ancestors;
// throws FileError naming `who` and the path otherwise.
void ensure_own_directory(IoEnv& env, const std::string& dir, const std::string& who);

// Refuses (FileError naming the ancestor) a directory that another user could replace: every
// ancestor of `dir`, along its path as given and as links resolve it, must not be writable by
// every user unless it is sticky and owned by root or this user (as /tmp is), where only the owner
// of an entry may rename or remove it.
void check_ancestors(IoEnv& env, const std::string& dir, const std::string& who);

// Whether `path` is `dir` or lies inside it, both made absolute with links resolved as far as
// they exist (so a path through a link into `dir` counts as inside).
bool path_inside(const std::string& path, const std::string& dir);

// Opens `path` without following a symbolic link and checks the result is a regular file of this
// user; returns the descriptor or throws FileError.
int open_own_file(IoEnv& env, const std::string& path, int flags, mode_t mode, const std::string& who);

// fsync of an open descriptor or of a directory, checked: throws FileError on failure.
void fsync_checked(IoEnv& env, int fd, const std::string& path, const std::string& who);
void fsync_directory(IoEnv& env, const std::string& dir, const std::string& who);

// Reads a small file of this user (no symbolic links, a regular file: a FIFO is refused without
// blocking) of at most `limit` bytes; throws FileError naming the path.
inline constexpr uint64_t kMaxSmallFileBytes = 4ull << 20;
std::string read_own_file(IoEnv& env, const std::string& path, const std::string& who,
                          uint64_t limit = kMaxSmallFileBytes);

// An exclusive lock on a directory (flock on <dir>/.lock, which names the holder) for as long as
// the object lives; a second holder, in this or another process, gets a FileError that names the
// first ("in use by pid N on host H"). The lock ends with the process, however it ends.
class DirLock {
public:
  DirLock(IoEnv& env, const std::string& dir, const std::string& who);
  // The same lock on an output file that is replaced by renames (a sweep's CSV): held on the
  // sibling `<path>.lock`, which stays behind naming its last holder; the refusal names `path`.
  static std::unique_ptr<DirLock> for_output(IoEnv& env, const std::string& path, const std::string& who);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  int fd() const { return fd_; }  // the open <dir>/.lock: which file the lock is on

private:
  DirLock(IoEnv& env, const std::string& lock_path, const std::string& locked, const std::string& who,
          const std::string& sharing);

  IoEnv& env_;
  int fd_ = -1;
};

}  // namespace zinf::engine
