// The CUDA kernels declared in kernels.hpp. Plain, readable kernels: one thread per element for
// elementwise work, one block (or warp) per row for row reductions, a column pass with atomic adds
// for parameter gradients summed over tokens. Correctness first; fusions are later, measured changes.
#include <cfloat>

#include "engine/backend/cuda/cuda_check.hpp"
#include "engine/backend/cuda/kernels.hpp"

namespace zinf::engine::cuda {

namespace {

constexpr int kThreads = 256;

// Grid-stride loops cover any n with at most 2^20 blocks.
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : (b > (int64_t(1) << 20) ? (int64_t(1) << 20) : b));
}
dim3 grid(dim3 d) { return d; }
dim3 grid(int64_t blocks) { return dim3(unsigned(blocks)); }
dim3 grid(unsigned blocks) { return dim3(blocks); }

__device__ inline float load(bf16 v) { return __uint_as_float(uint32_t(v.bits) << 16); }

// Round to nearest even, NaN stays NaN: bit for bit engine::to_bf16.
__device__ inline bf16 store_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return bf16{uint16_t((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum (or max) over the block; every thread gets the result. blockDim.x is a multiple of 32.
template <bool Max>
__device__ float block_reduce(float v) {
  __shared__ float part[32];
  __shared__ float result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = Max ? warp_max(v) : warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? part[lane] : (Max ? -FLT_MAX : 0.0f);
    w = Max ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  const float r = result;
  __syncthreads();  // `result` and `part` are reused by the next call
  return r;
}

#define ZINF_FOR_EACH(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// ---- embedding ----------------------------------------------------------------------------------

__global__ void embedding_forward_k(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t S,
                                    int64_t C, int64_t r0, int64_t r1, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    const int64_t t = i / C, c = i % C, s = t % S, v = tokens[t];
    if (v >= r0 && v < r1) out[i] = load(wte[(v - r0) * C + c]) + load(wpe[s * C + c]);
  }
}

__global__ void embedding_backward_k(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t S,
                                     int64_t C, int64_t r0, int64_t r1, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    const int64_t t = i / C, c = i % C, s = t % S, v = tokens[t];
    if (dwte && v >= r0 && v < r1) atomicAdd(dwte + (v - r0) * C + c, dout[i]);
    if (dwpe) atomicAdd(dwpe + s * C + c, dout[i]);
  }
}

// ---- layernorm ----------------------------------------------------------------------------------

__global__ void layernorm_forward_k(float* out, float* mean, float* rstd, const float* x, const bf16* gamma,
                                    const bf16* beta, int64_t C, float eps) {
  const int64_t t = blockIdx.x;
  const float* xt = x + t * C;
  float s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += xt[c];
  const float m = block_reduce<false>(s) / float(C);
  float v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (xt[c] - m) * (xt[c] - m);
  const float r = 1.0f / sqrtf(block_reduce<false>(v) / float(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[t * C + c] = (xt[c] - m) * r * load(gamma[c]) + load(beta[c]);
  if (threadIdx.x == 0) {
    mean[t] = m;
    rstd[t] = r;
  }
}

__global__ void layernorm_backward_dx_k(float* dx, const float* dout, const float* x, const bf16* gamma,
                                        const float* mean, const float* rstd, int64_t C) {
  const int64_t t = blockIdx.x;
  const float* xt = x + t * C;
  const float* dt = dout + t * C;
  const float m = mean[t], r = rstd[t];
  float sd = 0, sdx = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = dt[c] * load(gamma[c]);
    sd += d;
    sdx += d * (xt[c] - m) * r;
  }
  const float mean_d = block_reduce<false>(sd) / float(C);
  const float mean_dx = block_reduce<false>(sdx) / float(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float xhat = (xt[c] - m) * r;
    dx[t * C + c] += r * (dt[c] * load(gamma[c]) - mean_d - xhat * mean_dx);
  }
}

constexpr int64_t kRowsPerChunk = 64;

// Column sums over a chunk of rows, added atomically: dgamma[c] += sum dout*xhat, dbeta[c] += sum dout.
__global__ void layernorm_backward_params_k(float* dgamma, float* dbeta, const float* dout, const float* x,
                                            const float* mean, const float* rstd, int64_t T, int64_t C) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t t0 = int64_t(blockIdx.y) * kRowsPerChunk;
  const int64_t t1 = t0 + kRowsPerChunk < T ? t0 + kRowsPerChunk : T;
  float g = 0, b = 0;
  for (int64_t t = t0; t < t1; ++t) {
    const float d = dout[t * C + c];
    g += d * (x[t * C + c] - mean[t]) * rstd[t];
    b += d;
  }
  if (dgamma) atomicAdd(dgamma + c, g);
  if (dbeta) atomicAdd(dbeta + c, b);
}

// ---- attention's middle ---------------------------------------------------------------------------

// One warp per row r = (bh, t).
__global__ void causal_softmax_forward_k(float* att, const float* pre, int64_t rows, int64_t S, float scale) {
  const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t t = r % S;
  const float* p = pre + r * S;
  float* a = att + r * S;
  float mx = -FLT_MAX;
  for (int64_t u = lane; u <= t; u += 32) mx = fmaxf(mx, p[u] * scale);
  mx = warp_max(mx);
  float sum = 0;
  for (int64_t u = lane; u <= t; u += 32) sum += expf(p[u] * scale - mx);
  sum = warp_sum(sum);
  for (int64_t u = lane; u < S; u += 32) a[u] = u <= t ? expf(p[u] * scale - mx) / sum : 0.0f;
}

__global__ void causal_softmax_backward_k(float* dpre, const float* datt, const float* att, int64_t rows, int64_t S,
                                          float scale) {
  const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t t = r % S;
  const float* a = att + r * S;
  const float* d = datt + r * S;
  float dot = 0;
  for (int64_t u = lane; u <= t; u += 32) dot += a[u] * d[u];
  dot = warp_sum(dot);
  for (int64_t u = lane; u < S; u += 32) dpre[r * S + u] = u <= t ? a[u] * (d[u] - dot) * scale : 0.0f;
}

// Index i of a (B, NH, S, hd) tensor -> offset of its element in a (B, S, width) tensor's head slice.
__device__ inline int64_t head_offset(int64_t i, int64_t S, int64_t NH, int64_t hd, int64_t width) {
  const int64_t e = i % hd, s = (i / hd) % S, h = (i / (hd * S)) % NH, b = i / (hd * S * NH);
  return (b * S + s) * width + h * hd + e;
}

__global__ void split_heads_k(float* q, float* k, float* v, const float* qkv, int64_t S, int64_t C, int64_t NH,
                              int64_t n) {
  const int64_t hd = C / NH;
  ZINF_FOR_EACH(i, n) {
    const int64_t o = head_offset(i, S, NH, hd, 3 * C);
    q[i] = qkv[o];
    k[i] = qkv[o + C];
    v[i] = qkv[o + 2 * C];
  }
}

__global__ void split_heads_backward_k(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t S,
                                       int64_t C, int64_t NH, int64_t n) {
  const int64_t hd = C / NH;
  ZINF_FOR_EACH(i, n) {
    const int64_t o = head_offset(i, S, NH, hd, 3 * C);
    dqkv[o] += dq[i];
    dqkv[o + C] += dk[i];
    dqkv[o + 2 * C] += dv[i];
  }
}

__global__ void merge_heads_k(float* out, const float* y, int64_t S, int64_t C, int64_t NH, int64_t n) {
  ZINF_FOR_EACH(i, n) out[head_offset(i, S, NH, C / NH, C)] = y[i];
}

__global__ void merge_heads_backward_k(float* dy, const float* dout, int64_t S, int64_t C, int64_t NH, int64_t n) {
  ZINF_FOR_EACH(i, n) dy[i] = dout[head_offset(i, S, NH, C / NH, C)];
}

// ---- elementwise ----------------------------------------------------------------------------------

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void gelu_forward_k(float* out, const float* x, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    const float xi = x[i];
    out[i] = 0.5f * xi * (1.0f + tanhf(kGeluC * (xi + 0.044715f * xi * xi * xi)));
  }
}

__global__ void gelu_backward_k(float* dx, const float* dout, const float* x, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    const float xi = x[i];
    const float th = tanhf(kGeluC * (xi + 0.044715f * xi * xi * xi));
    const float du = kGeluC * (1.0f + 3.0f * 0.044715f * xi * xi);
    dx[i] += (0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du) * dout[i];
  }
}

__global__ void residual_forward_k(float* out, const float* a, const float* b, int64_t n) {
  ZINF_FOR_EACH(i, n) out[i] = a[i] + b[i];
}

__global__ void residual_backward_k(float* da, float* db, const float* dout, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

// ---- loss -----------------------------------------------------------------------------------------

__global__ void crossentropy_forward_k(float* stats, const float* logits, const int32_t* targets, int64_t T, int64_t V) {
  const int64_t t = blockIdx.x;
  const float* l = logits + t * V;
  float mx = -FLT_MAX;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, l[v]);
  mx = block_reduce<true>(mx);
  float s = 0;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += expf(l[v] - mx);
  const float sum = block_reduce<false>(s);
  if (threadIdx.x == 0) {
    stats[t] = mx;
    stats[T + t] = sum;
    stats[2 * T + t] = -(l[targets[t]] - mx - logf(sum));
  }
}

// Columns [v0, v0 + cols) of the logits (T rows of V) become the loss's gradient in place.
__global__ void crossentropy_backward_k(float* logits, const float* stats, const int32_t* targets, float scale,
                                        int64_t T, int64_t V, int64_t v0, int64_t cols, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    const int64_t t = i / cols, v = v0 + i % cols;
    float& l = logits[t * V + v];
    l = (expf(l - stats[t]) / stats[T + t] - (v == targets[t] ? 1.0f : 0.0f)) * scale;
  }
}

// ---- linear helpers -------------------------------------------------------------------------------

__global__ void add_bias_k(float* y, const bf16* b, int64_t out, int64_t r0, int64_t rows, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    const int64_t t = i / rows, o = i % rows;
    y[t * out + r0 + o] += load(b[o]);
  }
}

__global__ void bias_backward_k(float* db, const float* dy, int64_t T, int64_t out, int64_t r0, int64_t rows) {
  const int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= rows) return;
  const int64_t t0 = int64_t(blockIdx.y) * kRowsPerChunk;
  const int64_t t1 = t0 + kRowsPerChunk < T ? t0 + kRowsPerChunk : T;
  float s = 0;
  for (int64_t t = t0; t < t1; ++t) s += dy[t * out + r0 + o];
  atomicAdd(db + o, s);
}

// ---- conversions, gradients, Adam -------------------------------------------------------------------

__global__ void to_bf16_k(bf16* out, const float* in, int64_t n) { ZINF_FOR_EACH(i, n) out[i] = store_bf16(in[i]); }
__global__ void to_float_k(float* out, const bf16* in, int64_t n) { ZINF_FOR_EACH(i, n) out[i] = load(in[i]); }
__global__ void scale_k(float* x, float s, int64_t n) { ZINF_FOR_EACH(i, n) x[i] *= s; }
__global__ void scale_bf16_k(bf16* out, const bf16* in, float s, int64_t n) {
  ZINF_FOR_EACH(i, n) out[i] = store_bf16(load(in[i]) * s);
}

__global__ void accumulate_grad_k(bf16* home, const bf16* partial, const float* add, int64_t n, bool first,
                                  double* sumsq) {
  double ss = 0;
  ZINF_FOR_EACH(i, n) {
    const float prev = first ? 0.0f : load(partial[i]);
    const bf16 h = store_bf16(prev + add[i]);
    home[i] = h;
    const double g = load(h);
    ss += g * g;
  }
  if (!sumsq) return;
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) atomicAdd(sumsq, ss);
}

__global__ void adam_k(AdamCoeffs c, float* master, float* m, float* v, const bf16* grad, bf16* param_out, int64_t n) {
  ZINF_FOR_EACH(i, n) {
    float g = load(grad[i]);
    float p = master[i];
    if (c.l2 != 0.0f) g = __fadd_rn(g, __fmul_rn(c.l2, p));
    const float mi = __fadd_rn(__fmul_rn(c.beta1, m[i]), __fmul_rn(c.one_minus_beta1, g));
    const float vi = __fadd_rn(__fmul_rn(c.beta2, v[i]), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), c.inv_sqrt_bc2), c.eps);
    if (c.decay != 0.0f) p = __fsub_rn(p, __fmul_rn(c.decay, p));
    p = __fsub_rn(p, __fmul_rn(c.step_size, __fdiv_rn(mi, denom)));
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    if (param_out) param_out[i] = store_bf16(p);
  }
}

#undef ZINF_FOR_EACH

dim3 column_grid(int64_t cols, int64_t T) {
  return dim3(unsigned((cols + kThreads - 1) / kThreads), unsigned((T + kRowsPerChunk - 1) / kRowsPerChunk));
}
unsigned warp_row_blocks(int64_t rows) { return unsigned((rows * 32 + kThreads - 1) / kThreads); }

}  // namespace

#define ZINF_LAUNCH(kernel, blocks, ...)                                       \
  do {                                                                         \
    kernel<<<grid(blocks), kThreads, 0, stream>>>(__VA_ARGS__);                    \
    ZINF_CUDA_CHECK_LAUNCH();                                                  \
  } while (0)

void embedding_forward(float* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t B, int64_t S,
                       int64_t C, int64_t r0, int64_t r1, Stream stream) {
  const int64_t n = B * S * C;
  ZINF_LAUNCH(embedding_forward_k, blocks_for(n), out, tokens, wte, wpe, S, C, r0, r1, n);
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int64_t B, int64_t S,
                        int64_t C, int64_t r0, int64_t r1, Stream stream) {
  const int64_t n = B * S * C;
  ZINF_LAUNCH(embedding_backward_k, blocks_for(n), dwte, dwpe, dout, tokens, S, C, r0, r1, n);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const bf16* gamma, const bf16* beta,
                       int64_t T, int64_t C, Stream stream) {
  ZINF_LAUNCH(layernorm_forward_k, T, out, mean, rstd, x, gamma, beta, C, 1e-5f);
}

void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dout, const float* x, const bf16* gamma,
                        const float* mean, const float* rstd, int64_t T, int64_t C, Stream stream) {
  if (dx) ZINF_LAUNCH(layernorm_backward_dx_k, T, dx, dout, x, gamma, mean, rstd, C);
  if (dgamma || dbeta) ZINF_LAUNCH(layernorm_backward_params_k, column_grid(C, T), dgamma, dbeta, dout, x, mean, rstd, T, C);
}

void causal_softmax_forward(float* att, const float* pre, int64_t BH, int64_t S, float scale, Stream stream) {
  ZINF_LAUNCH(causal_softmax_forward_k, warp_row_blocks(BH * S), att, pre, BH * S, S, scale);
}

void causal_softmax_backward(float* dpre, const float* datt, const float* att, int64_t BH, int64_t S, float scale,
                             Stream stream) {
  ZINF_LAUNCH(causal_softmax_backward_k, warp_row_blocks(BH * S), dpre, datt, att, BH * S, S, scale);
}

void split_heads(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t S, int64_t C, int64_t NH,
                 Stream stream) {
  const int64_t n = B * S * C;
  ZINF_LAUNCH(split_heads_k, blocks_for(n), q, k, v, qkv, S, C, NH, n);
}

void split_heads_backward(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t S,
                          int64_t C, int64_t NH, Stream stream) {
  const int64_t n = B * S * C;
  ZINF_LAUNCH(split_heads_backward_k, blocks_for(n), dqkv, dq, dk, dv, S, C, NH, n);
}

void merge_heads(float* out, const float* y, int64_t B, int64_t S, int64_t C, int64_t NH, Stream stream) {
  const int64_t n = B * S * C;
  ZINF_LAUNCH(merge_heads_k, blocks_for(n), out, y, S, C, NH, n);
}

void merge_heads_backward(float* dy, const float* dout, int64_t B, int64_t S, int64_t C, int64_t NH, Stream stream) {
  const int64_t n = B * S * C;
  ZINF_LAUNCH(merge_heads_backward_k, blocks_for(n), dy, dout, S, C, NH, n);
}

void gelu_forward(float* out, const float* x, int64_t n, Stream stream) {
  ZINF_LAUNCH(gelu_forward_k, blocks_for(n), out, x, n);
}
void gelu_backward(float* dx, const float* dout, const float* x, int64_t n, Stream stream) {
  ZINF_LAUNCH(gelu_backward_k, blocks_for(n), dx, dout, x, n);
}
void residual_forward(float* out, const float* a, const float* b, int64_t n, Stream stream) {
  ZINF_LAUNCH(residual_forward_k, blocks_for(n), out, a, b, n);
}
void residual_backward(float* da, float* db, const float* dout, int64_t n, Stream stream) {
  ZINF_LAUNCH(residual_backward_k, blocks_for(n), da, db, dout, n);
}

void crossentropy_forward(float* stats, const float* logits, const int32_t* targets, int64_t T, int64_t V,
                          Stream stream) {
  ZINF_LAUNCH(crossentropy_forward_k, T, stats, logits, targets, T, V);
}

void crossentropy_backward(float* logits, const float* stats, const int32_t* targets, float scale, int64_t T, int64_t V,
                           int64_t v0, int64_t v1, Stream stream) {
  const int64_t n = T * (v1 - v0);
  ZINF_LAUNCH(crossentropy_backward_k, blocks_for(n), logits, stats, targets, scale, T, V, v0, v1 - v0, n);
}

void add_bias(float* y, const bf16* b, int64_t T, int64_t out, int64_t r0, int64_t rows, Stream stream) {
  ZINF_LAUNCH(add_bias_k, blocks_for(T * rows), y, b, out, r0, rows, T * rows);
}

void bias_backward(float* db, const float* dy, int64_t T, int64_t out, int64_t r0, int64_t rows, Stream stream) {
  ZINF_LAUNCH(bias_backward_k, column_grid(rows, T), db, dy, T, out, r0, rows);
}

void to_bf16(bf16* out, const float* in, int64_t n, Stream stream) { ZINF_LAUNCH(to_bf16_k, blocks_for(n), out, in, n); }
void to_float(float* out, const bf16* in, int64_t n, Stream stream) { ZINF_LAUNCH(to_float_k, blocks_for(n), out, in, n); }
void scale(float* x, float s, int64_t n, Stream stream) { ZINF_LAUNCH(scale_k, blocks_for(n), x, s, n); }
void scale_bf16(bf16* out, const bf16* in, float s, int64_t n, Stream stream) {
  ZINF_LAUNCH(scale_bf16_k, blocks_for(n), out, in, s, n);
}

void accumulate_grad(bf16* home, const bf16* partial, const float* add, int64_t n, bool first, double* sumsq,
                     Stream stream) {
  ZINF_LAUNCH(accumulate_grad_k, blocks_for(n), home, partial, add, n, first, sumsq);
}

void adam_step(const AdamCoeffs& c, float* master, float* m, float* v, const bf16* grad, bf16* param_out, int64_t n,
               Stream stream) {
  ZINF_LAUNCH(adam_k, blocks_for(n), c, master, m, v, grad, param_out, n);
}

#undef ZINF_LAUNCH

}  // namespace zinf::engine::cuda
