#include "engine/memory/cpu_device_arena.hpp"

#include <fmt/format.h>

#include "engine/memory/staging_cache.hpp"

namespace zinf::engine {

CpuDeviceArena::CpuDeviceArena(double budget_bytes) : budget_(budget_bytes) {
  if (!(budget_bytes >= 0)) throw std::invalid_argument(fmt::format("device arena: budget {} is negative", budget_bytes));
}

void CpuDeviceArena::add(size_t bytes, const char* what) {
  const int64_t now = live_.fetch_add(int64_t(bytes), std::memory_order_relaxed) + int64_t(bytes);
  if (double(now) > budget_ * (1.0 + 1e-9)) {
    live_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
    throw DeviceMemoryError(fmt::format("device memory over budget: {} of {} bytes would make {} bytes live, "
                                        "over the device budget of {:.0f} bytes",
                                        what, bytes, now, budget_));
  }
  int64_t p = peak_.load(std::memory_order_relaxed);
  while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

void* CpuDeviceArena::allocate(size_t bytes) {
  add(bytes, "an allocation");
  try {
    return StagingCache::instance().allocate(bytes);
  } catch (...) {
    live_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
    throw;
  }
}

void CpuDeviceArena::release(void* p, size_t bytes) {
  if (!p) return;
  StagingCache::instance().release(p, bytes);
  live_.fetch_sub(int64_t(bytes), std::memory_order_relaxed);
}

void CpuDeviceArena::charge(size_t bytes, const char* what) { add(bytes, what); }

void CpuDeviceArena::uncharge(size_t bytes) { live_.fetch_sub(int64_t(bytes), std::memory_order_relaxed); }

}  // namespace zinf::engine
