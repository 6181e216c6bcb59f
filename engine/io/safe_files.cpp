#include "engine/io/safe_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace zinf::engine {
namespace {

std::string message(const std::string& who, const std::string& op, const std::string& path, int error,
                    const std::string& detail) {
  std::string m = who + ": " + op + " " + path + ": " + std::strerror(error);
  if (!detail.empty()) m += " (" + detail + ")";
  return m;
}

}  // namespace

FileError::FileError(const std::string& who, const std::string& op, const std::string& path, int error,
                     const std::string& detail)
    : std::runtime_error(message(who, op, path, error, detail)), path_(path), error_(error) {}

void check_ancestors(IoEnv& env, const std::string& dir, const std::string& who) {
  std::error_code ec;
  const fs::path given = fs::absolute(dir, ec).lexically_normal();
  if (ec) throw FileError(who, "resolve", dir, ec.value());
  std::vector<fs::path> chains{given};
  if (fs::path real = fs::weakly_canonical(given, ec); !ec && real != given) chains.push_back(real);
  for (const fs::path& chain : chains) {
    for (fs::path a = chain.parent_path(); !a.empty(); a = a.parent_path()) {
      FileInfo st;
      // A link along the given path is judged by what it resolves to (the second chain).
      if (env.lstat(a.string(), st) == 0 && st.kind == FileInfo::Kind::Directory && (st.mode & S_IWOTH)) {
        const bool sticky_and_owned = (st.mode & S_ISVTX) && (st.owner == 0 || st.owner == env.user());
        if (!sticky_and_owned)
          throw FileError(who, "use directory", dir, EPERM,
                          "its ancestor " + a.string() + " is writable by every user" +
                              ((st.mode & S_ISVTX) ? " and owned by another user (uid " + std::to_string(st.owner) + ")"
                                                   : " and not sticky") +
                              ", so another user could replace what lies in it; chmod o-w " + a.string());
      }
      if (a == a.parent_path()) break;
    }
  }
}

bool path_inside(const std::string& path, const std::string& dir) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  const fs::path d = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  if (ec) return false;
  const fs::path rel = p.lexically_relative(d);
  return !rel.empty() && *rel.begin() != "..";
}

void ensure_own_directory(IoEnv& env, const std::string& dir, const std::string& who) {
  check_ancestors(env, dir, who);
  FileInfo st;
  int r = env.lstat(dir, st);
  if (r == -ENOENT) {
    r = env.make_dir(dir, 0700);
    if (r < 0) throw FileError(who, "create directory", dir, -r);
    r = env.lstat(dir, st);
  }
  if (r < 0) throw FileError(who, "stat directory", dir, -r);
  if (st.kind == FileInfo::Kind::Symlink)
    throw FileError(who, "use directory", dir, ELOOP, "it is a symbolic link; zinf does not follow links here");
  if (st.kind != FileInfo::Kind::Directory) throw FileError(who, "use directory", dir, ENOTDIR);
  if (st.owner != env.user())
    throw FileError(who, "use directory", dir, EPERM,
                    "owned by uid " + std::to_string(st.owner) + ", not by this user (uid " +
                        std::to_string(env.user()) + ")");
  if (st.mode & 002) throw FileError(who, "use directory", dir, EPERM, "writable by every user; chmod o-w it");
}

int open_own_file(IoEnv& env, const std::string& path, int flags, mode_t mode, const std::string& who) {
  int fd = env.open(path, flags | O_NOFOLLOW, mode);
  if (fd == -ELOOP) throw FileError(who, "open", path, ELOOP, "it is a symbolic link; zinf does not follow links here");
  if (fd < 0) throw FileError(who, "open", path, -fd);
  ScopedFd guard{env, fd};
  FileInfo st;
  int r = env.fstat(fd, st);
  if (r < 0) throw FileError(who, "stat", path, -r);
  if (st.kind != FileInfo::Kind::Regular) throw FileError(who, "open", path, EINVAL, "not a regular file");
  if (st.owner != env.user())
    throw FileError(who, "open", path, EPERM,
                    "owned by uid " + std::to_string(st.owner) + ", not by this user (uid " +
                        std::to_string(env.user()) + ")");
  return guard.release();
}

void fsync_checked(IoEnv& env, int fd, const std::string& path, const std::string& who) {
  int r = env.fsync(fd);
  if (r < 0) throw FileError(who, "fsync", path, -r);
}

void fsync_directory(IoEnv& env, const std::string& dir, const std::string& who) {
  int fd = env.open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
  if (fd < 0) throw FileError(who, "open directory to fsync", dir, -fd);
  ScopedFd guard{env, fd};
  fsync_checked(env, fd, dir, who);
}

std::string read_own_file(IoEnv& env, const std::string& path, const std::string& who, uint64_t limit) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise block before open_own_file can refuse it.
  ScopedFd f{env, open_own_file(env, path, O_RDONLY | O_NONBLOCK, 0, who)};
  FileInfo st;
  int r = env.fstat(f.fd, st);
  if (r < 0) throw FileError(who, "stat", path, -r);
  const auto too_large = [&] {
    return FileError(who, "read", path, EFBIG,
                     "larger than " + std::to_string(limit) + " bytes, the most zinf reads from such a file");
  };
  if (uint64_t(st.size) > limit) throw too_large();
  // One byte more than the size: a file that grew since fstat is caught, not read without end.
  std::string text(size_t(st.size) + 1, '\0');
  int64_t n = env.pread(f.fd, text.data(), text.size(), 0);
  if (n < 0) throw FileError(who, "read", path, int(-n));
  if (uint64_t(n) > limit) throw too_large();
  text.resize(size_t(n));
  return text;
}

DirLock::DirLock(IoEnv& env, const std::string& dir, const std::string& who)
    : DirLock(env, dir + "/.lock", dir, who, "two runs must not share a directory") {}

std::unique_ptr<DirLock> DirLock::for_output(IoEnv& env, const std::string& path, const std::string& who) {
  return std::unique_ptr<DirLock>(
      new DirLock(env, path + ".lock", path, who, "two commands must not write one output at once"));
}

DirLock::DirLock(IoEnv& env, const std::string& path, const std::string& locked, const std::string& who,
                 const std::string& sharing)
    : env_(env) {
  ScopedFd f{env, open_own_file(env, path, O_RDWR | O_CREAT, 0600, who)};
  int r = env.lock(f.fd);
  if (r == -EWOULDBLOCK) {
    std::vector<char> holder(256, '\0');
    int64_t n = env.pread(f.fd, holder.data(), holder.size() - 1, 0);
    std::string who_holds = n > 0 ? std::string(holder.data(), size_t(n)) : std::string("another process");
    while (!who_holds.empty() && (who_holds.back() == '\n' || who_holds.back() == ' ')) who_holds.pop_back();
    throw FileError(who, "lock", locked, EBUSY, "in use by " + who_holds + "; " + sharing);
  }
  if (r < 0) throw FileError(who, "lock", path, -r);
  const std::string me = "zinf " + env.process() + "\n";
  r = env.truncate(f.fd, 0);
  if (r < 0) throw FileError(who, "truncate", path, -r);
  int64_t w = env.pwrite(f.fd, me.data(), me.size(), 0);
  if (w < 0) throw FileError(who, "write", path, int(-w));
  fd_ = f.release();
}

DirLock::~DirLock() {
  if (fd_ >= 0) env_.close(fd_);
}

}  // namespace zinf::engine
