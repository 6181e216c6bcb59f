// Plain-loop reference kernels: the readable definition of every operator, instantiated for float
// (the reference the fast path is held to) and double (finite-difference tests).
#include <cmath>
#include <algorithm>
#include <vector>

#include "engine/backend/cpu/kernels.hpp"
#include "engine/backend/cpu/llama_kernels.hpp"

namespace zinf::engine::cpu::ref {

template <class F>
void embedding_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int64_t B, int64_t S, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t t = b * S + s;
      const F* e = wte + int64_t(tokens[t]) * C;
      const F* p = wpe + s * C;
      for (int64_t c = 0; c < C; ++c) out[t * C + c] = e[c] + p[c];
    }
}

template <class F>
void embedding_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int64_t B, int64_t S, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t t = b * S + s;
      const F* d = dout + t * C;
      if (dwte) {
        F* e = dwte + int64_t(tokens[t]) * C;
        for (int64_t c = 0; c < C; ++c) e[c] += d[c];
      }
      if (dwpe) {
        F* p = dwpe + s * C;
        for (int64_t c = 0; c < C; ++c) p[c] += d[c];
      }
    }
}

template <class F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* x, const F* gamma, const F* beta, int64_t T, int64_t C) {
  for (int64_t t = 0; t < T; ++t) {
    const F* xt = x + t * C;
    F m = 0;
    for (int64_t c = 0; c < C; ++c) m += xt[c];
    m /= F(C);
    F v = 0;
    for (int64_t c = 0; c < C; ++c) v += (xt[c] - m) * (xt[c] - m);
    v /= F(C);
    const F r = F(1) / std::sqrt(v + F(kLayerNormEps));
    for (int64_t c = 0; c < C; ++c) out[t * C + c] = (xt[c] - m) * r * gamma[c] + beta[c];
    mean[t] = m;
    rstd[t] = r;
  }
}

template <class F>
void layernorm_backward(F* dx, F* dgamma, F* dbeta, const F* dout, const F* x, const F* gamma, const F* mean,
                        const F* rstd, int64_t T, int64_t C) {
  for (int64_t t = 0; t < T; ++t) {
    const F* xt = x + t * C;
    const F* dt = dout + t * C;
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dout * gamma
    F mean_d = 0, mean_dx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const F xhat = (xt[c] - mean[t]) * rstd[t];
      const F d = dt[c] * gamma[c];
      mean_d += d;
      mean_dx += d * xhat;
    }
    mean_d /= F(C);
    mean_dx /= F(C);
    for (int64_t c = 0; c < C; ++c) {
      const F xhat = (xt[c] - mean[t]) * rstd[t];
      if (dbeta) dbeta[c] += dt[c];
      if (dgamma) dgamma[c] += dt[c] * xhat;
      if (dx) dx[t * C + c] += rstd[t] * (dt[c] * gamma[c] - mean_d - xhat * mean_dx);
    }
  }
}

template <class F>
void linear_forward(F* y, const F* x, const F* w, const F* b, int64_t T, int64_t in, int64_t out, int64_t r0,
                    int64_t r1) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = r0; o < r1; ++o) {
      const F* wr = w + (o - r0) * in;
      F acc = b ? b[o - r0] : F(0);
      for (int64_t i = 0; i < in; ++i) acc += x[t * in + i] * wr[i];
      y[t * out + o] = acc;
    }
}

template <class F>
void linear_backward(F* dx, F* dw, F* db, const F* dy, const F* x, const F* w, int64_t T, int64_t in, int64_t out,
                     int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = r0; o < r1; ++o) {
      const F d = dy[t * out + o];
      const F* wr = w + (o - r0) * in;
      F* dwr = dw + (o - r0) * in;
      for (int64_t i = 0; i < in; ++i) {
        if (dx) dx[t * in + i] += d * wr[i];
        dwr[i] += d * x[t * in + i];
      }
      if (db) db[o - r0] += d;
    }
}

template <class F>
void attention_forward(F* out, F* att, const F* qkv, int64_t B, int64_t S, int64_t C, int64_t NH) {
  // Multi-head attention is grouped-query attention with a key/value head per query head.
  causal_attention_forward(out, att, qkv, qkv + C, qkv + 2 * C, 3 * C, 3 * C, B, S, NH, NH, C / NH);
}

template <class F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* att, int64_t B, int64_t S, int64_t C,
                        int64_t NH) {
  const int64_t hd = C / NH;
  const F scale = F(1) / std::sqrt(F(hd));
  std::vector<F> datt(size_t(S), F(0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < S; ++t) {
        const F* a = att + ((b * NH + h) * S + t) * S;
        const F* d = dout + (b * S + t) * C + h * hd;
        // out = sum_u a[u] v_u: d a[u] = d . v_u, d v_u += a[u] d
        for (int64_t u = 0; u <= t; ++u) {
          const int64_t vo = (b * S + u) * 3 * C + 2 * C + h * hd;
          F s = 0;
          for (int64_t i = 0; i < hd; ++i) {
            s += d[i] * qkv[vo + i];
            dqkv[vo + i] += a[u] * d[i];
          }
          datt[size_t(u)] = s;
        }
        // softmax backward: d pre[u] = a[u] (datt[u] - sum_j a[j] datt[j])
        F dot = 0;
        for (int64_t u = 0; u <= t; ++u) dot += a[u] * datt[size_t(u)];
        const int64_t qo = (b * S + t) * 3 * C + h * hd;
        for (int64_t u = 0; u <= t; ++u) {
          const F dpre = a[u] * (datt[size_t(u)] - dot) * scale;
          const int64_t ko = (b * S + u) * 3 * C + C + h * hd;
          for (int64_t i = 0; i < hd; ++i) {
            dqkv[qo + i] += dpre * qkv[ko + i];
            dqkv[ko + i] += dpre * qkv[qo + i];
          }
        }
      }
}

namespace {
template <class F>
constexpr F kGeluC = F(0.7978845608028654);  // sqrt(2 / pi)
}

template <class F>
void gelu_forward(F* out, const F* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const F u = kGeluC<F> * (x[i] + F(0.044715) * x[i] * x[i] * x[i]);
    out[i] = F(0.5) * x[i] * (F(1) + std::tanh(u));
  }
}

template <class F>
void gelu_backward(F* dx, const F* dout, const F* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const F u = kGeluC<F> * (x[i] + F(0.044715) * x[i] * x[i] * x[i]);
    const F th = std::tanh(u);
    const F du = kGeluC<F> * (F(1) + F(3 * 0.044715) * x[i] * x[i]);
    const F g = F(0.5) * (F(1) + th) + F(0.5) * x[i] * (F(1) - th * th) * du;
    dx[i] += g * dout[i];
  }
}

template <class F>
void residual_forward(F* out, const F* a, const F* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class F>
void residual_backward(F* da, F* db, const F* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template <class F>
double crossentropy_forward(F* stats, const F* logits, const int32_t* targets, int64_t T, int64_t V) {
  double total = 0;
  F *mx = stats, *sum = stats + T, *losses = stats + 2 * T;
  for (int64_t t = 0; t < T; ++t) {
    const F* l = logits + t * V;
    F m = l[0];
    for (int64_t v = 1; v < V; ++v) m = std::max(m, l[v]);
    F s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(l[v] - m);
    mx[t] = m;
    sum[t] = s;
    // -log p[target] from the logits directly, so a tiny probability does not underflow to log(0)
    losses[t] = -(l[targets[t]] - m - std::log(s));
    total += double(losses[t]);
  }
  return total / double(T);
}

template <class F>
void crossentropy_backward(F* logits, const F* stats, const int32_t* targets, int64_t target_offset, double scale,
                           int64_t T, int64_t V, int64_t valid, int64_t v0, int64_t v1) {
  const F* mx = stats;
  const F* sum = stats + T;
  for (int64_t t = 0; t < T; ++t) {
    F* l = logits + t * V;
    const int64_t target = int64_t(targets[t]) - target_offset;
    for (int64_t v = v0; v < v1; ++v)
      l[v] = v < valid ? (std::exp(l[v] - mx[t]) / sum[t] - (v == target ? F(1) : F(0))) * F(scale) : F(0);
  }
}

#define ZINF_INSTANTIATE(F)                                                                                          \
  template void embedding_forward<F>(F*, const int32_t*, const F*, const F*, int64_t, int64_t, int64_t);             \
  template void embedding_backward<F>(F*, F*, const F*, const int32_t*, int64_t, int64_t, int64_t);                  \
  template void layernorm_forward<F>(F*, F*, F*, const F*, const F*, const F*, int64_t, int64_t);                    \
  template void layernorm_backward<F>(F*, F*, F*, const F*, const F*, const F*, const F*, const F*, int64_t,         \
                                      int64_t);                                                                      \
  template void linear_forward<F>(F*, const F*, const F*, const F*, int64_t, int64_t, int64_t, int64_t, int64_t);    \
  template void linear_backward<F>(F*, F*, F*, const F*, const F*, const F*, int64_t, int64_t, int64_t, int64_t,     \
                                   int64_t);                                                                         \
  template void attention_forward<F>(F*, F*, const F*, int64_t, int64_t, int64_t, int64_t);                          \
  template void attention_backward<F>(F*, const F*, const F*, const F*, int64_t, int64_t, int64_t, int64_t);         \
  template void gelu_forward<F>(F*, const F*, int64_t);                                                              \
  template void gelu_backward<F>(F*, const F*, const F*, int64_t);                                                   \
  template void residual_forward<F>(F*, const F*, const F*, int64_t);                                                \
  template void residual_backward<F>(F*, F*, const F*, int64_t);                                                     \
  template double crossentropy_forward<F>(F*, const F*, const int32_t*, int64_t, int64_t);                           \
  template void crossentropy_backward<F>(F*, const F*, const int32_t*, int64_t, double, int64_t, int64_t, int64_t,     \
                                         int64_t, int64_t);

ZINF_INSTANTIATE(float)
ZINF_INSTANTIATE(double)
#undef ZINF_INSTANTIATE

}  // namespace zinf::engine::cpu::ref
