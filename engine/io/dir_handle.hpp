// DirHandle is an open directory (O_DIRECTORY | O_NOFOLLOW) through which files are made, renamed,
// removed and fsynced by name (openat, mkdirat, renameat, unlinkat on its descriptor): once it is
// open, replacing the directory's path with a link or another directory redirects nothing, because
// no call walks the path again. Errors name `path()/name`, the path the user gave. Every call goes
// through an IoEnv, so tests can fail or race each one. Owned by one thread; movable, not copyable.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/io/io_env.hpp"
#include "engine/io/safe_files.hpp"

namespace zinf::engine {

class DirHandle {
public:
  // Opens `path`, refusing a link, a non-directory, or one not owned by this user.
  static DirHandle open(IoEnv& env, const std::string& path, const std::string& who);

  DirHandle(DirHandle&& o) noexcept : env_(o.env_), fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), who_(o.who_) {}
  DirHandle& operator=(DirHandle&&) = delete;
  DirHandle(const DirHandle&) = delete;
  ~DirHandle();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  std::string path_of(const std::string& name) const { return path_ + "/" + name; }

  // The subdirectory `name`, opened through this handle (not by path).
  DirHandle open_dir(const std::string& name) const;
  // Makes the subdirectory `name` (mode 0700); it must not exist.
  void make_dir(const std::string& name) const;
  // Opens file `name` (never following a link) and checks it is a regular file of this user.
  int open_file(const std::string& name, int flags, mode_t mode) const;

  bool exists(const std::string& name) const;
  // What lstat says of `name`, or -errno.
  int stat(const std::string& name, FileInfo& out) const;
  FileInfo stat_self() const;
  // The names in the directory, sorted.
  std::vector<std::string> list() const;

  // A new file `name` written whole and fsynced (it must not exist).
  void write_new_file(const std::string& name, const std::string& bytes) const;
  // Replaces `name` durably: `name`.tmp written and fsynced, renamed over `name`, this directory fsynced.
  void write_file_durable(const std::string& name, const std::string& text) const;
  // Reads the small regular file `name` of at most `limit` bytes (a FIFO is refused without blocking).
  std::string read_small_file(const std::string& name, uint64_t limit = kMaxSmallFileBytes) const;

  void rename(const std::string& from, const std::string& to) const;
  // Swaps two existing entries atomically; throws FileError naming both.
  void exchange(const std::string& a, const std::string& b) const;
  // Removes `name` and, if it is a directory (not a link), all it holds; nothing when it is missing.
  void remove_tree(const std::string& name) const;
  void fsync() const;

private:
  DirHandle(IoEnv& env, int fd, std::string path, std::string who) : env_(env), fd_(fd), path_(std::move(path)), who_(std::move(who)) {}

  IoEnv& env_;
  int fd_ = -1;
  std::string path_;
  std::string who_;
};

}  // namespace zinf::engine
