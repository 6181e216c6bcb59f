// StagingCache hands out page-aligned host buffers for the data a step moves between tiers (shards
// read from NVMe, gathered parameters, gradients on their way, optimizer sub-groups) and takes them
// back for the next task that needs the same size, so a training step reuses the memory of the step
// before it instead of faulting fresh pages in. On the machines this runs on, first touch of 4 KiB
// pages runs at 0.2-0.3 GB/s and O_DIRECT transfers into 4 KiB pages are several times slower than
// into 2 MiB ones (both measured on the 2-vCPU development machines), so blocks come from 2 MiB-aligned mappings advised as
// huge pages and touched once when mapped.
//
// Sizes are rounded to a class: powers of two from 4 KiB up to 2 MiB (carved out of 2 MiB slabs),
// multiples of 2 MiB above. A returned small block goes to its class's free list. Larger blocks are
// carved best-fit out of free ranges of mappings of at least 64 MiB, and a returned one merges with
// its free neighbours, so a step's buffers of many sizes share memory: what is mapped follows the
// most in use at once, not the sum of each size's most. Memory is unmapped only by trim() or when
// the cache is destroyed. All methods are thread-safe (one mutex: a task allocates a
// handful of buffers, each far more expensive to fill than to lock for).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace zinf::engine {

class StagingCache {
public:
  StagingCache() = default;
  ~StagingCache();
  StagingCache(const StagingCache&) = delete;
  StagingCache& operator=(const StagingCache&) = delete;

  // The process-wide cache that Staging vectors use.
  static StagingCache& instance();

  // At least `bytes` (>= 1) of 4 KiB-aligned, already touched memory; throws std::bad_alloc.
  void* allocate(size_t bytes);
  // Gives back a block from allocate(); `bytes` is the size it was asked for.
  void release(void* p, size_t bytes);
  // Unmaps every mapping none of whose blocks is out (slabs with a block in use stay).
  void trim();

  static size_t size_class(size_t bytes);

  struct Stats {
    uint64_t mapped_bytes = 0;     // held from the kernel
    uint64_t in_use_bytes = 0;     // handed out (class sizes)
    uint64_t peak_in_use_bytes = 0;  // the most handed out at once since the last reset_peak()
    uint64_t maps = 0;             // mmap calls so far: stops growing once steps repeat
    uint64_t allocations = 0;
  };
  Stats stats() const;
  // Starts peak_in_use_bytes again from what is handed out now.
  void reset_peak();

private:
  struct Mapping {
    std::byte* base;
    size_t bytes;
    size_t block;   // class of the blocks carved from it; 0: a mapping for large blocks
  };
  void map_class(size_t cls);
  std::byte* take_large(size_t cls);
  void give_large(std::byte* p, size_t cls);

  mutable std::mutex mu_;
  std::map<size_t, std::vector<std::byte*>> free_;  // class -> free blocks (2 MiB and under)
  std::map<std::byte*, size_t> large_free_;         // free ranges of the large mappings, by address
  std::map<std::byte*, size_t> large_maps_;         // the large mappings: base -> bytes
  std::vector<Mapping> mappings_;
  Stats stats_;
};

// The construct() of an allocator whose vectors leave new elements default-initialized (arithmetic
// types as they are): a staging or device buffer is filled by the transfer, collective or kernel it
// is made for, and zeroing it first would be one more pass over memory on a hot path. Where zeros
// are meant, the caller fills them.
struct DefaultInitialize {
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// An allocator for std::vector that draws on StagingCache::instance().
template <typename T>
struct StagingAllocator : DefaultInitialize {
  using value_type = T;
  StagingAllocator() = default;
  template <typename U>
  StagingAllocator(const StagingAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(StagingCache::instance().allocate(std::max<size_t>(n, 1) * sizeof(T))); }
  void deallocate(T* p, size_t n) { StagingCache::instance().release(p, std::max<size_t>(n, 1) * sizeof(T)); }
  template <typename U>
  bool operator==(const StagingAllocator<U>&) const { return true; }
};

template <typename T>
using Staging = std::vector<T, StagingAllocator<T>>;

}  // namespace zinf::engine
