// StagingCache hands out page-aligned host buffers for the data a step moves between tiers (shards
// read from NVMe, gathered parameters, gradients on their way, optimizer sub-groups) and takes them
// back for the next task that needs the same size, so a training step reuses the memory of the step
// before it instead of faulting fresh pages in. On the machines this runs on, first touch of 4 KiB
// pages runs at 0.2-0.3 GB/s and O_DIRECT transfers into 4 KiB pages are several times slower than
// into 2 MiB ones (both measured on the 2-vCPU development machines), so blocks come from
// 2 MiB-aligned mappings advised as huge pages and touched once when mapped.
//
// Sizes are rounded to a class of whole pages: eight classes per doubling from 32 KiB to 256 KiB,
// 32 above (a block is at most an eighth, then a 32nd, over what was asked), whole 2 MiB pages from
// 64 MiB up. Blocks of 2 MiB and under are carved, whatever their class, from the smallest remnant
// of a 2 MiB slab they fit in (a new slab when none does), so they sit on huge pages and the slabs
// hold close to what their blocks are worth; a larger block is a mapping of its own. Powers of two
// in slabs of one class each handed out up to twice what was asked (on a 12.6M-parameter GPT,
// 106 MB of blocks for 77 MB of buffers), and the Program's accounting counts the bytes asked for;
// blocks of 256 KiB to 2 MiB in mappings of their own fit but cost 3 % of a step with states on
// NVMe (4 KiB pages). A returned block goes to its class's free list and is handed out again only
// for the same class. What is mapped is bounded by a limit: the sum of the budgets the users of the
// cache declare (a Trainer declares its Program's host peak, plus its device peak on the CPU
// backend), or, when none is declared, the most ever in use at once. Before a new mapping would
// take the mapped bytes over the limit, free large blocks are unmapped (largest first), then slabs
// none of whose blocks is out, until it fits. So the mapped bytes stay within max(limit, in use +
// the request) plus the free blocks and remnants of slabs that still have a block out. When a
// block is asked for at the limit and a larger one of its kind (carved or large) is free, the
// larger one is cut to size instead (a carved block's tail becomes a remnant of its slab; a large
// block's tail is unmapped and its head keeps its touched huge pages), so a size that follows a larger one reuses memory rather than unmap and fault in a fresh
// mapping. A step whose buffers change size from phase to phase still re-maps some of them instead
// of keeping every size's most at once (carving many sizes out of shared mappings fragmented:
// 8.1 GB mapped for 6.4 GB in use at 2.5x RAM). Memory is also unmapped by trim() and when the
// cache is destroyed. All methods are thread-safe (one mutex: a task allocates a handful of
// buffers, each far more expensive to fill than to lock for).
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
  // Declares (or, with remove_budget, withdraws) bytes a user of the cache plans to have in it at
  // most; the limit on what is mapped is the sum of the declared budgets (none: the most in use).
  void add_budget(uint64_t bytes);
  void remove_budget(uint64_t bytes);

  static size_t size_class(size_t bytes);

  struct Stats {
    uint64_t mapped_bytes = 0;     // held from the kernel
    uint64_t in_use_bytes = 0;     // handed out (class sizes)
    uint64_t peak_in_use_bytes = 0;  // the most handed out at once since the last reset_peak()
    uint64_t maps = 0;             // mmap calls so far: stops growing once steps repeat
    uint64_t allocations = 0;
    uint64_t budget_bytes = 0;     // the declared budgets' sum (0: none declared)
    uint64_t unmapped_for_limit = 0;  // bytes of free blocks and empty slabs unmapped to stay within the limit
    uint64_t cut_to_size = 0;      // blocks handed out by cutting a larger free one (a large block's tail
                                   // counts above; a carved block's becomes a remnant of its slab)
  };
  Stats stats() const;
  // Starts peak_in_use_bytes again from what is handed out now.
  void reset_peak();

private:
  struct Mapping {
    size_t bytes;
    bool slab;   // a 2 MiB slab that blocks of 2 MiB and under are carved from; else one large block
    size_t out;  // a slab's blocks handed out and not yet released
  };
  // A block of class `cls` (2 MiB or under) from the smallest slab remnant it fits in, or a new slab.
  std::byte* carve(size_t cls);
  // Unmaps a slab none of whose blocks is out, with its free blocks and remnants; the next mapping.
  std::map<std::byte*, Mapping>::iterator unmap_slab(std::map<std::byte*, Mapping>::iterator it);
  // The slab that a carved block lies in.
  Mapping& slab_of(const std::byte* p);
  // A new mapping of `bytes`, a slab or one large block, within the limit where free large blocks allow.
  std::byte* map_new(size_t bytes, bool slab);
  // Unmaps free large blocks, largest first, until `bytes` more fit within the limit or none is left.
  void make_room(size_t bytes);
  uint64_t limit() const { return stats_.budget_bytes > 0 ? stats_.budget_bytes : high_water_; }
  // The smallest free large block larger than `cls`, cut to `cls`; nullptr when there is none.
  std::byte* cut_larger_free(size_t cls);

  mutable std::mutex mu_;
  std::map<size_t, std::vector<std::byte*>> free_;  // class -> free blocks
  std::map<std::byte*, Mapping> mappings_;         // base -> mapping
  std::vector<std::pair<std::byte*, size_t>> remnants_;  // slab bytes not carved yet: start, length
  uint64_t high_water_ = 0;                         // the most in use at once, ever
  Stats stats_;
};

// A declared budget for the process-wide cache, withdrawn when it goes (StagingCache::add_budget).
class StagingBudget {
public:
  explicit StagingBudget(uint64_t bytes) : bytes_(bytes) { StagingCache::instance().add_budget(bytes_); }
  ~StagingBudget() { StagingCache::instance().remove_budget(bytes_); }
  StagingBudget(const StagingBudget&) = delete;
  StagingBudget& operator=(const StagingBudget&) = delete;

private:
  uint64_t bytes_;
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
