// PinnedPool is a fixed set of equal, page-locked host buffers, allocated once from one arena
// and checked out and returned by lanes with no allocation and no system call (a lock-free
// free list). The pool owns the arena; a PinnedBuffer is a move-only loan that goes back to the
// pool when destroyed, and must not outlive the pool. All methods are thread-safe.
//
// Where the page-locked memory comes from is a HostMemory: mlock here; a CUDA build supplies one
// that calls cudaHostAlloc so copies to the GPU run at full PCIe speed (the CUDA backend's issue).
#pragma once
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/run_config.hpp"

namespace zinf::engine {

class HostMemory {
public:
  virtual ~HostMemory() = default;
  virtual const char* kind() const = 0;
  // `bytes` of page-locked memory, aligned to at least 4 KiB, touched and ready to use; or
  // nullptr with `error` saying what limit was hit and how to raise it.
  virtual void* allocate(size_t bytes, std::string& error) = 0;
  virtual void release(void* p, size_t bytes) = 0;
};

// What the kernel allows this process to lock. `privileged` is CAP_IPC_LOCK, which lifts the limit.
struct MemlockLimits {
  uint64_t limit_bytes = 0;  // RLIMIT_MEMLOCK soft limit; UINT64_MAX when unlimited
  bool privileged = false;
};
MemlockLimits current_memlock_limits();

// mmap + MADV_HUGEPAGE + mlock. Refuses up front, with the limit and the fix, when the memlock
// limit is too low, instead of letting a later mlock or io_uring registration fail.
class MlockHostMemory final : public HostMemory {
public:
  explicit MlockHostMemory(std::function<MemlockLimits()> limits = current_memlock_limits) : limits_(std::move(limits)) {}
  const char* kind() const override { return "mlock"; }
  void* allocate(size_t bytes, std::string& error) override;
  void release(void* p, size_t bytes) override;

private:
  std::function<MemlockLimits()> limits_;
};

struct PinnedPoolOptions {
  size_t count = 8;
  size_t buffer_size = 64 << 20;  // rounded up to a multiple of core::kIoAlignmentBytes (O_DIRECT)
};

class PinnedPool;

class PinnedBuffer {
public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& o) noexcept : pool_(o.pool_), index_(o.index_), data_(o.data_), size_(o.size_) { o.pool_ = nullptr; }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { reset(); }

  explicit operator bool() const { return pool_ != nullptr; }
  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  uint32_t index() const { return index_; }
  void reset();  // returns the buffer to its pool now

private:
  friend class PinnedPool;
  PinnedBuffer(PinnedPool* pool, uint32_t index, std::byte* data, size_t size) : pool_(pool), index_(index), data_(data), size_(size) {}
  PinnedPool* pool_ = nullptr;
  uint32_t index_ = 0;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

class PinnedPool {
public:
  // Allocates and locks count × buffer_size bytes now; throws std::runtime_error if it cannot.
  explicit PinnedPool(PinnedPoolOptions options, HostMemory& memory);
  explicit PinnedPool(PinnedPoolOptions options);  // with the process-wide MlockHostMemory
  ~PinnedPool();  // every buffer must have been returned
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A free buffer, or an empty PinnedBuffer when all are out. Never blocks, allocates or enters the kernel.
  PinnedBuffer try_acquire();
  // A free buffer, waiting for one to be returned if all are out (only then may it sleep).
  PinnedBuffer acquire();

  size_t count() const { return count_; }
  size_t buffer_size() const { return size_; }
  size_t available() const { return available_.load(std::memory_order_relaxed); }
  const char* memory_kind() const { return memory_.kind(); }
  // The arena as regions of at most 1 GiB, for NvmeStore::register_buffers.
  std::vector<iovec> regions() const;

private:
  friend class PinnedBuffer;
  void release(uint32_t index);

  static constexpr uint32_t kNone = 0xffffffffu;
  HostMemory& memory_;
  size_t count_, size_, arena_bytes_;
  std::byte* arena_ = nullptr;
  std::unique_ptr<std::atomic<uint32_t>[]> next_;  // free-list links
  std::atomic<uint64_t> head_;                     // (tag << 32) | index; the tag defeats ABA
  std::atomic<size_t> available_;
  std::atomic<uint32_t> returns_{0};  // bumped on every return; acquire() sleeps on it
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace zinf::engine
