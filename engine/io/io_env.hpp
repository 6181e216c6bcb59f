// IoEnv is the one door from the NVMe store to the operating system (files, directories, io_uring
// rings), so a test can replace it with one that fails on purpose, like LevelDB's Env; methods
// return 0 or a count on success and -errno on failure, like the calls they wrap. An IoEnv is
// stateless and thread-safe; an IoRing takes one submitting and one reaping thread at a time
// (callers serialize each side), and the two may differ.
#pragma once
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace zinf::engine {

// One block-sized transfer, as handed to the kernel. `file` is a slot of the ring's registered
// file table when `fixed_file`, else a plain descriptor; `buffer_index` >= 0 names a registered
// buffer that contains [data, data + length).
struct IoOp {
  enum class Kind : uint8_t { Read, Write, Nop };
  Kind kind = Kind::Nop;
  bool fixed_file = false;
  int file = -1;
  int buffer_index = -1;
  void* data = nullptr;
  uint32_t length = 0;
  uint64_t offset = 0;
  uint64_t tag = 0;  // returned unchanged in the completion
};

// What lstat or fstat says about a path or an open file, in the terms the store checks.
struct FileInfo {
  enum class Kind : uint8_t { Directory, Regular, Symlink, Other };
  Kind kind = Kind::Other;
  uid_t owner = 0;
  mode_t mode = 0;  // permission bits, with the sticky bit (S_ISVTX)
  int64_t size = 0;
  uint64_t device = 0, inode = 0;  // which file it is: a directory replaced by another has other ones
};

struct IoCompletion {
  uint64_t tag = 0;
  int32_t result = 0;  // bytes transferred, or -errno
};

class IoRing {
public:
  virtual ~IoRing() = default;
  // Sizes the registered file table; slots start empty and are filled by update_file.
  virtual int register_file_table(unsigned slots) = 0;
  virtual int update_file(unsigned slot, int fd) = 0;  // fd -1 empties the slot
  virtual int register_buffers(std::span<const iovec> buffers) = 0;
  virtual int unregister_buffers() = 0;
  // Queues one op; false when the submission queue is full (call submit first).
  virtual bool push(const IoOp& op) = 0;
  virtual int submit() = 0;  // hands queued ops to the kernel; count or -errno
  // Blocks until at least one completion is ready, then returns up to `out.size()` of them.
  virtual int wait(std::span<IoCompletion> out) = 0;
};

class IoEnv {
public:
  virtual ~IoEnv() = default;
  virtual int make_dir(const std::string& path, mode_t mode) = 0;  // 0 or -EEXIST counts as there
  // lstat: a symbolic link is reported as one, never followed.
  virtual int lstat(const std::string& path, FileInfo& out) = 0;
  virtual int fstat(int fd, FileInfo& out) = 0;
  virtual int open(const std::string& path, int flags, mode_t mode) = 0;
  virtual int close(int fd) = 0;
  virtual int allocate(int fd, uint64_t offset, uint64_t length) = 0;  // fallocate, mode 0
  virtual int64_t file_size(int fd) = 0;
  virtual int remove(const std::string& path) = 0;
  // Blocking positional I/O for small metadata (checksum side files); loops over short counts.
  virtual int64_t pread(int fd, void* data, uint64_t length, uint64_t offset) = 0;
  virtual int64_t pwrite(int fd, const void* data, uint64_t length, uint64_t offset) = 0;
  virtual int fsync(int fd) = 0;
  // An exclusive advisory lock on the open file (flock, non-blocking): 0, -EWOULDBLOCK when another
  // open file description holds it. The lock ends when the descriptor is closed or the process dies.
  virtual int lock(int fd) = 0;
  virtual int truncate(int fd, uint64_t length) = 0;
  virtual int rename(const std::string& from, const std::string& to) = 0;
  // Swaps two existing paths atomically (renameat2 RENAME_EXCHANGE); -EINVAL where the file
  // system cannot.
  virtual int exchange(const std::string& a, const std::string& b) = 0;
  // The same calls relative to an open directory `dir` (openat, mkdirat, fstatat without following,
  // unlinkat, renameat and renameat2 within it): a path swapped for a link after the directory was
  // opened cannot redirect them. Each `name` is one component, never followed if it is a link.
  virtual int open_at(int dir, const std::string& name, int flags, mode_t mode) = 0;
  virtual int make_dir_at(int dir, const std::string& name, mode_t mode) = 0;  // -EEXIST if there
  virtual int lstat_at(int dir, const std::string& name, FileInfo& out) = 0;
  virtual int remove_at(int dir, const std::string& name, bool directory) = 0;  // an empty directory
  virtual int rename_at(int dir, const std::string& from, const std::string& to) = 0;
  virtual int exchange_at(int dir, const std::string& a, const std::string& b) = 0;
  // The names in the open directory `dir`, without "." and "..", in no particular order.
  virtual int list_at(int dir, std::vector<std::string>& names) = 0;
  virtual uid_t user() = 0;              // the effective user id files must belong to
  virtual std::string process() = 0;     // "pid N on host H": who holds a lock
  // A ring with room for `entries` ops in flight, or nullptr with `error` set to -errno.
  virtual std::unique_ptr<IoRing> make_ring(unsigned entries, int& error) = 0;
};

// The real thing: POSIX calls and liburing.
IoEnv& default_io_env();

}  // namespace zinf::engine
