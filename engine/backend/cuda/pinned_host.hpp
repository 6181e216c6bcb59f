// Page-locked host memory from cudaHostAlloc, so host<->device copies run by DMA at full PCIe speed
// and NVMe transfers land in it directly (it is page-aligned, as O_DIRECT needs).
//  - CudaHostMemory is the PinnedPool's HostMemory seam (engine/memory/pinned_pool.hpp) for CUDA builds.
//  - PinnedArray<T> is one owned, fixed allocation (a state's home on the host tier).
//  - PinnedCache hands out staging buffers of any size and takes them back for reuse: the first
//    step pins what it needs, later steps find it in the cache (no pinning on the hot path after
//    that). Loans are move-only and return themselves; the cache must outlive them.
// All thread-safe.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "engine/memory/pinned_pool.hpp"

namespace zinf::engine::cuda {

class CudaHostMemory final : public HostMemory {
public:
  const char* kind() const override { return "cudaHostAlloc"; }
  void* allocate(size_t bytes, std::string& error) override;
  void release(void* p, size_t bytes) override;
};

// cudaHostAlloc of `bytes` (rounded up to 4 KiB), zero-filled; throws naming the bytes.
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);

template <class T>
class PinnedArray {
public:
  PinnedArray() = default;
  explicit PinnedArray(size_t n) : p_(static_cast<T*>(pinned_alloc(n * sizeof(T)))), n_(n) {}
  PinnedArray(PinnedArray&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~PinnedArray() {
    if (p_) pinned_free(p_);
  }
  T* data() const { return p_; }
  size_t size() const { return n_; }

private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

class PinnedCache;

class PinnedLoan {
public:
  PinnedLoan() = default;
  PinnedLoan(PinnedLoan&& o) noexcept { *this = std::move(o); }
  PinnedLoan& operator=(PinnedLoan&& o) noexcept;
  PinnedLoan(const PinnedLoan&) = delete;
  PinnedLoan& operator=(const PinnedLoan&) = delete;
  ~PinnedLoan() { reset(); }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t capacity() const { return cap_; }
  explicit operator bool() const { return p_ != nullptr; }
  void reset();

private:
  friend class PinnedCache;
  PinnedCache* cache_ = nullptr;
  void* p_ = nullptr;
  size_t cap_ = 0;
};

class PinnedCache {
public:
  PinnedCache() = default;
  ~PinnedCache();  // frees the cached buffers; every loan must have come back
  PinnedCache(const PinnedCache&) = delete;
  PinnedCache& operator=(const PinnedCache&) = delete;

  // A buffer of at least `bytes`: a cached one no more than twice that size, or a new one.
  PinnedLoan acquire(size_t bytes);
  size_t pinned_bytes() const;

private:
  friend class PinnedLoan;
  void give_back(void* p, size_t cap);
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  size_t pinned_ = 0;
};

}  // namespace zinf::engine::cuda
