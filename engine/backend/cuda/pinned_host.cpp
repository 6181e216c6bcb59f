#include "engine/backend/cuda/pinned_host.hpp"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "core/program.hpp"
#include "engine/backend/cuda/cuda_check.hpp"

namespace zinf::engine::cuda {

namespace {
constexpr size_t kPage = core::kIoAlignmentBytes;
size_t page_round(size_t bytes) { return std::max<size_t>(kPage, (bytes + kPage - 1) / kPage * kPage); }
}  // namespace

void* CudaHostMemory::allocate(size_t bytes, std::string& error) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, page_round(bytes), cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    error = fmt::format("cudaHostAlloc of {} bytes failed: {}", bytes, cudaGetErrorString(e));
    return nullptr;
  }
  std::memset(p, 0, page_round(bytes));
  return p;
}

void CudaHostMemory::release(void* p, size_t) { cudaFreeHost(p); }

void* pinned_alloc(size_t bytes) {
  CudaHostMemory m;
  std::string error;
  void* p = m.allocate(bytes, error);
  if (!p) throw std::runtime_error("pinned host memory: " + error);
  return p;
}

void pinned_free(void* p) { cudaFreeHost(p); }

PinnedLoan& PinnedLoan::operator=(PinnedLoan&& o) noexcept {
  if (this != &o) {
    reset();
    cache_ = o.cache_;
    p_ = o.p_;
    cap_ = o.cap_;
    o.cache_ = nullptr;
    o.p_ = nullptr;
  }
  return *this;
}

void PinnedLoan::reset() {
  if (cache_ && p_) cache_->give_back(p_, cap_);
  cache_ = nullptr;
  p_ = nullptr;
  cap_ = 0;
}

PinnedCache::~PinnedCache() {
  for (auto& [cap, p] : free_) pinned_free(p);
}

PinnedLoan PinnedCache::acquire(size_t bytes) {
  const size_t need = page_round(bytes);
  PinnedLoan loan;
  loan.cache_ = this;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.lower_bound(need);
    if (it != free_.end() && it->first <= 2 * need) {
      loan.p_ = it->second;
      loan.cap_ = it->first;
      free_.erase(it);
      return loan;
    }
  }
  loan.p_ = pinned_alloc(need);
  loan.cap_ = need;
  std::lock_guard<std::mutex> lock(mu_);
  pinned_ += need;
  return loan;
}

size_t PinnedCache::pinned_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pinned_;
}

void PinnedCache::give_back(void* p, size_t cap) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(cap, p);
}

}  // namespace zinf::engine::cuda
