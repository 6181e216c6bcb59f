// CUDA kernels of a GPT-2 forward and backward pass, the device twins of engine/backend/cpu/kernels.hpp:
// embedding, layernorm, causal-softmax (attention's middle; its GEMMs are in gemm.hpp), GELU (tanh
// form), residual, softmax + cross-entropy, and the Adam update of sub-groups kept on the device.
// Each host function enqueues its kernel(s) on `stream` and returns without waiting; every pointer
// is device memory. Activations and gradients are fp32; parameters are read as bf16 (the gathered
// copies), and converted to fp32 in registers, so the arithmetic matches the CPU reference run on
// the same bf16-rounded parameters. Backward kernels ACCUMULATE (+=) into gradients, like the CPU
// kernels. Stateless: safe to call from several threads on different streams.
//
// This header is plain C++ (no CUDA language), so .cpp files and tests can call the kernels.
#pragma once
#include <cstdint>

#include "engine/bf16.hpp"

struct CUstream_st;

namespace zinf::engine::cuda {

using Stream = CUstream_st*;  // cudaStream_t

// A vocabulary tile [r0, r1) of the embedding (wte holds its rows; the whole table is [0, V)):
// out[b,s,:] = wte[tokens[b,s] - r0,:] + wpe[s,:] for the tokens in the tile; the others are untouched.
void embedding_forward(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t B, int64_t S,
                       int64_t C, int64_t r0, int64_t r1, Stream stream);
// dwte[tokens[t] - r0,:] += dout[t,:] for the tokens in the tile; dwpe[s,:] += dout[b,s,:] unless dwpe is
// null (atomic adds: order-dependent rounding)
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t S,
                        int64_t C, int64_t r0, int64_t r1, Stream stream);

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const bf16* gamma, const bf16* beta,
                       int64_t T, int64_t C, Stream stream);
// dx += ...; dgamma += ...; dbeta += ... (as cpu::ref::layernorm_backward)
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dout, const float* x, const bf16* gamma,
                        const float* mean, const float* rstd, int64_t T, int64_t C, Stream stream);

// Causal softmax of `rows` = BH * S rows of S scores: att[t,u] = softmax_u<=t(scale * pre[t,u]),
// zero above the diagonal. Backward: dpre[t,u] = scale * att[t,u] (datt[t,u] - sum_j att[t,j] datt[t,j]).
void causal_softmax_forward(float* att, const float* pre, int64_t BH, int64_t S, float scale, Stream stream);
void causal_softmax_backward(float* dpre, const float* datt, const float* att, int64_t BH, int64_t S, float scale,
                             Stream stream);
// qkv (B, S, 3C; heads contiguous) <-> q, k, v each (B, NH, S, hd). The backward accumulates.
void split_heads(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t S, int64_t C, int64_t NH,
                 Stream stream);
void split_heads_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t S,
                          int64_t C, int64_t NH, Stream stream);
// y (B, NH, S, hd) -> out (B, S, C), and its backward dy = permute(dout).
void merge_heads(float* out, const float* y, int64_t B, int64_t S, int64_t C, int64_t NH, Stream stream);
void merge_heads_backward(float* dy, const float* dout, int64_t B, int64_t S, int64_t C, int64_t NH, Stream stream);

void gelu_forward(float* out, const float* x, int64_t n, Stream stream);
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n, Stream stream);
void residual_forward(float* out, const float* a, const float* b, int64_t n, Stream stream);
void residual_backward(float* da, float* db, const float* dout, int64_t n, Stream stream);

// Softmax cross-entropy without the probabilities (cpu::ref::crossentropy_forward): stats holds
// three rows of T, the largest logit, the sum of exponentials and the loss of each token.
void crossentropy_forward(float* stats, const float* logits, const int32_t* targets, int64_t T, int64_t V,
                          Stream stream);
// The loss's gradient over columns [v0, v1) of the logits, written over them: (exp(logit - max) /
// sum - onehot(targets)) * scale (cpu::ref::crossentropy_backward).
void crossentropy_backward(float* logits, const float* stats, const int32_t* targets, float scale, int64_t T, int64_t V,
                           int64_t v0, int64_t v1, Stream stream);

// Linear helpers: y[t, r0 + o] += b[o] for o < rows (y is T x out); db[o] += sum_t dy[t, r0 + o].
void add_bias(float* y, const bf16* b, int64_t T, int64_t out, int64_t r0, int64_t rows, Stream stream);
void bias_backward(float* db, const float* dy, int64_t T, int64_t out, int64_t r0, int64_t rows, Stream stream);

// Conversions and small vector operations.
void to_bf16(bf16* out, const float* in, int64_t n, Stream stream);
void to_float(float* out, const bf16* in, int64_t n, Stream stream);
void scale(float* x, float s, int64_t n, Stream stream);
// out[i] = bf16(float(in[i]) * s): gradient clipping, rounded as the CPU backend rounds it.
void scale_bf16(bf16* out, const bf16* in, float s, int64_t n, Stream stream);
// home[i] = bf16((first ? 0 : partial[i]) + add[i]); when sumsq is given, adds sum_i float(home[i])^2
// to *sumsq (a device double). The same rounding as the CPU backend's accumulate().
void accumulate_grad(bf16* home, const bf16* partial, const float* add, int64_t n, bool first, double* sumsq,
                     Stream stream);

// One Adam (or AdamW) step of n elements, the same IEEE operations in the same order as
// engine/optim's adam_reference (no fused multiply-add), coefficients computed on the host once per
// step. `param_out` may be null. `grad` is bf16.
struct AdamCoeffs {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bc2, eps, decay, l2;
};
void adam_step(const AdamCoeffs& c, float* master, float* m, float* v, const bf16* grad, bf16* param_out, int64_t n,
               Stream stream);

}  // namespace zinf::engine::cuda
