// Fast float kernels: linear and attention as cblas_sgemm calls on strided views (no copies),
// GELU with a branch-free rational tanh the compiler vectorizes.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/kernels.hpp"

namespace zinf::engine::cpu {

namespace {
int blas_int(int64_t v) { return static_cast<int>(v); }
}  // namespace

void linear_forward(float* y, const float* x, const float* w, const float* b, int64_t T, int64_t in, int64_t out,
                    int64_t r0, int64_t r1) {
  const int64_t n = r1 - r0;
  float* yt = y + r0;
  float beta = 0.0f;
  if (b) {
    for (int64_t t = 0; t < T; ++t) std::copy(b, b + n, yt + t * out);
    beta = 1.0f;
  }
  // y[:, r0:r1] (T x n, ld out) = x (T x in) * w^T (in x n)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(T), blas_int(n), blas_int(in), 1.0f, x, blas_int(in),
              w, blas_int(in), beta, yt, blas_int(out));
}

void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int64_t T,
                     int64_t in, int64_t out, int64_t r0, int64_t r1) {
  const int64_t n = r1 - r0;
  const float* dyt = dy + r0;
  if (dx)  // dx (T x in) += dy_tile (T x n, ld out) * w (n x in)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(T), blas_int(in), blas_int(n), 1.0f, dyt,
                blas_int(out), w, blas_int(in), 1.0f, dx, blas_int(in));
  // dw (n x in) += dy_tile^T (n x T) * x (T x in)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(n), blas_int(in), blas_int(T), 1.0f, dyt,
              blas_int(out), x, blas_int(in), 1.0f, dw, blas_int(in));
  if (db)
    for (int64_t t = 0; t < T; ++t) {
      const float* d = dyt + t * out;
      for (int64_t o = 0; o < n; ++o) db[o] += d[o];
    }
}

// Per (batch, head): scores = Q K^T (S x S) straight into att, causal softmax row by row in place,
// out = att V. Q, K and V are read in place from qkv with leading dimension 3C.
void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t S, int64_t C, int64_t NH) {
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int ld = blas_int(3 * C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const float* q = qkv + b * S * 3 * C + h * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + (b * NH + h) * S * S;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(S), blas_int(S), blas_int(hd), scale, q, ld, k,
                  ld, 0.0f, a, blas_int(S));
      for (int64_t t = 0; t < S; ++t) {
        float* row = a + t * S;
        float mx = row[0];
        for (int64_t u = 1; u <= t; ++u) mx = std::max(mx, row[u]);
        float sum = 0.0f;
        for (int64_t u = 0; u <= t; ++u) {
          row[u] = std::exp(row[u] - mx);
          sum += row[u];
        }
        const float inv = 1.0f / sum;
        for (int64_t u = 0; u <= t; ++u) row[u] *= inv;
        for (int64_t u = t + 1; u < S; ++u) row[u] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(S), blas_int(hd), blas_int(S), 1.0f, a,
                  blas_int(S), v, ld, 0.0f, out + b * S * C + h * hd, blas_int(C));
    }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t S,
                        int64_t C, int64_t NH) {
  const int64_t hd = C / NH;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int ld = blas_int(3 * C);
  std::vector<float> dscore(size_t(S * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const float* q = qkv + b * S * 3 * C + h * hd;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + b * S * 3 * C + h * hd;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att + (b * NH + h) * S * S;
      const float* d = dout + b * S * C + h * hd;
      float* ds = dscore.data();
      // datt = dout V^T; dV += att^T dout
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(S), blas_int(S), blas_int(hd), 1.0f, d,
                  blas_int(C), v, ld, 0.0f, ds, blas_int(S));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(S), blas_int(hd), blas_int(S), 1.0f, a,
                  blas_int(S), d, blas_int(C), 1.0f, dv, ld);
      // softmax backward in place; entries above the diagonal have att = 0 and so come out 0
      for (int64_t t = 0; t < S; ++t) {
        const float* ar = a + t * S;
        float* dr = ds + t * S;
        float dot = 0.0f;
        for (int64_t u = 0; u <= t; ++u) dot += ar[u] * dr[u];
        for (int64_t u = 0; u < S; ++u) dr[u] = ar[u] * (dr[u] - dot);
      }
      // dQ += scale dS K; dK += scale dS^T Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(S), blas_int(hd), blas_int(S), scale, ds,
                  blas_int(S), k, ld, 1.0f, dq, ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(S), blas_int(hd), blas_int(S), scale, ds,
                  blas_int(S), q, ld, 1.0f, dk, ld);
    }
}

// Floating-point comparisons may trap by default, which keeps gcc from turning the clamp below into
// min/max vector instructions; these loops never rely on traps.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

namespace {

// tanh as a 13/6 odd rational function on [-7.9, 7.9] (clamped outside, where tanh is +-1 in
// float); max abs error ~3e-7 against std::tanh. No branches, so the GELU loops vectorize.
inline float tanh_rational(float x) {
  const float c = 7.90531110763549805f;
  x = x > c ? c : (x < -c ? -c : x);  // not std::min/max: those would not inline under the pragma
  const float x2 = x * x;
  float p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 - 8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
  return x * p / q;
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

}  // namespace

void gelu_forward(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    out[i] = 0.5f * xi * (1.0f + tanh_rational(kGeluC * (xi + kGeluA * xi * xi * xi)));
  }
}

void gelu_backward(float* dx, const float* dout, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const float th = tanh_rational(kGeluC * (xi + kGeluA * xi * xi * xi));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * xi * xi);
    dx[i] += (0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du) * dout[i];
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

}  // namespace zinf::engine::cpu
