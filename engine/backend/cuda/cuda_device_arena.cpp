#include "engine/backend/cuda/cuda_device_arena.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_check.hpp"

namespace zinf::engine::cuda {

ArenaAllocator::ArenaAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity / alignment * alignment), alignment_(alignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

uint64_t ArenaAllocator::allocate(uint64_t bytes, const std::string& what) {
  const uint64_t need = std::max<uint64_t>(alignment_, (bytes + alignment_ - 1) / alignment_ * alignment_);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t off = it->first, left = it->second - need;
    free_.erase(it);
    if (left) free_[off + need] = left;
    used_[off] = need;
    in_use_ += need;
    peak_ = std::max(peak_, in_use_);
    return off;
  }
  throw ArenaFull(fmt::format("device memory: cannot allocate {} bytes for {}: {} of {} bytes in use, largest free "
                              "block {} bytes (the device arena's budget is {} bytes)",
                              bytes, what, in_use_, capacity_, largest_free_locked(), capacity_));
}

void ArenaAllocator::free(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto u = used_.find(offset);
  if (u == used_.end()) throw std::logic_error(fmt::format("device arena: offset {} is not allocated", offset));
  uint64_t off = u->first, size = u->second;
  in_use_ -= size;
  used_.erase(u);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += size;
      return;
    }
  }
  free_[off] = size;
}

uint64_t ArenaAllocator::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}
uint64_t ArenaAllocator::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}
void ArenaAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = in_use_;
}
uint64_t ArenaAllocator::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return largest_free_locked();
}
uint64_t ArenaAllocator::largest_free_locked() const {
  uint64_t m = 0;
  for (const auto& [off, size] : free_) m = std::max(m, size);
  return m;
}

DeviceBlock& DeviceBlock::operator=(DeviceBlock&& o) noexcept {
  if (this != &o) {
    reset();
    arena_ = o.arena_;
    offset_ = o.offset_;
    bytes_ = o.bytes_;
    ptr_ = o.ptr_;
    o.arena_ = nullptr;
    o.ptr_ = nullptr;
  }
  return *this;
}

void DeviceBlock::reset() {
  if (!arena_) return;
  arena_->alloc_.free(offset_);
  arena_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

CudaDeviceArena::CudaDeviceArena(uint64_t capacity) : alloc_(capacity) {
  if (alloc_.capacity() == 0) return;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, alloc_.capacity());
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(fmt::format("device memory: cudaMalloc of the {}-byte device arena failed: {}",
                                         alloc_.capacity(), cudaGetErrorString(e)));
  }
  base_ = static_cast<std::byte*>(p);
}

CudaDeviceArena::~CudaDeviceArena() {
  if (base_) cudaFree(base_);
}

DeviceBlock CudaDeviceArena::allocate(uint64_t bytes, const std::string& what) {
  DeviceBlock b;
  b.offset_ = alloc_.allocate(bytes, what);
  b.arena_ = this;
  b.bytes_ = bytes;
  b.ptr_ = base_ + b.offset_;
  return b;
}

}  // namespace zinf::engine::cuda
