// NvmeStore keeps named tensors in files under one directory and moves byte ranges between them
// and memory asynchronously through io_uring (O_DIRECT, registered files and buffers, requests
// split into blocks, many in flight over one or more rings). The store owns its files, rings and
// one completion thread per ring; callers own a request's memory and leave it untouched until the
// request completes. Every method is thread-safe, and any thread may poll or wait on any handle,
// so executor lanes can share one store (a submitting and a waiting thread may differ).
//
// Layout: one file per tensor (`<dir>/<name>.zt`, mode 0600), preallocated with fallocate to its
// size rounded up to 4 KiB. A file per tensor needs no extent table to persist or repair: the
// directory is the table, a reopened store finds tensors by name, and removing a tensor returns
// its space to the file system. fallocate up front keeps each file's extents contiguous and makes
// ENOSPC appear at create time rather than in the middle of a training step.
//
// Safety: the directory must be a real directory (not a link) of this user, tensor files are
// opened with O_NOFOLLOW and must be regular files of this user, and one store at a time holds
// the directory (an flock on <dir>/.lock naming the holder; a second store, in any process, is
// refused with an error that names the first).
#pragma once
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "core/program.hpp"
#include "core/run_config.hpp"
#include "engine/io/io_env.hpp"

namespace zinf::engine {

inline constexpr uint64_t kDirectIoAlignment = core::kIoAlignmentBytes;

struct NvmeStoreOptions {
  std::string dir;                 // created (last component only, mode 0700) if missing; locked
  uint64_t block_size = 1 << 20;   // largest single transfer; a multiple of kDirectIoAlignment
  unsigned queue_depth = 32;       // transfers in flight per ring
  unsigned rings = 1;
  bool checksums = false;          // CRC32C per 4 KiB page, verified on every read
  unsigned file_slots = 1024;      // registered-file table size; tensors beyond it use plain fds

  static NvmeStoreOptions from_run_config(const core::RunConfig& config, std::string dir);
};

// A failed synchronous operation (open, create, directory), naming the path and what was tried.
class IoError : public std::runtime_error {
public:
  IoError(std::string op, std::string path, int error);
  IoError(std::string op, std::string path, int error, const std::string& detail);
  struct Preformatted {};
  IoError(const std::string& message, std::string path, int error, Preformatted);  // message as is
  const std::string& op() const { return op_; }
  const std::string& path() const { return path_; }
  int error() const { return error_; }  // a positive errno value

private:
  std::string op_, path_;
  int error_;
};

// The outcome of an asynchronous request. `error` is a positive errno value (EIO for a short
// transfer or a checksum mismatch); `message` names the operation, path and byte range.
struct IoStatus {
  int error = 0;
  std::string message;
  bool ok() const { return error == 0; }
};

namespace detail {
struct IoRequest;
}

// A request in flight. Copyable; any copy may be polled or waited on from any thread. With
// checksums on, a read into the caller's own aligned memory is verified by the first wait(), on
// the waiting thread (idle meanwhile, and the next to touch the data), so that the store's
// completion thread keeps the queue full: done() says the transfer ended, wait() whether the
// bytes are good. Read the data only after wait().
class IoHandle {
public:
  IoHandle() = default;
  bool valid() const { return req_ != nullptr; }
  bool done() const;
  IoStatus wait() const;      // blocks until the request completes (and its checksums are verified)
  void wait_or_throw() const;  // wait(); throws std::runtime_error with the message on failure

  static IoHandle from_request(std::shared_ptr<detail::IoRequest> r) {
    IoHandle h;
    h.req_ = std::move(r);
    return h;
  }

private:
  std::shared_ptr<detail::IoRequest> req_;
};

class NvmeStore {
public:
  using TensorId = uint32_t;

  explicit NvmeStore(NvmeStoreOptions options, IoEnv& env = default_io_env());
  ~NvmeStore();  // waits for requests in flight; writes checksum side files
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Creates (or replaces) the tensor `name` of `bytes` bytes, preallocated and reading as zeros.
  TensorId create(const std::string& name, uint64_t bytes);
  // Opens a tensor written by an earlier store over the same directory; its size is the file's,
  // i.e. the created size rounded up to 4 KiB.
  TensorId open(const std::string& name);
  // Closes and deletes the tensor's file. No request on it may be in flight.
  void remove(TensorId id);
  uint64_t size(TensorId id) const;
  std::string path(TensorId id) const;

  // Registers memory regions (e.g. the pinned pool) so transfers inside them skip the kernel's
  // per-request page pinning. Call with no requests in flight; replaces earlier registrations.
  void register_buffers(std::span<const iovec> regions);

  // Byte ranges of any size at any offset inside the tensor, into or from memory at any address.
  // Ranges whose offset, length and address are all 4 KiB multiples go straight to the device;
  // others pass through an aligned bounce buffer (and a write reads the partly covered edge pages
  // first). Requests in flight together must not write the same 4 KiB page of one tensor.
  IoHandle read(TensorId id, uint64_t offset, void* dst, uint64_t length);
  IoHandle write(TensorId id, uint64_t offset, const void* src, uint64_t length);

  // Writes checksum side files and fsyncs every tensor file. No writes may be in flight.
  void flush();

  const NvmeStoreOptions& options() const { return options_; }

  struct Impl;

private:
  IoHandle submit(TensorId id, uint64_t offset, char* data, uint64_t length, bool is_write);

  NvmeStoreOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zinf::engine
