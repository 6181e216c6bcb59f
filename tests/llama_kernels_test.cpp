// The Llama kernels (engine/backend/cpu/llama_kernels.hpp), each two ways: its double-precision
// backward against central finite differences of its own forward (|analytic - numeric| <= 1e-6 +
// 1e-5 |analytic|), and its float forward and backward against a plain double-precision reference
// written a different way (tests/llama_reference.hpp) (transformers' formulas: rotate_half with cos/sin over the whole head,
// repeat_kv then masked softmax, RMSNorm as x * rsqrt(mean(x^2) + eps)), whose gradients are
// finite differences of that reference (float tolerance: 2e-5 + 2e-4 |want|).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "engine/backend/cpu/kernels.hpp"
#include "engine/backend/cpu/llama_kernels.hpp"
#include "llama_reference.hpp"

namespace ref = zinf::engine::cpu::ref;
using zinf::test::llama::attention;
using zinf::test::llama::rmsnorm;
using zinf::test::llama::rope;

namespace {

template <class F>
std::vector<F> randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<F> v(n);
  for (auto& x : v) x = F(d(rng));
  return v;
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of loss() in every element of x (perturbed in place, restored).
std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& loss) {
  const double eps = 1e-6;
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double up = loss();
    x[i] = keep - eps;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

void check_grad(const char* what, std::vector<double>& x, const std::vector<double>& analytic,
                const std::function<double()>& loss) {
  INFO(what);
  REQUIRE(x.size() == analytic.size());
  const auto numeric = numeric_grad(x, loss);
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("element " << i << ": analytic " << analytic[i] << " numeric " << numeric[i]);
    CHECK(std::abs(analytic[i] - numeric[i]) <= 1e-6 + 1e-5 * std::abs(analytic[i]));
  }
}

template <class G, class W>
void check_close(const char* what, const std::vector<G>& got, const std::vector<W>& want, double abs = 2e-5,
                 double rel = 2e-4) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    worst = std::max(worst, err);
    if (err > abs + rel * std::abs(double(want[i]))) ++bad;
  }
  INFO("largest absolute difference " << worst);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("RMSNorm backward matches finite differences and a plain reference", "[llama_kernels]") {
  const int64_t T = 3, C = 8;
  const double eps = 1e-6;  // Llama's rms_norm_eps
  auto x = randn<double>(T * C, 1, 2.0), g = randn<double>(C, 2), r = randn<double>(T * C, 3);
  std::vector<double> out(T * C), rstd(T);
  auto loss = [&] {
    ref::rmsnorm_forward(out.data(), rstd.data(), x.data(), g.data(), T, C, eps);
    return dot(out, r);
  };
  loss();
  std::vector<double> dx(x.size()), dg(C);
  ref::rmsnorm_backward(dx.data(), dg.data(), r.data(), x.data(), g.data(), rstd.data(), T, C);
  check_grad("x", x, dx, loss);
  check_grad("gamma", g, dg, loss);

  // float kernel against the plain reference and its finite differences
  auto plain = [&] { return dot(rmsnorm(x, g, T, C, eps), r); };
  const auto want_dx = numeric_grad(x, plain), want_dg = numeric_grad(g, plain);
  auto xf = to_float(x), gf = to_float(g), rf = to_float(r);
  std::vector<float> of(T * C), rsf(T), dxf(x.size(), 0.0f), dgf(C, 0.0f);
  ref::rmsnorm_forward(of.data(), rsf.data(), xf.data(), gf.data(), T, C, eps);
  ref::rmsnorm_backward(dxf.data(), dgf.data(), rf.data(), xf.data(), gf.data(), rsf.data(), T, C);
  check_close("forward", of, rmsnorm(x, g, T, C, eps));
  check_close("dx", dxf, want_dx);
  check_close("dgamma", dgf, want_dg);
  // eps matters: a zero row normalises to zero instead of dividing by zero
  std::vector<double> zero(C, 0.0), zo(C), zr(1);
  ref::rmsnorm_forward(zo.data(), zr.data(), zero.data(), g.data(), 1, C, eps);
  CHECK(zr[0] == Approx(1.0 / std::sqrt(eps)));
  CHECK(zo[0] == 0.0);
}

TEST_CASE("rotary embedding backward matches finite differences and rotate_half", "[llama_kernels]") {
  const int64_t B = 2, S = 5, H = 3, D = 8;
  const double theta = 10000.0;
  auto x = randn<double>(B * S * H * D, 4), r = randn<double>(B * S * H * D, 5);
  std::vector<double> out(x.size());
  auto loss = [&] {
    ref::rope_forward(out.data(), x.data(), B, S, H, D, theta);
    return dot(out, r);
  };
  std::vector<double> dx(x.size());
  ref::rope_backward(dx.data(), r.data(), B, S, H, D, theta);
  check_grad("x", x, dx, loss);

  auto plain = [&] { return dot(rope(x, B, S, H, D, theta), r); };
  const auto want_dx = numeric_grad(x, plain);
  auto xf = to_float(x), rf = to_float(r);
  std::vector<float> of(x.size()), dxf(x.size(), 0.0f);
  ref::rope_forward(of.data(), xf.data(), B, S, H, D, theta);
  ref::rope_backward(dxf.data(), rf.data(), B, S, H, D, theta);
  check_close("forward", of, rope(x, B, S, H, D, theta));
  check_close("dx", dxf, want_dx);

  // A rotation: position 0 is the identity; in place equals out of place; and the score of a
  // rotated query and key depends only on their distance (RoPE's point).
  for (int64_t i = 0; i < H * D; ++i) CHECK(of[size_t(i)] == xf[size_t(i)]);
  std::vector<float> inplace = xf;
  ref::rope_forward(inplace.data(), inplace.data(), B, S, H, D, theta);
  CHECK(inplace == of);
  auto one = randn<double>(size_t(D), 6), two = randn<double>(size_t(D), 7);
  auto score = [&](int64_t m, int64_t n) {
    std::vector<double> q(size_t(S * D), 0.0), k(size_t(S * D), 0.0);
    std::copy(one.begin(), one.end(), q.begin() + m * D);
    std::copy(two.begin(), two.end(), k.begin() + n * D);
    ref::rope_forward(q.data(), q.data(), 1, S, 1, D, theta);
    ref::rope_forward(k.data(), k.data(), 1, S, 1, D, theta);
    double s = 0;
    for (int64_t i = 0; i < D; ++i) s += q[size_t(m * D + i)] * k[size_t(n * D + i)];
    return s;
  };
  CHECK(score(3, 1) == Approx(score(4, 2)).epsilon(1e-12));
  CHECK(score(3, 1) != Approx(score(3, 2)).epsilon(1e-6));
  CHECK_THROWS_WITH(ref::rope_forward(out.data(), x.data(), 1, 1, 1, int64_t(7), theta),
                    Catch::Contains("head size 7 is not even"));
}

TEST_CASE("SwiGLU backward matches finite differences and silu(gate) * up", "[llama_kernels]") {
  const int64_t n = 24;
  auto gate = randn<double>(n, 8, 3.0), up = randn<double>(n, 9), r = randn<double>(n, 10);
  std::vector<double> out(n);
  auto loss = [&] {
    ref::swiglu_forward(out.data(), gate.data(), up.data(), n);
    return dot(out, r);
  };
  std::vector<double> dg(n), du(n);
  ref::swiglu_backward(dg.data(), du.data(), r.data(), gate.data(), up.data(), n);
  check_grad("gate", gate, dg, loss);
  check_grad("up", up, du, loss);

  auto plain_fwd = [&] {
    std::vector<double> y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) y[size_t(i)] = gate[size_t(i)] / (1.0 + std::exp(-gate[size_t(i)])) * up[size_t(i)];
    return y;
  };
  auto plain = [&] { return dot(plain_fwd(), r); };
  const auto want_dg = numeric_grad(gate, plain), want_du = numeric_grad(up, plain);
  auto gf = to_float(gate), uf = to_float(up), rf = to_float(r);
  std::vector<float> of(n), dgf(n, 0.0f), duf(n, 0.0f);
  ref::swiglu_forward(of.data(), gf.data(), uf.data(), n);
  ref::swiglu_backward(dgf.data(), duf.data(), rf.data(), gf.data(), uf.data(), n);
  check_close("forward", of, plain_fwd());
  check_close("dgate", dgf, want_dg);
  check_close("dup", duf, want_du);
}

TEST_CASE("grouped-query attention backward matches finite differences and repeat_kv", "[llama_kernels]") {
  const int64_t B = 2, S = 4, NH = 4, KV = 2, D = 3;
  auto q = randn<double>(B * S * NH * D, 11), k = randn<double>(B * S * KV * D, 12),
       v = randn<double>(B * S * KV * D, 13), r = randn<double>(B * S * NH * D, 14);
  std::vector<double> out(q.size()), att(B * NH * S * S);
  auto loss = [&] {
    ref::gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, S, NH, KV, D);
    return dot(out, r);
  };
  loss();
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
  ref::gqa_attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(), att.data(), B,
                              S, NH, KV, D);
  check_grad("q", q, dq, loss);
  check_grad("k", k, dk, loss);
  check_grad("v", v, dv, loss);

  auto plain = [&] { return dot(attention(q, k, v, B, S, NH, KV, D), r); };
  const auto want_dq = numeric_grad(q, plain), want_dk = numeric_grad(k, plain), want_dv = numeric_grad(v, plain);
  auto qf = to_float(q), kf = to_float(k), vf = to_float(v), rf = to_float(r);
  std::vector<float> of(q.size()), af(att.size()), dqf(q.size(), 0.0f), dkf(k.size(), 0.0f), dvf(v.size(), 0.0f);
  ref::gqa_attention_forward(of.data(), af.data(), qf.data(), kf.data(), vf.data(), B, S, NH, KV, D);
  ref::gqa_attention_backward(dqf.data(), dkf.data(), dvf.data(), rf.data(), qf.data(), kf.data(), vf.data(),
                              af.data(), B, S, NH, KV, D);
  check_close("forward", of, attention(q, k, v, B, S, NH, KV, D));
  check_close("dq", dqf, want_dq);
  check_close("dk", dkf, want_dk);
  check_close("dv", dvf, want_dv);
  CHECK_THROWS_WITH(ref::gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, S, int64_t(4),
                                               int64_t(3), D),
                    Catch::Contains("4 query heads are not a multiple of 3 key/value heads"));
}

TEST_CASE("grouped-query attention with as many key/value heads as heads is GPT-2's attention", "[llama_kernels]") {
  const int64_t B = 1, S = 5, NH = 2, D = 4, C = NH * D;
  auto q = randn<double>(B * S * C, 15), k = randn<double>(B * S * C, 16), v = randn<double>(B * S * C, 17);
  std::vector<double> qkv(size_t(3 * B * S * C));
  for (int64_t t = 0; t < B * S; ++t)
    for (int64_t c = 0; c < C; ++c) {
      qkv[size_t(t * 3 * C + c)] = q[size_t(t * C + c)];
      qkv[size_t(t * 3 * C + C + c)] = k[size_t(t * C + c)];
      qkv[size_t(t * 3 * C + 2 * C + c)] = v[size_t(t * C + c)];
    }
  std::vector<double> mha(size_t(B * S * C)), gqa(mha.size()), att1(size_t(B * NH * S * S)), att2(att1.size());
  ref::attention_forward(mha.data(), att1.data(), qkv.data(), B, S, C, NH);
  ref::gqa_attention_forward(gqa.data(), att2.data(), q.data(), k.data(), v.data(), B, S, NH, NH, D);
  check_close("output", gqa, mha, 1e-14, 1e-12);
  check_close("probabilities", att2, att1, 1e-14, 1e-12);
}

TEST_CASE("an untied LM head's gradient is its own, apart from the embedding's", "[llama_kernels]") {
  // tokens -> embedding rows -> head (its own matrix, no bias) -> mean cross-entropy
  const int64_t T = 4, C = 5, V = 7;
  const std::vector<int32_t> inputs = {1, 3, 6, 1}, targets = {3, 0, 2, 5};
  auto emb = randn<double>(V * C, 18), head = randn<double>(V * C, 19);
  std::vector<double> x(T * C), logits(T * V), stats(3 * T);
  auto loss = [&] {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) x[size_t(t * C + c)] = emb[size_t(inputs[size_t(t)] * C + c)];
    ref::linear_forward<double>(logits.data(), x.data(), head.data(), nullptr, T, C, V, 0, V);
    return ref::crossentropy_forward(stats.data(), logits.data(), targets.data(), T, V);
  };
  loss();
  ref::crossentropy_backward(logits.data(), stats.data(), targets.data(), 0, 1.0 / double(T), T, V, V, 0, V);
  std::vector<double> dx(x.size()), dhead(head.size()), demb(emb.size());
  ref::linear_backward<double>(dx.data(), dhead.data(), nullptr, logits.data(), x.data(), head.data(), T, C, V, 0, V);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) demb[size_t(inputs[size_t(t)] * C + c)] += dx[size_t(t * C + c)];
  check_grad("lm_head", head, dhead, loss);
  check_grad("embed_tokens", emb, demb, loss);
  // rows of tokens never read get no embedding gradient, but the head's every row has one
  CHECK(demb[size_t(0 * C)] == 0.0);
  CHECK(dhead[size_t(0 * C)] != 0.0);
}
