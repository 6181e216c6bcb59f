// The CUDA backend's home of a state between steps: a flat array of a rank's shard space on the
// device (a block of the arena), in pinned host memory, or in a tensor of the NVMe store. read and
// write move ranges to and from host memory and return when done; the asynchronous forms return
// an NVMe transfer's handle, so that a sub-group's three optimizer states move together.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/program.hpp"
#include "engine/backend/cuda/cuda_check.hpp"
#include "engine/backend/cuda/cuda_device_arena.hpp"
#include "engine/backend/cuda/pinned_host.hpp"
#include "engine/io/nvme_store.hpp"

namespace zinf::engine::cuda {

template <typename T>
struct CudaHome {
  core::Tier tier = core::Tier::Device;
  DeviceBlock dev;
  PinnedArray<T> host;
  NvmeStore* store = nullptr;
  NvmeStore::TensorId id = 0;

  void init(CudaDeviceArena& arena, core::Tier t, int64_t n, NvmeStore* s, const std::string& name) {
    tier = t;
    if (t == core::Tier::Nvme) {
      store = s;
      id = s->create(name, uint64_t(n) * sizeof(T));
    } else if (t == core::Tier::Host) {
      host = PinnedArray<T>(size_t(n));
      std::memset(static_cast<void*>(host.data()), 0, size_t(n) * sizeof(T));
    } else {
      dev = arena.allocate(uint64_t(std::max<int64_t>(n, 1)) * sizeof(T), name + " (device home)");
      ZINF_CUDA_CHECK(cudaMemset(dev.data(), 0, size_t(n) * sizeof(T)));
    }
  }
  T* device(int64_t off) const { return tier == core::Tier::Device ? dev.as<T>() + off : nullptr; }
  T* host_ptr(int64_t off) const { return tier == core::Tier::Host ? host.data() + off : nullptr; }

  IoHandle read_async(int64_t off, int64_t n, T* dst, cudaStream_t s) const {
    const size_t bytes = size_t(n) * sizeof(T);
    if (tier == core::Tier::Nvme) return store->read(id, uint64_t(off) * sizeof(T), dst, bytes);
    if (tier == core::Tier::Host) {
      std::copy_n(host.data() + off, n, dst);
      return {};
    }
    ZINF_CUDA_CHECK(cudaMemcpyAsync(dst, device(off), bytes, cudaMemcpyDeviceToHost, s));
    ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
    return {};
  }
  IoHandle write_async(int64_t off, int64_t n, const T* src, cudaStream_t s) {
    const size_t bytes = size_t(n) * sizeof(T);
    if (tier == core::Tier::Nvme) return store->write(id, uint64_t(off) * sizeof(T), src, bytes);
    if (tier == core::Tier::Host) {
      std::copy_n(src, n, host.data() + off);
      return {};
    }
    ZINF_CUDA_CHECK(cudaMemcpyAsync(device(off), src, bytes, cudaMemcpyHostToDevice, s));
    ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
    return {};
  }
  void read(int64_t off, int64_t n, T* dst, cudaStream_t s) const {
    if (IoHandle h = read_async(off, n, dst, s); h.valid()) h.wait_or_throw();
  }
  void write(int64_t off, int64_t n, const T* src, cudaStream_t s) {
    if (IoHandle h = write_async(off, n, src, s); h.valid()) h.wait_or_throw();
  }
};

}  // namespace zinf::engine::cuda
