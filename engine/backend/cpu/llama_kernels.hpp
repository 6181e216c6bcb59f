// CPU kernels of the Llama family's operators that GPT-2 lacks: RMSNorm, rotary position embedding
// (rotate-half layout, as transformers' LlamaRotaryEmbedding / apply_rotary_pos_emb), the SwiGLU
// gate (SiLU(gate) * up) and causal grouped-query attention (num_key_value_heads <= heads, each
// key/value head shared by heads / kv_heads consecutive query heads, as repeat_kv lays them out).
// The linears (q/k/v/o, gate/up/down, the untied head) are engine/backend/cpu/kernels.hpp's
// linear without bias. Same contract as those kernels: caller-owned row-major buffers, nothing
// allocated that outlives the call, backward kernels ACCUMULATE (+=) into every gradient they
// write; no state, so concurrent calls on disjoint buffers are safe.
//
// One templated definition (plain loops) serves both the double-precision finite-difference tests
// and the float path the engine runs: these operators are memory-bound at the sizes the engine
// trains, and the plain loops vectorise as written (no intrinsics, so no instruction set assumed).
#pragma once
#include <cstdint>

namespace zinf::engine::cpu::ref {

// Shapes: T = B * S tokens, row t = b * S + s at position s; C channels; NH query heads and KV
// key/value heads of D = head_dim elements each, so q rows are NH * D wide and k, v rows KV * D.

// out = x * rstd * gamma per row, rstd = 1 / sqrt(mean(x^2) + eps) (saved, T values, for backward).
template <class F>
void rmsnorm_forward(F* out, F* rstd, const F* x, const F* gamma, int64_t T, int64_t C, double eps);
template <class F>
void rmsnorm_backward(F* dx, F* dgamma, const F* dout, const F* x, const F* gamma, const F* rstd, int64_t T,
                      int64_t C);

// Rotary embedding of each head's D elements (D even) at position s: with inv_freq[i] =
// theta^(-2i/D) and a = s * inv_freq[i] for i < D/2, out[i] = x[i] cos a - x[i + D/2] sin a and
// out[i + D/2] = x[i + D/2] cos a + x[i] sin a. `x` is T rows of H heads; out may alias x.
template <class F>
void rope_forward(F* out, const F* x, int64_t B, int64_t S, int64_t H, int64_t D, double theta);
// dx += R^T dout (the rotation's transpose: the angle negated).
template <class F>
void rope_backward(F* dx, const F* dout, int64_t B, int64_t S, int64_t H, int64_t D, double theta);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)); n elements.
template <class F>
void swiglu_forward(F* out, const F* gate, const F* up, int64_t n);
template <class F>
void swiglu_backward(F* dgate, F* dup, const F* dout, const F* gate, const F* up, int64_t n);

// Causal attention of NH query heads over KV key/value heads (NH a multiple of KV; query head h
// reads key/value head h / (NH / KV)), scores scaled by 1 / sqrt(D). out is T x NH*D; att is
// B x NH x S x S, the softmax probabilities (zero above the diagonal), kept for backward.
template <class F>
void gqa_attention_forward(F* out, F* att, const F* q, const F* k, const F* v, int64_t B, int64_t S, int64_t NH,
                           int64_t KV, int64_t D);
// The same over rows of any stride: q's rows qs apart, k's and v's kvs apart (GPT-2's fused qkv
// tensor: 3C, with KV = NH). gqa_attention_forward and GPT-2's ref::attention_forward are this.
template <class F>
void causal_attention_forward(F* out, F* att, const F* q, const F* k, const F* v, int64_t qs, int64_t kvs, int64_t B,
                              int64_t S, int64_t NH, int64_t KV, int64_t D);
template <class F>
void gqa_attention_backward(F* dq, F* dk, F* dv, const F* dout, const F* q, const F* k, const F* v, const F* att,
                            int64_t B, int64_t S, int64_t NH, int64_t KV, int64_t D);

}  // namespace zinf::engine::cpu::ref
