// CudaDeviceArena is the CUDA backend's device memory: one cudaMalloc of a fixed budget made at start,
// carved into blocks by an ArenaAllocator (first fit, 256-byte aligned, neighbours merged on free).
// Nothing else on the hot path calls cudaMalloc, so the budget is hard: an allocation that does not
// fit throws ArenaFull naming the bytes asked for, the bytes in use and the budget (the Executor
// turns it into an error naming the task). A DeviceBlock is a move-only loan returned on
// destruction; it must not outlive its arena. All methods are thread-safe.
//
// ArenaAllocator is plain C++ (offsets only), so its bookkeeping is tested without a GPU.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace zinf::engine::cuda {

class ArenaFull : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class ArenaAllocator {
public:
  explicit ArenaAllocator(uint64_t capacity, uint64_t alignment = 256);
  // Offset of a block of at least `bytes` (0 bytes gets the smallest block); throws ArenaFull.
  uint64_t allocate(uint64_t bytes, const std::string& what);
  void free(uint64_t offset);  // throws std::logic_error for an offset it did not hand out

  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;
  uint64_t peak() const;
  void reset_peak();  // the peak starts again from what is in use now
  uint64_t largest_free() const;

private:
  uint64_t largest_free_locked() const;
  uint64_t capacity_, alignment_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, merged with neighbours
  std::map<uint64_t, uint64_t> used_;
  uint64_t in_use_ = 0, peak_ = 0;
};

class CudaDeviceArena;

class DeviceBlock {
public:
  DeviceBlock() = default;
  DeviceBlock(DeviceBlock&& o) noexcept { *this = std::move(o); }
  DeviceBlock& operator=(DeviceBlock&& o) noexcept;
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  ~DeviceBlock() { reset(); }

  explicit operator bool() const { return arena_ != nullptr; }
  void* data() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  uint64_t bytes() const { return bytes_; }
  void reset();

private:
  friend class CudaDeviceArena;
  CudaDeviceArena* arena_ = nullptr;
  uint64_t offset_ = 0, bytes_ = 0;
  void* ptr_ = nullptr;
};

class CudaDeviceArena {
public:
  // cudaMalloc of `capacity` bytes on the current device; throws naming the bytes on failure.
  explicit CudaDeviceArena(uint64_t capacity);
  ~CudaDeviceArena();  // every block must have been returned
  CudaDeviceArena(const CudaDeviceArena&) = delete;
  CudaDeviceArena& operator=(const CudaDeviceArena&) = delete;

  DeviceBlock allocate(uint64_t bytes, const std::string& what);
  const ArenaAllocator& allocator() const { return alloc_; }
  ArenaAllocator& allocator() { return alloc_; }

private:
  friend class DeviceBlock;
  ArenaAllocator alloc_;
  std::byte* base_ = nullptr;
};

}  // namespace zinf::engine::cuda
