// The real IoEnv: thin wrappers over POSIX calls and liburing, nothing more, so that what the
// fault-injection tests replace is exactly the system boundary.
#include <dirent.h>
#include <fcntl.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/io/io_env.hpp"

namespace zinf::engine {
namespace {

int neg_errno() { return errno ? -errno : -EIO; }

class UringRing final : public IoRing {
public:
  UringRing() = default;
  ~UringRing() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }
  int init(unsigned entries) {
    int r = io_uring_queue_init(entries, &ring_, 0);
    ready_ = r == 0;
    return r;
  }
  UringRing(const UringRing&) = delete;
  UringRing& operator=(const UringRing&) = delete;

  int register_file_table(unsigned slots) override { return io_uring_register_files_sparse(&ring_, slots); }
  int update_file(unsigned slot, int fd) override {
    int r = io_uring_register_files_update(&ring_, slot, &fd, 1);
    return r < 0 ? r : 0;
  }
  int register_buffers(std::span<const iovec> buffers) override {
    return io_uring_register_buffers(&ring_, buffers.data(), unsigned(buffers.size()));
  }
  int unregister_buffers() override { return io_uring_unregister_buffers(&ring_); }

  bool push(const IoOp& op) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) return false;
    switch (op.kind) {
      case IoOp::Kind::Read:
        if (op.buffer_index >= 0)
          io_uring_prep_read_fixed(sqe, op.file, op.data, op.length, op.offset, op.buffer_index);
        else
          io_uring_prep_read(sqe, op.file, op.data, op.length, op.offset);
        break;
      case IoOp::Kind::Write:
        if (op.buffer_index >= 0)
          io_uring_prep_write_fixed(sqe, op.file, op.data, op.length, op.offset, op.buffer_index);
        else
          io_uring_prep_write(sqe, op.file, op.data, op.length, op.offset);
        break;
      case IoOp::Kind::Nop: io_uring_prep_nop(sqe); break;
    }
    if (op.fixed_file && op.kind != IoOp::Kind::Nop) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, op.tag);
    return true;
  }

  int submit() override { return io_uring_submit(&ring_); }

  int wait(std::span<IoCompletion> out) override {
    io_uring_cqe* cqe = nullptr;
    int r;
    do r = io_uring_wait_cqe(&ring_, &cqe);
    while (r == -EINTR);
    if (r < 0) return r;
    int n = 0;
    unsigned head;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (size_t(n) == out.size()) break;
      out[size_t(n)] = {io_uring_cqe_get_data64(cqe), cqe->res};
      ++n;
    }
    io_uring_cq_advance(&ring_, unsigned(n));
    return n;
  }

private:
  io_uring ring_{};
  bool ready_ = false;
};

FileInfo info(const struct stat& st) {
  FileInfo f;
  f.kind = S_ISDIR(st.st_mode)   ? FileInfo::Kind::Directory
           : S_ISREG(st.st_mode) ? FileInfo::Kind::Regular
           : S_ISLNK(st.st_mode) ? FileInfo::Kind::Symlink
                                 : FileInfo::Kind::Other;
  f.owner = st.st_uid;
  f.mode = st.st_mode & 07777;
  f.device = uint64_t(st.st_dev);
  f.inode = uint64_t(st.st_ino);
  f.size = st.st_size;
  return f;
}

class PosixIoEnv final : public IoEnv {
public:
  int make_dir(const std::string& path, mode_t mode) override {
    if (::mkdir(path.c_str(), mode) == 0) return 0;
    return errno == EEXIST ? 0 : neg_errno();
  }
  int lstat(const std::string& path, FileInfo& out) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return neg_errno();
    out = info(st);
    return 0;
  }
  int fstat(int fd, FileInfo& out) override {
    struct stat st;
    if (::fstat(fd, &st) != 0) return neg_errno();
    out = info(st);
    return 0;
  }
  int open(const std::string& path, int flags, mode_t mode) override {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    return fd >= 0 ? fd : neg_errno();
  }
  int close(int fd) override { return ::close(fd) == 0 ? 0 : neg_errno(); }
  int allocate(int fd, uint64_t offset, uint64_t length) override {
    int r = ::posix_fallocate(fd, off_t(offset), off_t(length));
    return -r;
  }
  int64_t file_size(int fd) override {
    struct stat st;
    if (::fstat(fd, &st) != 0) return neg_errno();
    return st.st_size;
  }
  int remove(const std::string& path) override { return ::unlink(path.c_str()) == 0 ? 0 : neg_errno(); }
  int64_t pread(int fd, void* data, uint64_t length, uint64_t offset) override {
    uint64_t done = 0;
    while (done < length) {
      ssize_t r = ::pread(fd, static_cast<char*>(data) + done, length - done, off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return neg_errno();
      if (r == 0) break;
      done += uint64_t(r);
    }
    return int64_t(done);
  }
  int64_t pwrite(int fd, const void* data, uint64_t length, uint64_t offset) override {
    uint64_t done = 0;
    while (done < length) {
      ssize_t r = ::pwrite(fd, static_cast<const char*>(data) + done, length - done, off_t(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return neg_errno();
      if (r == 0) return -EIO;
      done += uint64_t(r);
    }
    return int64_t(done);
  }
  int fsync(int fd) override { return ::fsync(fd) == 0 ? 0 : neg_errno(); }
  int lock(int fd) override {
    int r;
    do r = ::flock(fd, LOCK_EX | LOCK_NB);
    while (r != 0 && errno == EINTR);
    return r == 0 ? 0 : neg_errno();
  }
  int truncate(int fd, uint64_t length) override { return ::ftruncate(fd, off_t(length)) == 0 ? 0 : neg_errno(); }
  int rename(const std::string& from, const std::string& to) override {
    return ::rename(from.c_str(), to.c_str()) == 0 ? 0 : neg_errno();
  }
  int exchange(const std::string& a, const std::string& b) override {
    return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0 ? 0 : neg_errno();
  }
  int open_at(int dir, const std::string& name, int flags, mode_t mode) override {
    int fd = ::openat(dir, name.c_str(), flags | O_CLOEXEC | O_NOFOLLOW, mode);
    return fd >= 0 ? fd : neg_errno();
  }
  int make_dir_at(int dir, const std::string& name, mode_t mode) override {
    return ::mkdirat(dir, name.c_str(), mode) == 0 ? 0 : neg_errno();
  }
  int lstat_at(int dir, const std::string& name, FileInfo& out) override {
    struct stat st;
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return neg_errno();
    out = info(st);
    return 0;
  }
  int remove_at(int dir, const std::string& name, bool directory) override {
    return ::unlinkat(dir, name.c_str(), directory ? AT_REMOVEDIR : 0) == 0 ? 0 : neg_errno();
  }
  int rename_at(int dir, const std::string& from, const std::string& to) override {
    return ::renameat(dir, from.c_str(), dir, to.c_str()) == 0 ? 0 : neg_errno();
  }
  int exchange_at(int dir, const std::string& a, const std::string& b) override {
    return ::renameat2(dir, a.c_str(), dir, b.c_str(), RENAME_EXCHANGE) == 0 ? 0 : neg_errno();
  }
  int list_at(int dir, std::vector<std::string>& names) override {
    // A descriptor of its own for the listing: fdopendir takes it over, and closedir closes it.
    int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return neg_errno();
    DIR* d = ::fdopendir(fd);
    if (!d) {
      int e = errno;
      ::close(fd);
      return -e;
    }
    names.clear();
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    int e = errno;
    ::closedir(d);
    return -e;
  }
  uid_t user() override { return ::geteuid(); }
  std::string process() override {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
    return "pid " + std::to_string(::getpid()) + " on host " + host;
  }
  std::unique_ptr<IoRing> make_ring(unsigned entries, int& error) override {
    auto ring = std::make_unique<UringRing>();
    error = ring->init(entries);
    if (error < 0) return nullptr;
    return ring;
  }
};

}  // namespace

IoEnv& default_io_env() {
  static PosixIoEnv env;
  return env;
}

}  // namespace zinf::engine
