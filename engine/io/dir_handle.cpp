#include "engine/io/dir_handle.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>

namespace zinf::engine {
namespace {

// Checks an open descriptor is a directory of this user; throws FileError naming `path`.
void check_own_directory(IoEnv& env, int fd, const std::string& path, const std::string& who) {
  FileInfo st;
  const int r = env.fstat(fd, st);
  if (r < 0) throw FileError(who, "stat directory", path, -r);
  if (st.kind != FileInfo::Kind::Directory) throw FileError(who, "use directory", path, ENOTDIR);
  if (st.owner != env.user())
    throw FileError(who, "use directory", path, EPERM,
                    "owned by uid " + std::to_string(st.owner) + ", not by this user (uid " +
                        std::to_string(env.user()) + ")");
}

FileError open_error(const std::string& who, const std::string& path, int error) {
  if (error == ELOOP) return FileError(who, "open", path, ELOOP, "it is a symbolic link; zinf does not follow links here");
  return FileError(who, "open", path, error);
}

}  // namespace

DirHandle DirHandle::open(IoEnv& env, const std::string& path, const std::string& who) {
  const int fd = env.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
  if (fd < 0) throw open_error(who, path, -fd);
  ScopedFd guard{env, fd};
  check_own_directory(env, fd, path, who);
  return DirHandle(env, guard.release(), path, who);
}

DirHandle::~DirHandle() {
  if (fd_ >= 0) env_.close(fd_);
}

DirHandle DirHandle::open_dir(const std::string& name) const {
  const std::string path = path_of(name);
  const int fd = env_.open_at(fd_, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
  if (fd < 0) throw open_error(who_, path, -fd);
  ScopedFd guard{env_, fd};
  check_own_directory(env_, fd, path, who_);
  return DirHandle(env_, guard.release(), path, who_);
}

void DirHandle::make_dir(const std::string& name) const {
  const int r = env_.make_dir_at(fd_, name, 0700);
  if (r < 0) throw FileError(who_, "create directory", path_of(name), -r);
}

int DirHandle::open_file(const std::string& name, int flags, mode_t mode) const {
  const std::string path = path_of(name);
  const int fd = env_.open_at(fd_, name, flags | O_NOFOLLOW, mode);
  if (fd < 0) throw open_error(who_, path, -fd);
  ScopedFd guard{env_, fd};
  FileInfo st;
  const int r = env_.fstat(fd, st);
  if (r < 0) throw FileError(who_, "stat", path, -r);
  if (st.kind != FileInfo::Kind::Regular) throw FileError(who_, "open", path, EINVAL, "not a regular file");
  if (st.owner != env_.user())
    throw FileError(who_, "open", path, EPERM,
                    "owned by uid " + std::to_string(st.owner) + ", not by this user (uid " +
                        std::to_string(env_.user()) + ")");
  return guard.release();
}

bool DirHandle::exists(const std::string& name) const {
  FileInfo st;
  return env_.lstat_at(fd_, name, st) == 0;
}

int DirHandle::stat(const std::string& name, FileInfo& out) const { return env_.lstat_at(fd_, name, out); }

FileInfo DirHandle::stat_self() const {
  FileInfo st;
  const int r = env_.fstat(fd_, st);
  if (r < 0) throw FileError(who_, "stat directory", path_, -r);
  return st;
}

std::vector<std::string> DirHandle::list() const {
  std::vector<std::string> names;
  const int r = env_.list_at(fd_, names);
  if (r < 0) throw FileError(who_, "list", path_, -r);
  std::sort(names.begin(), names.end());
  return names;
}

void DirHandle::write_new_file(const std::string& name, const std::string& bytes) const {
  const std::string path = path_of(name);
  ScopedFd f{env_, open_file(name, O_WRONLY | O_CREAT | O_EXCL, 0600)};
  const int64_t w = env_.pwrite(f.fd, bytes.data(), bytes.size(), 0);
  if (w < 0) throw FileError(who_, "write", path, int(-w));
  if (uint64_t(w) != bytes.size()) throw FileError(who_, "write", path, EIO, "the write was short");
  fsync_checked(env_, f.fd, path, who_);
  const int r = env_.close(f.release());
  if (r < 0) throw FileError(who_, "close", path, -r);
}

void DirHandle::write_file_durable(const std::string& name, const std::string& text) const {
  const std::string tmp = name + ".tmp";
  const int r = env_.remove_at(fd_, tmp, false);  // a leftover of a crash; O_EXCL refuses anything put there since
  if (r < 0 && r != -ENOENT) throw FileError(who_, "remove", path_of(tmp), -r);
  write_new_file(tmp, text);
  rename(tmp, name);
  fsync();
}

std::string DirHandle::read_small_file(const std::string& name, uint64_t limit) const {
  const std::string path = path_of(name);
  // O_NONBLOCK: opening a FIFO with no writer would otherwise block before open_file can refuse it.
  ScopedFd f{env_, open_file(name, O_RDONLY | O_NONBLOCK, 0)};
  FileInfo st;
  const int r = env_.fstat(f.fd, st);
  if (r < 0) throw FileError(who_, "stat", path, -r);
  const auto too_large = [&] {
    return FileError(who_, "read", path, EFBIG,
                     "larger than " + std::to_string(limit) + " bytes, the most zinf reads from such a file");
  };
  if (uint64_t(st.size) > limit) throw too_large();
  std::string text(size_t(st.size) + 1, '\0');  // one byte more: a file that grew is caught
  const int64_t n = env_.pread(f.fd, text.data(), text.size(), 0);
  if (n < 0) throw FileError(who_, "read", path, int(-n));
  if (uint64_t(n) > limit) throw too_large();
  text.resize(size_t(n));
  return text;
}

void DirHandle::rename(const std::string& from, const std::string& to) const {
  const int r = env_.rename_at(fd_, from, to);
  if (r < 0) throw FileError(who_, "rename " + path_of(from) + " to", path_of(to), -r);
}

void DirHandle::exchange(const std::string& a, const std::string& b) const {
  const int r = env_.exchange_at(fd_, a, b);
  if (r < 0) throw FileError(who_, "swap " + path_of(a) + " with", path_of(b), -r);
}

void DirHandle::remove_tree(const std::string& name) const {
  FileInfo st;
  int r = env_.lstat_at(fd_, name, st);
  if (r == -ENOENT) return;
  if (r < 0) throw FileError(who_, "stat", path_of(name), -r);
  const bool directory = st.kind == FileInfo::Kind::Directory;
  if (directory) {
    const DirHandle sub = open_dir(name);
    for (const std::string& entry : sub.list()) sub.remove_tree(entry);
  }
  r = env_.remove_at(fd_, name, directory);  // a link is removed itself, never what it points to
  if (r < 0) throw FileError(who_, "remove", path_of(name), -r);
}

void DirHandle::fsync() const { fsync_checked(env_, fd_, path_, who_); }

}  // namespace zinf::engine
