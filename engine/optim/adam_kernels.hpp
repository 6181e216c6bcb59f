// Internal to engine/optim: the per-step coefficients and the SIMD kernels' entry points, shared by
// cpu_adam.cpp (reference, dispatch) and adam_simd.cpp (target-specific code). Stateless.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/bf16.hpp"
#include "engine/fp_contract.hpp"

namespace zinf::engine::adam_detail {

// Computed once per step in double, then rounded to float, identically for every path.
struct Coeffs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float step_size;      // lr / (1 - beta1^t)
  float inv_sqrt_bc2;   // 1 / sqrt(1 - beta2^t)
  float eps;
  float decay;          // lr * weight_decay for AdamW, else 0
  float l2;             // weight_decay for Adam, else 0
};

struct Arrays {
  float* master;
  float* m;
  float* v;
  const void* grad;  // float or bf16
  bf16* param_out;   // may be null
};

void adam_avx2_f32(const Coeffs& c, Arrays a, size_t begin, size_t end);
void adam_avx2_bf16(const Coeffs& c, Arrays a, size_t begin, size_t end);
void adam_avx512_f32(const Coeffs& c, Arrays a, size_t begin, size_t end);
void adam_avx512_bf16(const Coeffs& c, Arrays a, size_t begin, size_t end);

// a*b + c written as the kernels write it (scalar, AVX2 and AVX-512 intrinsics), compiled in the
// kernels' translation unit with FMA available to the target: each returns the twice-rounded
// result unless the compiler contracts it into one fused operation. The AVX2 and AVX-512 probes
// run only where simd_supported says so.
float contract_probe_scalar(float a, float b, float c);
float contract_probe_avx2(float a, float b, float c);
float contract_probe_avx512(float a, float b, float c);

}  // namespace zinf::engine::adam_detail
