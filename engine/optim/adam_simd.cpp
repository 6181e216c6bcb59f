// AVX2 and AVX-512 Adam kernels. Each function carries its own target attribute so the rest of
// the build stays portable; cpu_adam.cpp only calls one after checking the CPU supports it.
// Operation order mirrors adam_reference exactly (no FMA): see cpu_adam.hpp.
//
// bf16 rounding is done with integer ops rather than AVX512-BF16's vcvtneps2bf16: that
// instruction flushes fp32 denormals to zero, which would break bitwise agreement with the
// reference, and the integer form costs a few ALU ops in a loop bound by memory bandwidth.
// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*(), which its own
// uninitialized-use analysis then flags (a known false positive, GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "engine/optim/adam_kernels.hpp"

namespace zinf::engine::adam_detail {
namespace {

// ---- AVX2: 8 elements per step ---------------------------------------------------------------

#define ZINF_AVX2 __attribute__((target("avx2")))

ZINF_AVX2 inline __m256 load_grad8(const float* g) { return _mm256_loadu_ps(g); }
ZINF_AVX2 inline __m256 load_grad8(const bf16* g) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

ZINF_AVX2 inline void store_bf16x8(bf16* out, __m256 p) {
  const __m256i u = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
  // packus works per 128-bit lane; the permute brings the two halves together.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}

template <class G>
ZINF_AVX2 inline void adam8(const Coeffs& c, float* p_, float* m_, float* v_, const G* g_, bf16* out) {
  __m256 g = load_grad8(g_);
  __m256 p = _mm256_loadu_ps(p_);
  if (c.l2 != 0.0f) g = _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(c.l2), p));
  __m256 m = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(c.beta1), _mm256_loadu_ps(m_)),
                           _mm256_mul_ps(_mm256_set1_ps(c.one_minus_beta1), g));
  __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(c.beta2), _mm256_loadu_ps(v_)),
                           _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(c.one_minus_beta2), g), g));
  __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), _mm256_set1_ps(c.inv_sqrt_bc2)), _mm256_set1_ps(c.eps));
  if (c.decay != 0.0f) p = _mm256_sub_ps(p, _mm256_mul_ps(_mm256_set1_ps(c.decay), p));
  p = _mm256_sub_ps(p, _mm256_mul_ps(_mm256_set1_ps(c.step_size), _mm256_div_ps(m, denom)));
  _mm256_storeu_ps(m_, m);
  _mm256_storeu_ps(v_, v);
  _mm256_storeu_ps(p_, p);
  if (out) store_bf16x8(out, p);
}

// The last partial vector goes through small local arrays so it takes the very same path.
template <int W, class G, class F>
inline void tail(const Coeffs& c, Arrays a, size_t i, size_t end, F kernel) {
  const size_t k = end - i;
  float p[W] = {}, m[W] = {}, v[W] = {};
  G g[W] = {};
  bf16 out[W];
  auto* grad = static_cast<const G*>(a.grad);
  std::memcpy(p, a.master + i, k * sizeof(float));
  std::memcpy(m, a.m + i, k * sizeof(float));
  std::memcpy(v, a.v + i, k * sizeof(float));
  std::memcpy(g, grad + i, k * sizeof(G));
  kernel(c, p, m, v, g, a.param_out ? out : nullptr);
  std::memcpy(a.master + i, p, k * sizeof(float));
  std::memcpy(a.m + i, m, k * sizeof(float));
  std::memcpy(a.v + i, v, k * sizeof(float));
  if (a.param_out) std::memcpy(a.param_out + i, out, k * sizeof(bf16));
}

template <class G>
ZINF_AVX2 void run_avx2(const Coeffs& c, Arrays a, size_t begin, size_t end) {
  auto* grad = static_cast<const G*>(a.grad);
  size_t i = begin;
  for (; i + 8 <= end; i += 8) adam8(c, a.master + i, a.m + i, a.v + i, grad + i, a.param_out ? a.param_out + i : nullptr);
  if (i < end) tail<8, G>(c, a, i, end, [](const Coeffs& cc, float* p, float* m, float* v, const G* g, bf16* o) { adam8(cc, p, m, v, g, o); });
}

// ---- AVX-512: 16 elements per step -----------------------------------------------------------

#define ZINF_AVX512 __attribute__((target("avx512f,avx512bw")))

ZINF_AVX512 inline __m512 load_grad16(const float* g) { return _mm512_loadu_ps(g); }
ZINF_AVX512 inline __m512 load_grad16(const bf16* g) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

ZINF_AVX512 inline void store_bf16x16(bf16* out, __m512 p) {
  const __m512i u = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i r = _mm512_mask_blend_epi32(is_nan, rounded, quiet);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
}

template <class G>
ZINF_AVX512 inline void adam16(const Coeffs& c, float* p_, float* m_, float* v_, const G* g_, bf16* out) {
  __m512 g = load_grad16(g_);
  __m512 p = _mm512_loadu_ps(p_);
  if (c.l2 != 0.0f) g = _mm512_add_ps(g, _mm512_mul_ps(_mm512_set1_ps(c.l2), p));
  __m512 m = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c.beta1), _mm512_loadu_ps(m_)),
                           _mm512_mul_ps(_mm512_set1_ps(c.one_minus_beta1), g));
  __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(c.beta2), _mm512_loadu_ps(v_)),
                           _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(c.one_minus_beta2), g), g));
  __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), _mm512_set1_ps(c.inv_sqrt_bc2)), _mm512_set1_ps(c.eps));
  if (c.decay != 0.0f) p = _mm512_sub_ps(p, _mm512_mul_ps(_mm512_set1_ps(c.decay), p));
  p = _mm512_sub_ps(p, _mm512_mul_ps(_mm512_set1_ps(c.step_size), _mm512_div_ps(m, denom)));
  _mm512_storeu_ps(m_, m);
  _mm512_storeu_ps(v_, v);
  _mm512_storeu_ps(p_, p);
  if (out) store_bf16x16(out, p);
}

template <class G>
ZINF_AVX512 void run_avx512(const Coeffs& c, Arrays a, size_t begin, size_t end) {
  auto* grad = static_cast<const G*>(a.grad);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) adam16(c, a.master + i, a.m + i, a.v + i, grad + i, a.param_out ? a.param_out + i : nullptr);
  if (i < end) tail<16, G>(c, a, i, end, [](const Coeffs& cc, float* p, float* m, float* v, const G* g, bf16* o) { adam16(cc, p, m, v, g, o); });
}

}  // namespace

__attribute__((target("fma"))) float contract_probe_scalar(float a, float b, float c) { return a * b + c; }

__attribute__((target("avx2,fma"))) float contract_probe_avx2(float a, float b, float c) {
  const __m256 r = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(a), _mm256_set1_ps(b)), _mm256_set1_ps(c));
  return _mm256_cvtss_f32(r);
}

ZINF_AVX512 float contract_probe_avx512(float a, float b, float c) {
  const __m512 r = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(a), _mm512_set1_ps(b)), _mm512_set1_ps(c));
  return _mm512_cvtss_f32(r);
}

void adam_avx2_f32(const Coeffs& c, Arrays a, size_t begin, size_t end) { run_avx2<float>(c, a, begin, end); }
void adam_avx2_bf16(const Coeffs& c, Arrays a, size_t begin, size_t end) { run_avx2<bf16>(c, a, begin, end); }
void adam_avx512_f32(const Coeffs& c, Arrays a, size_t begin, size_t end) { run_avx512<float>(c, a, begin, end); }
void adam_avx512_bf16(const Coeffs& c, Arrays a, size_t begin, size_t end) { run_avx512<bf16>(c, a, begin, end); }

}  // namespace zinf::engine::adam_detail
