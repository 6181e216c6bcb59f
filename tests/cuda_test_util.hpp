// Helpers of the GPU tests: device buffers that upload and download std::vectors, seeded random
// inputs, and an elementwise closeness check that reports the worst element. Test-only.
#pragma once
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/bf16.hpp"
#include "engine/backend/cuda/cuda_check.hpp"

namespace zinf::test {

template <class T>
struct DeviceBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuf(size_t count) : n(count) {
    ZINF_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)));
    ZINF_CUDA_CHECK(cudaMemset(p, 0, std::max<size_t>(1, n) * sizeof(T)));
  }
  explicit DeviceBuf(const std::vector<T>& v) : DeviceBuf(v.size()) { upload(v); }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  void upload(const std::vector<T>& v) { ZINF_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> v(n);
    ZINF_CUDA_CHECK(cudaDeviceSynchronize());
    ZINF_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  operator T*() const { return p; }
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Values exactly representable in bf16, and their bf16 bits: the CPU reference runs on the former,
// the GPU kernels read the latter, so both see the same numbers.
inline std::vector<float> bf16_rounded(std::vector<float> v) {
  for (auto& x : v) x = engine::to_float(engine::to_bf16(x));
  return v;
}
inline std::vector<engine::bf16> to_bf16(const std::vector<float>& v) {
  std::vector<engine::bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = engine::to_bf16(v[i]);
  return out;
}

// |got - want| <= atol + rtol |want| everywhere; reports the worst element on failure.
inline void require_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                          const char* what) {
  REQUIRE(got.size() == want.size());
  size_t worst = 0, bad = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i]));
    const double excess = err - (atol + rtol * std::fabs(double(want[i])));
    if (excess > worst_excess || std::isnan(got[i])) {
      worst_excess = std::isnan(got[i]) ? INFINITY : excess;
      worst = i;
    }
    if (excess > 0 || std::isnan(got[i])) ++bad;
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements off; worst [" << worst << "] got " << got[worst]
            << " want " << want[worst] << " (atol " << atol << ", rtol " << rtol << ")");
  REQUIRE(bad == 0);
}

}  // namespace zinf::test
