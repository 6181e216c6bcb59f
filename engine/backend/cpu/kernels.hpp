// CPU kernels of a GPT-2 forward and backward pass: embedding, layernorm, linear (whole or one row
// tile of the weight), causal multi-head attention, GELU (tanh form), residual add and softmax +
// cross-entropy. Every kernel works on caller-owned, row-major buffers and allocates nothing that
// outlives the call; backward kernels ACCUMULATE (+=) into every gradient they write, so the caller
// zeroes gradients once and tiles, tied weights and micro-batches add up. Kernels keep no state and
// may run concurrently on disjoint buffers; the GEMMs use OpenBLAS's own threads.
//
// Two versions of each kernel. `cpu::ref` is plain loops, templated on the scalar so tests can
// check it against finite differences in double: it is the readable definition. `cpu::` (float)
// is the fast path the engine runs: linear and attention go through cblas_sgemm, GELU uses a
// vectorizable rational tanh; layernorm, embedding, residual and cross-entropy are single
// memory-bound passes whose fast path is the reference loop compiled for float.
//
// Why OpenBLAS fp32 and not oneDNN bf16 for the GEMMs: OpenBLAS is already a dependency and
// computes in fp32, which is what the mixed-precision scheme asks for (bf16 storage, fp32
// accumulate). The note's 2.6x for oneDNN bf16 was against OpenBLAS pinned to its Haswell kernels
// on an AVX-512-BF16 CPU (1.4x against its AVX-512 kernels). On the CPU measured for this choice
// (AVX2 only, no AVX-512) oneDNN 2.6 (libdnnl-dev) would not even create a bf16 matmul: there is
// no speed to gain where there is no native bf16, and at this model's GEMM sizes (k = 128..512)
// call overhead and the elementwise kernels weigh as much as GEMM peak. A oneDNN path is a later,
// measured change for AVX-512-BF16 / AMX hosts.
#pragma once
#include <cstdint>

namespace zinf::engine::cpu {

// GPT-2's layernorm epsilon (Hugging Face layer_norm_epsilon).
inline constexpr double kLayerNormEps = 1e-5;

// Shapes used throughout: T = tokens = B * S (batch x sequence), C = channels, V = vocabulary,
// NH = heads. Activations are T x width, row-major; a linear weight is out x in (core's ParamGroup
// rows x cols), so y = x W^T + b.
namespace ref {

// out[b,s,:] = wte[tokens[b,s],:] + wpe[s,:]
template <class F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int64_t B, int64_t S, int64_t C);
// dwte[tokens[b,s],:] += dout[b,s,:]; dwpe[s,:] += dout[b,s,:]. Either gradient may be null.
template <class F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int64_t B, int64_t S, int64_t C);

// out = (x - mean) * rstd * gamma + beta per row; saves mean and rstd (T each) for backward.
template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* x, const F* gamma, const F* beta, int64_t T, int64_t C);
template <class F>
void layernorm_backward(F* dx, F* dgamma, F* dbeta, const F* dout, const F* x, const F* gamma, const F* mean,
                        const F* rstd, int64_t T, int64_t C);

// One row tile [r0, r1) of a linear with `out` outputs: w holds the tile's rows ((r1-r0) x in,
// contiguous), b its r1-r0 biases (or null). Writes y[:, r0:r1] (y is T x out). The whole layer is
// the tile [0, out); running all tiles gives exactly the untiled result.
template <class F>
void linear_forward(F* y, const F* x, const F* w, const F* b, int64_t T, int64_t in, int64_t out, int64_t r0,
                    int64_t r1);
// dx += dy[:, r0:r1] w; dw += dy[:, r0:r1]^T x; db += column sums of dy[:, r0:r1]. dx, db may be null.
template <class F>
void linear_backward(F* dx, F* dw, F* db, const F* dy, const F* x, const F* w, int64_t T, int64_t in, int64_t out,
                     int64_t r0, int64_t r1);

// qkv is T x 3C (q | k | v, heads contiguous inside each); out is T x C; att is B x NH x S x S,
// the softmax probabilities (zero above the diagonal), kept for backward.
template <class F>
void attention_forward(F* out, F* att, const F* qkv, int64_t B, int64_t S, int64_t C, int64_t NH);
template <class F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* att, int64_t B, int64_t S, int64_t C,
                        int64_t NH);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class F>
void gelu_forward(F* out, const F* x, int64_t n);
template <class F>
void gelu_backward(F* dx, const F* dout, const F* x, int64_t n);

// out = a + b; backward: da += dout, db += dout.
template <class F>
void residual_forward(F* out, const F* a, const F* b, int64_t n);
template <class F>
void residual_backward(F* da, F* db, const F* dout, int64_t n);

// Softmax cross-entropy of logits (T x V) without keeping the probabilities: per row t, stats[t] is
// the largest logit m, stats[T + t] the sum of exp(logit - m) and stats[2T + t] the loss
// -log softmax[t, targets[t]]. Returns the mean loss.
template <class F>
double crossentropy_forward(F* stats, const F* logits, const int32_t* targets, int64_t T, int64_t V);
// The loss's gradient over columns [v0, v1) of the logits (T rows of `V`), written over those
// logits in place: (exp(logit - m) / sum - onehot) * scale with m and sum from stats, the target of
// row t being column targets[t] - target_offset; columns from `valid` on (padding) get 0. So the
// head's backward turns one vocabulary tile of logits into its gradient at a time, and the whole
// probabilities or logits gradient never exist apart. scale = dloss / T for a mean loss.
template <class F>
void crossentropy_backward(F* logits, const F* stats, const int32_t* targets, int64_t target_offset, double scale,
                           int64_t T, int64_t V, int64_t valid, int64_t v0, int64_t v1);

}  // namespace ref

// ---- fast path (float) ---------------------------------------------------------------------

void linear_forward(float* y, const float* x, const float* w, const float* b, int64_t T, int64_t in, int64_t out,
                    int64_t r0, int64_t r1);
void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w, int64_t T,
                     int64_t in, int64_t out, int64_t r0, int64_t r1);
inline void linear_forward(float* y, const float* x, const float* w, const float* b, int64_t T, int64_t in,
                           int64_t out) {
  linear_forward(y, x, w, b, T, in, out, 0, out);
}
inline void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                            int64_t T, int64_t in, int64_t out) {
  linear_backward(dx, dw, db, dy, x, w, T, in, out, 0, out);
}

void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t S, int64_t C, int64_t NH);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t S,
                        int64_t C, int64_t NH);

void gelu_forward(float* out, const float* x, int64_t n);
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n);

inline void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int64_t B,
                              int64_t S, int64_t C) {
  ref::embedding_forward(out, tokens, wte, wpe, B, S, C);
}
inline void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B,
                               int64_t S, int64_t C) {
  ref::embedding_backward(dwte, dwpe, dout, tokens, B, S, C);
}
inline void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* gamma,
                              const float* beta, int64_t T, int64_t C) {
  ref::layernorm_forward(out, mean, rstd, x, gamma, beta, T, C);
}
inline void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dout, const float* x,
                               const float* gamma, const float* mean, const float* rstd, int64_t T, int64_t C) {
  ref::layernorm_backward(dx, dgamma, dbeta, dout, x, gamma, mean, rstd, T, C);
}
inline void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  ref::residual_forward(out, a, b, n);
}
inline void residual_backward(float* da, float* db, const float* dout, int64_t n) {
  ref::residual_backward(da, db, dout, n);
}
inline double crossentropy_forward(float* stats, const float* logits, const int32_t* targets, int64_t T, int64_t V) {
  return ref::crossentropy_forward(stats, logits, targets, T, V);
}
inline void crossentropy_backward(float* logits, const float* stats, const int32_t* targets, int64_t target_offset,
                                  double scale, int64_t T, int64_t V, int64_t valid, int64_t v0, int64_t v1) {
  ref::crossentropy_backward(logits, stats, targets, target_offset, scale, T, V, valid, v0, v1);
}

}  // namespace zinf::engine::cpu
