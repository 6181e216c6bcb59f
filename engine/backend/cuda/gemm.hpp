// The GEMMs of a GPT-2 on cuBLAS: linear layers (whole, or one row tile of the weight, as
// cpu::linear_forward / linear_backward) in bf16 with fp32 accumulation and fp32 outputs, and
// causal attention as per-head strided-batched GEMMs (fp32) around the causal-softmax kernel.
// Activations stay fp32; a linear casts its input (and, in backward, its output gradient) to bf16
// in caller-given scratch right before the GEMM, so the result is the fp32 reference run on
// bf16-rounded operands. Every call enqueues on the handle's stream (cublasSetStream) and returns
// without waiting. A handle is used by one thread at a time; the functions keep no state.
#pragma once
#include <cublas_v2.h>

#include <cstdint>

#include "engine/bf16.hpp"

namespace zinf::engine::cuda {

// y[:, r0:r1] = x w^T + b. w holds the tile's rows ((r1-r0) x in), b its biases or null.
// x_bf16: scratch of T*in elements.
void linear_forward(cublasHandle_t h, float* y, const float* x, const bf16* w, const bf16* b, int64_t T, int64_t in,
                    int64_t out, int64_t r0, int64_t r1, bf16* x_bf16);
// dx += dy[:, r0:r1] w; dw += dy[:, r0:r1]^T x; db += column sums. dx, db may be null.
// Scratch: x_bf16 T*in, dy_bf16 T*out elements.
void linear_backward(cublasHandle_t h, float* dx, float* dw, float* db, const float* dy, const float* x, const bf16* w,
                     int64_t T, int64_t in, int64_t out, int64_t r0, int64_t r1, bf16* x_bf16, bf16* dy_bf16);

// Causal multi-head attention, as cpu::attention_forward / attention_backward: qkv is T x 3C,
// out T x C, att B x NH x S x S (kept for backward). Scratch of attention_scratch() floats.
int64_t attention_scratch(int64_t B, int64_t S, int64_t C, int64_t NH);
void attention_forward(cublasHandle_t h, float* out, float* att, const float* qkv, int64_t B, int64_t S, int64_t C,
                       int64_t NH, float* scratch);
// dqkv += d(out)/d(qkv) dout.
void attention_backward(cublasHandle_t h, float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B,
                        int64_t S, int64_t C, int64_t NH, float* scratch);

}  // namespace zinf::engine::cuda
