// Home: where a rank keeps a state between steps (a flat array of its shard space on the device,
// in host memory or in an NVMe store tensor), and the staging buffers its transfers go through.
// Used by the GPT CPU backend. Tasks of the NVMe lanes may read and write one Home at once, on
// disjoint ranges (the Program orders two writes of one range); otherwise the Program orders them.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/memory/cpu_device_arena.hpp"
#include "engine/memory/staging_cache.hpp"

namespace zinf::engine {

using core::Tier;

// A home that survives between steps: a flat array of a rank's shard space, in memory (device or
// host tier) or in a tensor of the NVMe store. A transfer of n elements at an aligned offset moves
// the whole padded span (core::shard_aligned(n), the padding after a shard belongs to nobody), so
// it goes to the disk without a bounce copy; the caller's buffer holds at least that many elements
// (a Staging vector of core::shard_aligned(n)).
template <typename T>
struct Home {
  Tier tier = Tier::Device;
  std::vector<T> mem;
  NvmeStore* store = nullptr;
  NvmeStore::TensorId id = 0;
  int64_t size = 0;
  CpuDeviceArena* arena = nullptr;  // a home on the device is charged to the device arena

  Home() = default;
  Home(const Home&) = delete;
  Home& operator=(const Home&) = delete;
  ~Home() {
    if (arena) arena->uncharge(mem.size() * sizeof(T));
  }

  void init(Tier t, int64_t n, NvmeStore* s, CpuDeviceArena& device, const std::string& name) {
    tier = t;
    size = n;
    if (t == Tier::Nvme) {
      store = s;
      id = s->create(name, uint64_t(n) * sizeof(T));
      return;
    }
    if (t == Tier::Device) {
      device.charge(size_t(n) * sizeof(T), name.c_str());
      arena = &device;
    }
    mem.assign(size_t(n), T{});
  }
  // Elements an NVMe transfer of [off, off + n) moves.
  int64_t span(int64_t off, int64_t n) const {
    if (off % core::kShardAlignment != 0) return n;
    return std::min(core::shard_aligned(n), size - off);
  }
  void read(int64_t off, int64_t n, T* dst) const {
    if (IoHandle h = read_async(off, n, dst); h.valid()) h.wait_or_throw();
  }
  void write(int64_t off, int64_t n, const T* src) {
    if (IoHandle h = write_async(off, n, src); h.valid()) h.wait_or_throw();
  }
  T* resident(int64_t off) { return tier == Tier::Nvme ? nullptr : mem.data() + off; }
  // Asynchronous forms: an NVMe transfer is submitted and its handle returned (memory tiers copy
  // at once and return an empty handle), so several states of one sub-group move together.
  IoHandle read_async(int64_t off, int64_t n, T* dst) const {
    if (tier == Tier::Nvme)
      return store->read(id, uint64_t(off) * sizeof(T), dst, uint64_t(span(off, n)) * sizeof(T));
    std::copy_n(mem.data() + off, n, dst);
    return {};
  }
  IoHandle write_async(int64_t off, int64_t n, const T* src) {
    if (tier == Tier::Nvme)
      return store->write(id, uint64_t(off) * sizeof(T), src, uint64_t(span(off, n)) * sizeof(T));
    std::copy_n(src, n, mem.data() + off);
    return {};
  }
};

// A staging buffer for n elements of a shard or sub-group: room for the padded span a Home moves.
// Its first n elements are for the data (left uninitialized: the transfer fills them); the padding
// is zero, so what lands in a home's padding is always the same.
template <typename T>
Staging<T> staging(int64_t n) {
  Staging<T> s(size_t(core::shard_aligned(n)));
  std::fill(s.begin() + n, s.end(), T{});
  return s;
}

inline void wait_all(std::initializer_list<IoHandle> handles) {
  for (const auto& h : handles)
    if (h.valid()) h.wait_or_throw();
}

}  // namespace zinf::engine
