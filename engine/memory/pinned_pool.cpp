#include "engine/memory/pinned_pool.hpp"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/program.hpp"

namespace zinf::engine {

namespace {

constexpr size_t kPage = core::kIoAlignmentBytes;

std::string mib(uint64_t bytes) {
  if (bytes == UINT64_MAX) return "unlimited";
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 20) + " MiB)";
}

std::string memlock_fix() {
  return "raise it with `ulimit -l unlimited` (or `memlock` in /etc/security/limits.conf, LimitMEMLOCK= "
         "for a systemd unit, --ulimit memlock=-1 for docker), or ask for a smaller pool";
}

}  // namespace

MemlockLimits current_memlock_limits() {
  MemlockLimits l;
  rlimit r{};
  if (getrlimit(RLIMIT_MEMLOCK, &r) == 0) l.limit_bytes = r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : uint64_t(r.rlim_cur);
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
    l.privileged = (caps >> 14) & 1u;  // CAP_IPC_LOCK
  }
  return l;
}

void* MlockHostMemory::allocate(size_t bytes, std::string& error) {
  MemlockLimits l = limits_();
  if (!l.privileged && l.limit_bytes < bytes) {
    error = "pinned pool needs " + mib(bytes) + " of page-locked memory but the memlock limit (RLIMIT_MEMLOCK) is " +
            mib(l.limit_bytes) + "; " + memlock_fix();
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    error = "pinned pool: mmap of " + mib(bytes) + " failed: " + std::strerror(errno);
    return nullptr;
  }
  // Huge pages make the first touch ~100x faster here and shrink the kernel's pinned-page lists.
  madvise(p, bytes, MADV_HUGEPAGE);
  if (mlock(p, bytes) != 0) {
    int e = errno;
    munmap(p, bytes);
    error = "pinned pool: mlock of " + mib(bytes) + " failed: " + std::strerror(e) + "; the memlock limit is " +
            mib(l.limit_bytes) + "; " + memlock_fix();
    return nullptr;
  }
  return p;
}

void MlockHostMemory::release(void* p, size_t bytes) {
  munlock(p, bytes);
  munmap(p, bytes);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    index_ = o.index_;
    data_ = o.data_;
    size_ = o.size_;
    o.pool_ = nullptr;
  }
  return *this;
}

void PinnedBuffer::reset() {
  if (pool_) pool_->release(index_);
  pool_ = nullptr;
}

namespace {

HostMemory& default_host_memory() {
  static MlockHostMemory m;
  return m;
}

}  // namespace

PinnedPool::PinnedPool(PinnedPoolOptions options) : PinnedPool(options, default_host_memory()) {}

PinnedPool::PinnedPool(PinnedPoolOptions options, HostMemory& memory)
    : memory_(memory), count_(options.count), size_((options.buffer_size + kPage - 1) / kPage * kPage), head_(0), available_(options.count) {
  if (count_ == 0 || size_ == 0) throw std::invalid_argument("pinned pool: buffer count and size must be positive");
  if (count_ >= kNone) throw std::invalid_argument("pinned pool: too many buffers");
  constexpr size_t kHuge = 2 << 20;
  arena_bytes_ = (count_ * size_ + kHuge - 1) / kHuge * kHuge;
  std::string error;
  arena_ = static_cast<std::byte*>(memory_.allocate(arena_bytes_, error));
  if (!arena_) throw std::runtime_error(error);
  next_ = std::make_unique<std::atomic<uint32_t>[]>(count_);
  for (size_t i = 0; i < count_; ++i) next_[i].store(i + 1 < count_ ? uint32_t(i + 1) : kNone, std::memory_order_relaxed);
  head_.store(0, std::memory_order_release);  // tag 0, index 0
}

PinnedPool::~PinnedPool() { memory_.release(arena_, arena_bytes_); }

PinnedBuffer PinnedPool::try_acquire() {
  uint64_t head = head_.load(std::memory_order_acquire);
  for (;;) {
    uint32_t index = uint32_t(head);
    if (index == kNone) return {};
    uint32_t next = next_[index].load(std::memory_order_relaxed);
    uint64_t desired = ((head >> 32) + 1) << 32 | next;
    if (head_.compare_exchange_weak(head, desired, std::memory_order_acq_rel, std::memory_order_acquire)) {
      available_.fetch_sub(1, std::memory_order_relaxed);
      return PinnedBuffer(this, index, arena_ + size_t(index) * size_, size_);
    }
  }
}

PinnedBuffer PinnedPool::acquire() {
  for (;;) {
    uint32_t seen = returns_.load(std::memory_order_acquire);
    if (PinnedBuffer b = try_acquire()) return b;
    // seq_cst on both sides: either this sees the return, or the returner sees this sleeper.
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (returns_.load(std::memory_order_seq_cst) == seen) returns_.wait(seen, std::memory_order_seq_cst);
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void PinnedPool::release(uint32_t index) {
  uint64_t head = head_.load(std::memory_order_relaxed);
  for (;;) {
    next_[index].store(uint32_t(head), std::memory_order_relaxed);
    uint64_t desired = ((head >> 32) + 1) << 32 | index;
    if (head_.compare_exchange_weak(head, desired, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
  }
  available_.fetch_add(1, std::memory_order_relaxed);
  returns_.fetch_add(1, std::memory_order_seq_cst);
  // Only a sleeping acquire() needs the futex wake; the common path stays out of the kernel.
  if (sleepers_.load(std::memory_order_seq_cst) != 0) returns_.notify_all();
}

std::vector<iovec> PinnedPool::regions() const {
  std::vector<iovec> out;
  // io_uring takes registered buffers of at most 1 GiB; cut between pool buffers so each one
  // lies inside a single region.
  constexpr size_t kLimit = size_t(1) << 30;
  const size_t kMax = size_ <= kLimit ? kLimit / size_ * size_ : kLimit;
  for (size_t off = 0; off < count_ * size_; off += kMax)
    out.push_back({arena_ + off, std::min(kMax, count_ * size_ - off)});
  return out;
}

}  // namespace zinf::engine
