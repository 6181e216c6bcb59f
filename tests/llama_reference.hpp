// A plain double-precision Llama, written the way transformers' modeling_llama writes it and
// independently of the engine's kernels: RMSNorm as weight * x / sqrt(mean(x^2) + eps), rotary
// embedding as x * cos + rotate_half(x) * sin with cos/sin over the whole head, repeat_kv then
// a masked softmax, SiLU(gate) * up, and the mean cross-entropy of the logits. The tests hold the
// engine's kernels and whole model to it. Header-only; pure functions.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zinf::test::llama {

using Tensor = std::vector<double>;

inline Tensor rmsnorm(const Tensor& x, const Tensor& w, int64_t T, int64_t C, double eps) {
  Tensor y(x.size());
  for (int64_t t = 0; t < T; ++t) {
    double variance = 0;
    for (int64_t c = 0; c < C; ++c) variance += std::pow(x[size_t(t * C + c)], 2) / double(C);
    for (int64_t c = 0; c < C; ++c) y[size_t(t * C + c)] = w[size_t(c)] * (x[size_t(t * C + c)] / std::sqrt(variance + eps));
  }
  return y;
}

// Rows t = b * S + s of H heads of D elements, at position s.
inline Tensor rope(const Tensor& x, int64_t B, int64_t S, int64_t H, int64_t D, double theta) {
  Tensor y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const size_t off = size_t(((b * S + s) * H + h) * D);
        for (int64_t j = 0; j < D; ++j) {
          const int64_t i = j % (D / 2);
          const double freq = double(s) / std::pow(theta, double(2 * i) / double(D));
          const double rotated = j < D / 2 ? -x[off + size_t(j + D / 2)] : x[off + size_t(j - D / 2)];
          y[off + size_t(j)] = x[off + size_t(j)] * std::cos(freq) + rotated * std::sin(freq);
        }
      }
  return y;
}

// Causal attention of NH query heads over KV key/value heads (repeat_kv: head h reads h / (NH/KV)).
inline Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t B, int64_t S, int64_t NH, int64_t KV,
                        int64_t D) {
  const int64_t rep = NH / KV;
  Tensor out(size_t(B * S * NH * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      Tensor kr(size_t(S * D)), vr(size_t(S * D));
      for (int64_t u = 0; u < S; ++u)
        for (int64_t i = 0; i < D; ++i) {
          kr[size_t(u * D + i)] = k[size_t(((b * S + u) * KV + h / rep) * D + i)];
          vr[size_t(u * D + i)] = v[size_t(((b * S + u) * KV + h / rep) * D + i)];
        }
      for (int64_t t = 0; t < S; ++t) {
        Tensor scores(static_cast<size_t>(S));
        for (int64_t u = 0; u < S; ++u) {
          double s = 0;
          for (int64_t i = 0; i < D; ++i) s += q[size_t(((b * S + t) * NH + h) * D + i)] * kr[size_t(u * D + i)];
          scores[size_t(u)] = s / std::sqrt(double(D)) + (u > t ? -INFINITY : 0.0);
        }
        double z = 0;
        for (double s : scores) z += std::exp(s);
        for (int64_t u = 0; u < S; ++u)
          for (int64_t i = 0; i < D; ++i)
            out[size_t(((b * S + t) * NH + h) * D + i)] += std::exp(scores[size_t(u)]) / z * vr[size_t(u * D + i)];
      }
    }
  return out;
}

inline Tensor silu_mul(const Tensor& gate, const Tensor& up) {
  Tensor y(gate.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return y;
}

// x (T x in) times W^T, W out x in as nn.Linear keeps it.
inline Tensor linear(const Tensor& x, const Tensor& w, int64_t T, int64_t in, int64_t out) {
  Tensor y(size_t(T * out), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += x[size_t(t * in + i)] * w[size_t(o * in + i)];
      y[size_t(t * out + o)] = s;
    }
  return y;
}

struct Shape {
  int64_t B, S, C, NH, KV, F, V, layers;
  double theta, eps;
  bool tied;
};

// LlamaForCausalLM's mean loss over B x S tokens, the weights by their names below the model
// ("embed_tokens", "layers.0.self_attn.q_proj", ..., "norm", "lm_head").
inline double loss(const Shape& m, const std::map<std::string, Tensor>& w, const std::vector<int32_t>& inputs,
                   const std::vector<int32_t>& targets) {
  const int64_t T = m.B * m.S, D = m.C / m.NH;
  Tensor x(size_t(T * m.C));
  const Tensor& emb = w.at("embed_tokens");
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < m.C; ++c) x[size_t(t * m.C + c)] = emb[size_t(inputs[size_t(t)] * m.C + c)];
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const Tensor h = rmsnorm(x, w.at(p + "input_layernorm"), T, m.C, m.eps);
    const Tensor q = rope(linear(h, w.at(p + "self_attn.q_proj"), T, m.C, m.NH * D), m.B, m.S, m.NH, D, m.theta);
    const Tensor k = rope(linear(h, w.at(p + "self_attn.k_proj"), T, m.C, m.KV * D), m.B, m.S, m.KV, D, m.theta);
    const Tensor v = linear(h, w.at(p + "self_attn.v_proj"), T, m.C, m.KV * D);
    const Tensor o = linear(attention(q, k, v, m.B, m.S, m.NH, m.KV, D), w.at(p + "self_attn.o_proj"), T, m.NH * D, m.C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Tensor h2 = rmsnorm(x, w.at(p + "post_attention_layernorm"), T, m.C, m.eps);
    const Tensor act = silu_mul(linear(h2, w.at(p + "mlp.gate_proj"), T, m.C, m.F), linear(h2, w.at(p + "mlp.up_proj"), T, m.C, m.F));
    const Tensor down = linear(act, w.at(p + "mlp.down_proj"), T, m.F, m.C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  const Tensor logits = linear(rmsnorm(x, w.at("norm"), T, m.C, m.eps), w.at(m.tied ? "embed_tokens" : "lm_head"), T, m.C, m.V);
  double total = 0;
  for (int64_t t = 0; t < T; ++t) {
    double mx = -INFINITY, z = 0;
    for (int64_t c = 0; c < m.V; ++c) mx = std::max(mx, logits[size_t(t * m.V + c)]);
    for (int64_t c = 0; c < m.V; ++c) z += std::exp(logits[size_t(t * m.V + c)] - mx);
    total += -(logits[size_t(t * m.V + targets[size_t(t)])] - mx - std::log(z));
  }
  return total / double(T);
}

}  // namespace zinf::test::llama
