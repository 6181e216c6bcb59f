// CpuDeviceArena is the one gate to a rank's device memory: every device buffer a backend holds (homes
// kept on the device, fetched shards, gathered parameters, gradients, activations) is allocated
// through it, against a hard budget, the device budget of the rank's Program. An allocation that
// would go over the budget throws DeviceMemoryError saying how many bytes were asked for, how many
// were live and the budget; the Executor reports it as the failure of the task that asked, with the
// task's id. Going over is a bug, not a condition to handle: the planner checked the Program's
// buffers against the same budget, so a backend that needs more holds something the plan does not.
//
// On the CPU backend device memory is host memory, drawn from the StagingCache (reused, huge
// pages). Live and peak bytes count what was asked for. All methods are thread-safe.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/memory/staging_cache.hpp"

namespace zinf::engine {

class DeviceMemoryError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class CpuDeviceArena {
public:
  explicit CpuDeviceArena(double budget_bytes);
  CpuDeviceArena(const CpuDeviceArena&) = delete;
  CpuDeviceArena& operator=(const CpuDeviceArena&) = delete;

  // `bytes` of device memory, 4 KiB-aligned; throws DeviceMemoryError over the budget.
  void* allocate(size_t bytes);
  void release(void* p, size_t bytes);
  // Memory the backend holds outside allocate() (a home it keeps for the whole run) counts too.
  void charge(size_t bytes, const char* what);
  void uncharge(size_t bytes);

  double budget() const { return budget_; }
  int64_t live() const { return live_.load(std::memory_order_relaxed); }
  int64_t peak() const { return peak_.load(std::memory_order_relaxed); }
  void reset_peak() { peak_.store(live(), std::memory_order_relaxed); }

private:
  void add(size_t bytes, const char* what);

  double budget_;
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

// A std::vector allocator over a CpuDeviceArena; with no arena it is plain heap memory (the reference
// paths that run outside any Program). The arena travels with the vector on copy, move and swap,
// so a buffer is always given back to the arena it came from.
template <typename T>
struct DeviceAllocator : DefaultInitialize {  // elements default-initialized, as staging buffers
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  CpuDeviceArena* arena = nullptr;

  DeviceAllocator() = default;
  explicit DeviceAllocator(CpuDeviceArena* a) : arena(a) {}
  template <typename U>
  DeviceAllocator(const DeviceAllocator<U>& o) : arena(o.arena) {}

  T* allocate(size_t n) {
    if (!arena) return std::allocator<T>().allocate(n);
    return static_cast<T*>(arena->allocate(std::max<size_t>(n, 1) * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (!arena) return std::allocator<T>().deallocate(p, n);
    arena->release(p, std::max<size_t>(n, 1) * sizeof(T));
  }
  template <typename U>
  bool operator==(const DeviceAllocator<U>& o) const { return arena == o.arena; }
};

template <typename T>
using DeviceVector = std::vector<T, DeviceAllocator<T>>;

}  // namespace zinf::engine
