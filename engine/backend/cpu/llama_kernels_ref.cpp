// The Llama kernels' one definition, instantiated for float (the engine) and double (the tests).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cpu/llama_kernels.hpp"

namespace zinf::engine::cpu::ref {

template <class F>
void rmsnorm_forward(F* out, F* rstd, const F* x, const F* gamma, int64_t T, int64_t C, double eps) {
  for (int64_t t = 0; t < T; ++t) {
    const F* xt = x + t * C;
    F ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += xt[c] * xt[c];
    const F r = F(1) / std::sqrt(ss / F(C) + F(eps));
    for (int64_t c = 0; c < C; ++c) out[t * C + c] = xt[c] * r * gamma[c];
    rstd[t] = r;
  }
}

template <class F>
void rmsnorm_backward(F* dx, F* dgamma, const F* dout, const F* x, const F* gamma, const F* rstd, int64_t T,
                      int64_t C) {
  for (int64_t t = 0; t < T; ++t) {
    const F* xt = x + t * C;
    const F* dt = dout + t * C;
    const F r = rstd[t];
    // y = xhat * gamma, xhat = x r: dx = r (dxhat - xhat mean(dxhat xhat)), dxhat = dout gamma
    F mean_dx = 0;
    for (int64_t c = 0; c < C; ++c) mean_dx += dt[c] * gamma[c] * xt[c] * r;
    mean_dx /= F(C);
    for (int64_t c = 0; c < C; ++c) {
      const F xhat = xt[c] * r;
      if (dgamma) dgamma[c] += dt[c] * xhat;
      if (dx) dx[t * C + c] += r * (dt[c] * gamma[c] - xhat * mean_dx);
    }
  }
}

namespace {

// cos and sin of every (position, frequency) pair: S x D/2 each. The angle is formed in double and
// rounded once, so float and double kernels rotate by the same angles to their precision.
template <class F>
void rope_table(std::vector<F>& cosv, std::vector<F>& sinv, int64_t S, int64_t D, double theta) {
  if (D % 2 != 0 || D <= 0) throw std::invalid_argument("rope: head size " + std::to_string(D) + " is not even");
  if (!(theta > 0)) throw std::invalid_argument("rope: rope_theta must be positive");
  const int64_t half = D / 2;
  cosv.resize(size_t(S * half));
  sinv.resize(size_t(S * half));
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = 1.0 / std::pow(theta, double(2 * i) / double(D));
    for (int64_t s = 0; s < S; ++s) {
      const double a = double(s) * inv_freq;
      cosv[size_t(s * half + i)] = F(std::cos(a));
      sinv[size_t(s * half + i)] = F(std::sin(a));
    }
  }
}

// Rotates every head of every row by +angle (sign 1) or -angle (sign -1), writing (accumulate
// false) or adding (true) into out.
template <class F>
void rope_apply(F* out, const F* x, int64_t B, int64_t S, int64_t H, int64_t D, double theta, F sign, bool accumulate) {
  std::vector<F> cosv, sinv;
  rope_table(cosv, sinv, S, D, theta);
  const int64_t half = D / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const F* c = cosv.data() + s * half;
      const F* sn = sinv.data() + s * half;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = ((b * S + s) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const F x1 = x[off + i], x2 = x[off + half + i];
          const F y1 = x1 * c[i] - sign * x2 * sn[i];
          const F y2 = x2 * c[i] + sign * x1 * sn[i];
          if (accumulate) {
            out[off + i] += y1;
            out[off + half + i] += y2;
          } else {
            out[off + i] = y1;
            out[off + half + i] = y2;
          }
        }
      }
    }
}

}  // namespace

template <class F>
void rope_forward(F* out, const F* x, int64_t B, int64_t S, int64_t H, int64_t D, double theta) {
  rope_apply(out, x, B, S, H, D, theta, F(1), false);
}

template <class F>
void rope_backward(F* dx, const F* dout, int64_t B, int64_t S, int64_t H, int64_t D, double theta) {
  rope_apply(dx, dout, B, S, H, D, theta, F(-1), true);
}

template <class F>
void swiglu_forward(F* out, const F* gate, const F* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const F sig = F(1) / (F(1) + std::exp(-gate[i]));
    out[i] = gate[i] * sig * up[i];
  }
}

template <class F>
void swiglu_backward(F* dgate, F* dup, const F* dout, const F* gate, const F* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const F g = gate[i];
    const F sig = F(1) / (F(1) + std::exp(-g));
    // silu'(g) = sig (1 + g (1 - sig))
    dgate[i] += dout[i] * up[i] * sig * (F(1) + g * (F(1) - sig));
    dup[i] += dout[i] * g * sig;
  }
}

namespace {
void check_heads(int64_t NH, int64_t KV) {
  if (KV <= 0 || NH % KV != 0)
    throw std::invalid_argument("attention: " + std::to_string(NH) + " query heads are not a multiple of " +
                                std::to_string(KV) + " key/value heads");
}
}  // namespace

template <class F>
void gqa_attention_forward(F* out, F* att, const F* q, const F* k, const F* v, int64_t B, int64_t S, int64_t NH,
                           int64_t KV, int64_t D) {
  causal_attention_forward(out, att, q, k, v, NH * D, KV * D, B, S, NH, KV, D);
}

template <class F>
void causal_attention_forward(F* out, F* att, const F* q, const F* k, const F* v, int64_t qs, int64_t kvs, int64_t B,
                              int64_t S, int64_t NH, int64_t KV, int64_t D) {
  check_heads(NH, KV);
  const int64_t group = NH / KV, QW = NH * D;
  const F scale = F(1) / std::sqrt(F(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kh = h / group;
      for (int64_t t = 0; t < S; ++t) {
        const F* qt = q + (b * S + t) * qs + h * D;
        F* a = att + ((b * NH + h) * S + t) * S;
        F mx = -INFINITY;
        for (int64_t u = 0; u <= t; ++u) {
          const F* ku = k + (b * S + u) * kvs + kh * D;
          F s = 0;
          for (int64_t i = 0; i < D; ++i) s += qt[i] * ku[i];
          a[u] = s * scale;
          mx = std::max(mx, a[u]);
        }
        F sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          a[u] = std::exp(a[u] - mx);
          sum += a[u];
        }
        for (int64_t u = 0; u < S; ++u) a[u] = u <= t ? a[u] / sum : F(0);
        F* o = out + (b * S + t) * QW + h * D;
        for (int64_t i = 0; i < D; ++i) o[i] = 0;
        for (int64_t u = 0; u <= t; ++u) {
          const F* vu = v + (b * S + u) * kvs + kh * D;
          for (int64_t i = 0; i < D; ++i) o[i] += a[u] * vu[i];
        }
      }
    }
}

template <class F>
void gqa_attention_backward(F* dq, F* dk, F* dv, const F* dout, const F* q, const F* k, const F* v, const F* att,
                            int64_t B, int64_t S, int64_t NH, int64_t KV, int64_t D) {
  check_heads(NH, KV);
  const int64_t group = NH / KV, QW = NH * D, KW = KV * D;
  const F scale = F(1) / std::sqrt(F(D));
  std::vector<F> datt(size_t(S), F(0));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kh = h / group;
      for (int64_t t = 0; t < S; ++t) {
        const F* a = att + ((b * NH + h) * S + t) * S;
        const F* d = dout + (b * S + t) * QW + h * D;
        // out = sum_u a[u] v_u: d a[u] = d . v_u, d v_u += a[u] d (the shared head sums its group)
        for (int64_t u = 0; u <= t; ++u) {
          const int64_t vo = (b * S + u) * KW + kh * D;
          F s = 0;
          for (int64_t i = 0; i < D; ++i) {
            s += d[i] * v[vo + i];
            dv[vo + i] += a[u] * d[i];
          }
          datt[size_t(u)] = s;
        }
        F dot = 0;
        for (int64_t u = 0; u <= t; ++u) dot += a[u] * datt[size_t(u)];
        const int64_t qo = (b * S + t) * QW + h * D;
        for (int64_t u = 0; u <= t; ++u) {
          const F dpre = a[u] * (datt[size_t(u)] - dot) * scale;
          const int64_t ko = (b * S + u) * KW + kh * D;
          for (int64_t i = 0; i < D; ++i) {
            dq[qo + i] += dpre * k[ko + i];
            dk[ko + i] += dpre * q[qo + i];
          }
        }
      }
    }
}

#define ZINF_INSTANTIATE(F)                                                                                        \
  template void rmsnorm_forward<F>(F*, F*, const F*, const F*, int64_t, int64_t, double);                          \
  template void rmsnorm_backward<F>(F*, F*, const F*, const F*, const F*, const F*, int64_t, int64_t);             \
  template void rope_forward<F>(F*, const F*, int64_t, int64_t, int64_t, int64_t, double);                         \
  template void rope_backward<F>(F*, const F*, int64_t, int64_t, int64_t, int64_t, double);                        \
  template void swiglu_forward<F>(F*, const F*, const F*, int64_t);                                                \
  template void swiglu_backward<F>(F*, F*, const F*, const F*, const F*, int64_t);                                 \
  template void gqa_attention_forward<F>(F*, F*, const F*, const F*, const F*, int64_t, int64_t, int64_t, int64_t, \
                                         int64_t);                                                                 \
  template void causal_attention_forward<F>(F*, F*, const F*, const F*, const F*, int64_t, int64_t, int64_t, int64_t, \
                                            int64_t, int64_t, int64_t);                                              \
  template void gqa_attention_backward<F>(F*, F*, F*, const F*, const F*, const F*, const F*, const F*, int64_t,   \
                                          int64_t, int64_t, int64_t, int64_t);

ZINF_INSTANTIATE(float)
ZINF_INSTANTIATE(double)
#undef ZINF_INSTANTIATE

}  // namespace zinf::engine::cpu::ref
