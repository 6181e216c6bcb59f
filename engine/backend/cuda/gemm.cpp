#include "engine/backend/cuda/gemm.hpp"

#include <cmath>

#include "engine/backend/cuda/cuda_check.hpp"
#include "engine/backend/cuda/kernels.hpp"

namespace zinf::engine::cuda {

// Row-major matrices are column-major transposes: a row-major (m x k) A is the column-major
// (k x m) A^T. Every call below computes the transpose of the row-major product it names.

namespace {

Stream stream_of(cublasHandle_t h) {
  cudaStream_t s = nullptr;
  ZINF_CUBLAS_CHECK(cublasGetStream(h, &s));
  return s;
}

// C (m x n, col-major, fp32) = alpha op(A) op(B) + beta C with bf16 A, B and fp32 accumulation.
void gemm_bf16(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const float alpha = 1.0f;
  ZINF_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, int(m), int(n), int(k), &alpha, A, CUDA_R_16BF, int(lda), B, CUDA_R_16BF,
                                 int(ldb), &beta, C, CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Batched fp32: `count` products, operands `sa`, `sb`, `sc` elements apart.
void gemm_f32_batched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
                      const float* A, int64_t lda, int64_t sa, const float* B, int64_t ldb, int64_t sb, float* C,
                      int64_t ldc, int64_t sc, int64_t count) {
  const float alpha = 1.0f, beta = 0.0f;
  ZINF_CUBLAS_CHECK(cublasSgemmStridedBatched(h, ta, tb, int(m), int(n), int(k), &alpha, A, int(lda), sa, B, int(ldb),
                                              sb, &beta, C, int(ldc), sc, int(count)));
}

}  // namespace

void linear_forward(cublasHandle_t h, float* y, const float* x, const bf16* w, const bf16* b, int64_t T, int64_t in,
                    int64_t out, int64_t r0, int64_t r1, bf16* x_bf16) {
  const Stream s = stream_of(h);
  const int64_t rows = r1 - r0;
  to_bf16(x_bf16, x, T * in, s);
  // y^T[r0:r1, :] (rows x T) = w (rows x in, row-major = in x rows col-major)^T . x^T (in x T)
  gemm_bf16(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, T, in, w, in, x_bf16, in, 0.0f, y + r0, out);
  if (b) add_bias(y, b, T, out, r0, rows, s);
}

void linear_backward(cublasHandle_t h, float* dx, float* dw, float* db, const float* dy, const float* x, const bf16* w,
                     int64_t T, int64_t in, int64_t out, int64_t r0, int64_t r1, bf16* x_bf16, bf16* dy_bf16) {
  const Stream s = stream_of(h);
  const int64_t rows = r1 - r0;
  to_bf16(dy_bf16, dy, T * out, s);
  to_bf16(x_bf16, x, T * in, s);
  // dx^T (in x T) += w^T (in x rows) . dy[:, r0:r1]^T (rows x T)
  if (dx) gemm_bf16(h, CUBLAS_OP_N, CUBLAS_OP_N, in, T, rows, w, in, dy_bf16 + r0, out, 1.0f, dx, in);
  // dw^T (in x rows) += x^T (in x T) . dy[:, r0:r1] (T x rows)
  gemm_bf16(h, CUBLAS_OP_N, CUBLAS_OP_T, in, rows, T, x_bf16, in, dy_bf16 + r0, out, 1.0f, dw, in);
  if (db) bias_backward(db, dy, T, out, r0, rows, s);
}

int64_t attention_scratch(int64_t B, int64_t S, int64_t C, int64_t NH) {
  // q, k, v, y and their gradients (B*S*C each), and one B*NH*S*S score matrix
  return 7 * B * S * C + B * NH * S * S;
}

void attention_forward(cublasHandle_t h, float* out, float* att, const float* qkv, int64_t B, int64_t S, int64_t C,
                       int64_t NH, float* scratch) {
  const Stream s = stream_of(h);
  const int64_t TC = B * S * C, hd = C / NH, BH = B * NH;
  float *q = scratch, *k = q + TC, *v = k + TC, *y = v + TC, *pre = y + TC;
  split_heads(q, k, v, qkv, B, S, C, NH, s);
  // pre (S x S, row-major [t, u] = q_t . k_u): pre^T = k q^T
  gemm_f32_batched(h, CUBLAS_OP_T, CUBLAS_OP_N, S, S, hd, k, hd, S * hd, q, hd, S * hd, pre, S, S * S, BH);
  causal_softmax_forward(att, pre, BH, S, 1.0f / std::sqrt(float(hd)), s);
  // y (S x hd) = att v: y^T = v^T att^T
  gemm_f32_batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hd, S, S, v, hd, S * hd, att, S, S * S, y, hd, S * hd, BH);
  merge_heads(out, y, B, S, C, NH, s);
}

void attention_backward(cublasHandle_t h, float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                        int64_t S, int64_t C, int64_t NH, float* scratch) {
  const Stream s = stream_of(h);
  const int64_t TC = B * S * C, hd = C / NH, BH = B * NH;
  float *q = scratch, *k = q + TC, *v = k + TC, *dy = v + TC, *dq = dy + TC, *dk = dq + TC, *dv = dk + TC;
  float* dscore = dv + TC;  // d att, then (in place) d pre
  split_heads(q, k, v, qkv, B, S, C, NH, s);
  merge_heads_backward(dy, dout, B, S, C, NH, s);
  // datt (S x S) = dy v^T: datt^T = v dy^T
  gemm_f32_batched(h, CUBLAS_OP_T, CUBLAS_OP_N, S, S, hd, v, hd, S * hd, dy, hd, S * hd, dscore, S, S * S, BH);
  // dv (S x hd) = att^T dy: dv^T = dy^T att
  gemm_f32_batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hd, S, S, dy, hd, S * hd, att, S, S * S, dv, hd, S * hd, BH);
  causal_softmax_backward(dscore, dscore, att, BH, S, 1.0f / std::sqrt(float(hd)), s);
  // dq (S x hd) = dpre k: dq^T = k^T dpre^T
  gemm_f32_batched(h, CUBLAS_OP_N, CUBLAS_OP_N, hd, S, S, k, hd, S * hd, dscore, S, S * S, dq, hd, S * hd, BH);
  // dk (S x hd) = dpre^T q: dk^T = q^T dpre
  gemm_f32_batched(h, CUBLAS_OP_N, CUBLAS_OP_T, hd, S, S, q, hd, S * hd, dscore, S, S * S, dk, hd, S * hd, BH);
  split_heads_backward(dqkv, dq, dk, dv, B, S, C, NH, s);
}

}  // namespace zinf::engine::cuda
