// Whole-tensor conversions between bf16 storage and fp32 working copies: parameters and gradients
// are moved and stored as bf16, kernels compute on fp32 (the paper's mixed precision). The caller
// owns both buffers; the functions keep no state and are thread-safe on disjoint buffers.
#pragma once
#include <cstdint>

#include "engine/bf16.hpp"

namespace zinf::engine::cpu {

inline void bf16_to_fp32(float* out, const bf16* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

inline void fp32_to_bf16(bf16* out, const float* in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

// Rounds an fp32 tensor to bf16 precision in place: what a round trip through bf16 storage does.
inline void round_to_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = to_float(to_bf16(x[i]));
}

}  // namespace zinf::engine::cpu
