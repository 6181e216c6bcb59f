// The CPU kernels: each reference backward against central finite differences of its own forward
// (double precision, tiny shapes: |analytic - numeric| <= 1e-6 + 1e-5 |analytic|), the fast float
// path against the float reference, and a linear run tile by tile against the untiled layer.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "engine/backend/cpu/convert.hpp"
#include "engine/backend/cpu/kernels.hpp"

namespace cpu = zinf::engine::cpu;
namespace ref = zinf::engine::cpu::ref;

namespace {

template <class F>
std::vector<F> randn(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<F> v(n);
  for (auto& x : v) x = F(d(rng));
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic d loss / d x against central differences of loss(), perturbing x in place.
void check_grad(const char* what, std::vector<double>& x, const std::vector<double>& analytic,
                const std::function<double()>& loss) {
  INFO(what);
  REQUIRE(x.size() == analytic.size());
  const double eps = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double up = loss();
    x[i] = keep - eps;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * eps);
    INFO("element " << i << ": analytic " << analytic[i] << " numeric " << numeric);
    CHECK(std::abs(analytic[i] - numeric) <= 1e-6 + 1e-5 * std::abs(analytic[i]));
  }
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs) {
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

TEST_CASE("embedding backward matches finite differences", "[kernels]") {
  const int64_t B = 2, S = 3, C = 4, V = 5;
  std::vector<int32_t> tok = {1, 4, 1, 0, 2, 4};
  auto wte = randn<double>(V * C, 1), wpe = randn<double>(S * C, 2), r = randn<double>(B * S * C, 3);
  std::vector<double> out(B * S * C);
  auto loss = [&] {
    ref::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, S, C);
    return dot(out, r);
  };
  std::vector<double> dwte(wte.size()), dwpe(wpe.size());
  ref::embedding_backward(dwte.data(), dwpe.data(), r.data(), tok.data(), B, S, C);
  check_grad("wte", wte, dwte, loss);
  check_grad("wpe", wpe, dwpe, loss);
}

TEST_CASE("layernorm backward matches finite differences", "[kernels]") {
  const int64_t T = 3, C = 6;
  auto x = randn<double>(T * C, 4, 2.0), g = randn<double>(C, 5), b = randn<double>(C, 6), r = randn<double>(T * C, 7);
  std::vector<double> out(T * C), mean(T), rstd(T);
  auto loss = [&] {
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), T, C);
    return dot(out, r);
  };
  loss();
  std::vector<double> dx(x.size()), dg(C), db(C);
  ref::layernorm_backward(dx.data(), dg.data(), db.data(), r.data(), x.data(), g.data(), mean.data(), rstd.data(), T,
                          C);
  check_grad("x", x, dx, loss);
  check_grad("gamma", g, dg, loss);
  check_grad("beta", b, db, loss);
  // the normalized rows have mean beta-free zero and unit variance before the affine part
  std::vector<double> ones(C, 1.0), zeros(C, 0.0);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), ones.data(), zeros.data(), T, C);
  double s = 0, s2 = 0;
  for (int64_t c = 0; c < C; ++c) s += out[c], s2 += out[c] * out[c];
  CHECK(std::abs(s / C) < 1e-12);
  CHECK(std::abs(s2 / C - 1.0) < 1e-4);  // eps = 1e-5 in the variance
}

TEST_CASE("linear backward matches finite differences", "[kernels]") {
  const int64_t T = 3, in = 4, out = 5;
  auto x = randn<double>(T * in, 8), w = randn<double>(out * in, 9), b = randn<double>(out, 10),
       r = randn<double>(T * out, 11);
  std::vector<double> y(T * out);
  auto loss = [&] {
    ref::linear_forward(y.data(), x.data(), w.data(), b.data(), T, in, out, 0, out);
    return dot(y, r);
  };
  std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
  ref::linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), T, in, out, 0, out);
  check_grad("x", x, dx, loss);
  check_grad("w", w, dw, loss);
  check_grad("b", b, db, loss);
}

TEST_CASE("attention backward matches finite differences", "[kernels]") {
  const int64_t B = 2, S = 4, C = 6, NH = 2;
  auto qkv = randn<double>(B * S * 3 * C, 12), r = randn<double>(B * S * C, 13);
  std::vector<double> out(B * S * C), att(B * NH * S * S);
  auto loss = [&] {
    ref::attention_forward(out.data(), att.data(), qkv.data(), B, S, C, NH);
    return dot(out, r);
  };
  loss();
  std::vector<double> dqkv(qkv.size());
  ref::attention_backward(dqkv.data(), r.data(), qkv.data(), att.data(), B, S, C, NH);
  check_grad("qkv", qkv, dqkv, loss);
  // causal: the first token attends only to itself, rows sum to one, nothing above the diagonal
  for (int64_t h = 0; h < B * NH; ++h)
    for (int64_t t = 0; t < S; ++t) {
      double s = 0;
      for (int64_t u = 0; u < S; ++u) {
        s += att[(h * S + t) * S + u];
        if (u > t) CHECK(att[(h * S + t) * S + u] == 0.0);
      }
      CHECK(std::abs(s - 1.0) < 1e-12);
    }
}

TEST_CASE("gelu and residual backward match finite differences", "[kernels]") {
  const int64_t n = 9;
  auto x = randn<double>(n, 14, 2.0), y = randn<double>(n, 15), r = randn<double>(n, 16);
  std::vector<double> out(n);
  auto gelu_loss = [&] {
    ref::gelu_forward(out.data(), x.data(), n);
    return dot(out, r);
  };
  std::vector<double> dx(n);
  ref::gelu_backward(dx.data(), r.data(), x.data(), n);
  check_grad("gelu x", x, dx, gelu_loss);
  double g1 = 0;
  ref::gelu_forward(&g1, std::vector<double>{1.0}.data(), 1);
  CHECK(g1 == Approx(0.8411919906082768).epsilon(1e-12));  // 0.5 (1 + tanh(sqrt(2/pi) 1.044715))

  auto res_loss = [&] {
    ref::residual_forward(out.data(), x.data(), y.data(), n);
    return dot(out, r);
  };
  std::vector<double> da(n), db(n);
  ref::residual_backward(da.data(), db.data(), r.data(), n);
  check_grad("residual a", x, da, res_loss);
  check_grad("residual b", y, db, res_loss);
}

TEST_CASE("softmax cross-entropy backward matches finite differences", "[kernels]") {
  const int64_t T = 3, V = 7;
  auto logits = randn<double>(T * V, 17, 3.0);
  std::vector<int32_t> tgt = {2, 6, 0};
  std::vector<double> stats(3 * T);
  auto loss = [&] { return ref::crossentropy_forward(stats.data(), logits.data(), tgt.data(), T, V); };
  loss();
  // The gradient is written over the logits, a vocabulary tile at a time: [4, 7), then [0, 4).
  std::vector<double> dl = logits;
  ref::crossentropy_backward(dl.data(), stats.data(), tgt.data(), 0, 1.0 / double(T), T, V, V, 4, V);
  ref::crossentropy_backward(dl.data(), stats.data(), tgt.data(), 0, 1.0 / double(T), T, V, V, 0, 4);
  check_grad("logits", logits, dl, loss);
  // uniform logits give ln V
  std::vector<double> zero(T * V, 0.0);
  CHECK(ref::crossentropy_forward(stats.data(), zero.data(), tgt.data(), T, V) == Approx(std::log(double(V))));
}

TEST_CASE("softmax cross-entropy: a padded vocabulary's columns and a target offset", "[kernels]") {
  // Rows of 5 columns of which 3 are real tokens starting at token 10 (a tensor-parallel rank's
  // share): the padding gets a zero gradient, the target is found at its offset.
  const int64_t T = 2, V = 5;
  std::vector<float> logits = {1, 2, 3, 0, 0, 0.5f, -1, 2, 0, 0};
  const std::vector<float> stats = {3, 2, 3, 2, 0, 0};  // rows of T: largest logits, sums, losses (unused)
  std::vector<int32_t> tgt = {12, 4};  // token 4 is another rank's
  ref::crossentropy_backward(logits.data(), stats.data(), tgt.data(), 10, 1.0, T, V, 3, 0, V);
  CHECK(logits[2] == Approx(std::exp(0.0f) / 3.0f - 1.0f));
  CHECK(logits[0] == Approx(std::exp(-2.0f) / 3.0f));
  CHECK(logits[3] == 0.0f);
  CHECK(logits[9] == 0.0f);
  CHECK(logits[5] == Approx(std::exp(-1.5f) / 2.0f));
}

TEST_CASE("fast linear and attention match the float reference", "[kernels]") {
  const int64_t B = 2, S = 16, C = 32, NH = 4, T = B * S, F = 4 * C;
  auto x = randn<float>(T * C, 20), w = randn<float>(F * C, 21, 0.1), b = randn<float>(F, 22), dy = randn<float>(T * F, 23);
  std::vector<float> y1(T * F), y2(T * F);
  ref::linear_forward(y1.data(), x.data(), w.data(), b.data(), T, C, F, 0, F);
  cpu::linear_forward(y2.data(), x.data(), w.data(), b.data(), T, C, F);
  check_close(y2, y1, 1e-4, 1e-5);
  std::vector<float> dx1(T * C, 0.5f), dw1(F * C, 0.25f), db1(F, 1.0f);  // nonzero: backward accumulates
  auto dx2 = dx1, dw2 = dw1, db2 = db1;
  ref::linear_backward(dx1.data(), dw1.data(), db1.data(), dy.data(), x.data(), w.data(), T, C, F, 0, F);
  cpu::linear_backward(dx2.data(), dw2.data(), db2.data(), dy.data(), x.data(), w.data(), T, C, F);
  check_close(dx2, dx1, 1e-4, 1e-4);
  check_close(dw2, dw1, 1e-4, 1e-4);
  check_close(db2, db1, 1e-4, 1e-4);

  auto qkv = randn<float>(T * 3 * C, 24), dout = randn<float>(T * C, 25);
  std::vector<float> o1(T * C), o2(T * C), a1(B * NH * S * S), a2(B * NH * S * S);
  ref::attention_forward(o1.data(), a1.data(), qkv.data(), B, S, C, NH);
  cpu::attention_forward(o2.data(), a2.data(), qkv.data(), B, S, C, NH);
  check_close(o2, o1, 1e-4, 1e-5);
  check_close(a2, a1, 1e-4, 1e-6);
  std::vector<float> dq1(T * 3 * C, 0.1f), dq2(T * 3 * C, 0.1f);
  ref::attention_backward(dq1.data(), dout.data(), qkv.data(), a1.data(), B, S, C, NH);
  cpu::attention_backward(dq2.data(), dout.data(), qkv.data(), a1.data(), B, S, C, NH);
  check_close(dq2, dq1, 1e-4, 1e-5);
}

TEST_CASE("fast gelu matches the float reference", "[kernels]") {
  const int64_t n = 4099;  // not a multiple of the vector width
  auto x = randn<float>(n, 26, 4.0), d = randn<float>(n, 27);
  x[0] = 20.0f, x[1] = -20.0f, x[2] = 0.0f;
  std::vector<float> y1(n), y2(n), dx1(n, 1.0f), dx2(n, 1.0f);
  ref::gelu_forward(y1.data(), x.data(), n);
  cpu::gelu_forward(y2.data(), x.data(), n);
  check_close(y2, y1, 1e-6, 2e-6);
  ref::gelu_backward(dx1.data(), d.data(), x.data(), n);
  cpu::gelu_backward(dx2.data(), d.data(), x.data(), n);
  // the derivative multiplies tanh's ~3e-7 error by x (1 + 0.13 x^2): up to ~1e-5 at |x| ~ 5
  check_close(dx2, dx1, 1e-6, 2e-5);
}

TEST_CASE("a linear run tile by tile equals the untiled layer", "[kernels][tiling]") {
  const int64_t T = 24, in = 40, out = 70;
  auto x = randn<float>(T * in, 30), w = randn<float>(out * in, 31, 0.1), b = randn<float>(out, 32),
       dy = randn<float>(T * out, 33);
  const std::vector<std::pair<int64_t, int64_t>> tiles = {{0, 16}, {16, 17}, {17, 50}, {50, 70}};

  for (bool fast : {false, true}) {
    INFO((fast ? "fast" : "reference"));
    using Fwd = void (*)(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t);
    using Bwd = void (*)(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                         int64_t, int64_t);
    Fwd fwd = fast ? Fwd(cpu::linear_forward) : Fwd(ref::linear_forward<float>);
    Bwd bwd = fast ? Bwd(cpu::linear_backward) : Bwd(ref::linear_backward<float>);
    std::vector<float> y(T * out), yt(T * out), dx(T * in), dxt(T * in), dw(out * in), dwt(out * in), db(out),
        dbt(out);
    fwd(y.data(), x.data(), w.data(), b.data(), T, in, out, 0, out);
    bwd(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), T, in, out, 0, out);
    for (auto [r0, r1] : tiles) {
      // each tile is its own buffer, as a parameter group fetched on its own would be
      std::vector<float> wt(w.begin() + r0 * in, w.begin() + r1 * in), bt(b.begin() + r0, b.begin() + r1);
      std::vector<float> dwtile((r1 - r0) * in), dbtile(r1 - r0);
      fwd(yt.data(), x.data(), wt.data(), bt.data(), T, in, out, r0, r1);
      bwd(dxt.data(), dwtile.data(), dbtile.data(), dy.data(), x.data(), wt.data(), T, in, out, r0, r1);
      std::copy(dwtile.begin(), dwtile.end(), dwt.begin() + r0 * in);
      std::copy(dbtile.begin(), dbtile.end(), dbt.begin() + r0);
    }
    if (!fast) {  // same loops, same order: bit for bit
      CHECK(yt == y);
      CHECK(dwt == dw);
      CHECK(dbt == db);
      check_close(dxt, dx, 1e-6, 1e-6);  // dx sums over tiles in a different order
    } else {
      check_close(yt, y, 1e-5, 1e-6);
      check_close(dxt, dx, 1e-5, 1e-5);
      check_close(dwt, dw, 1e-5, 1e-6);
      check_close(dbt, db, 1e-5, 1e-6);
    }
  }
}

TEST_CASE("bf16 round trip of a whole tensor", "[kernels][precision]") {
  auto x = randn<float>(1000, 40);
  std::vector<zinf::engine::bf16> h(x.size());
  std::vector<float> back(x.size());
  cpu::fp32_to_bf16(h.data(), x.data(), int64_t(x.size()));
  cpu::bf16_to_fp32(back.data(), h.data(), int64_t(x.size()));
  check_close(back, x, 1.0 / 256, 0);  // 8 significant bits: relative error <= 2^-9
  auto r = x;
  cpu::round_to_bf16(r.data(), int64_t(r.size()));
  CHECK(r == back);
}

TEST_CASE("sum of squares of bf16 values: eight partial sums in a fixed order", "[kernels][precision]") {
  for (size_t n : {0, 1, 7, 8, 9, 1000, 4099}) {
    INFO("n " << n);
    auto x = randn<float>(n, 41);
    std::vector<zinf::engine::bf16> h(n);
    cpu::fp32_to_bf16(h.data(), x.data(), int64_t(n));
    // The order the function promises, written out: partial j sums elements j, j+8, ... of the
    // whole blocks; then the tail; then the partials.
    const size_t whole = n / 8 * 8;
    double part[8] = {}, want = 0;
    for (size_t i = 0; i < whole; ++i) {
      const double v = zinf::engine::to_float(h[i]);
      part[i % 8] += v * v;
    }
    for (size_t i = whole; i < n; ++i) {
      const double v = zinf::engine::to_float(h[i]);
      want += v * v;
    }
    for (double p : part) want += p;
    CHECK(cpu::sum_of_squares(h.data(), int64_t(n)) == want);  // bit for bit: the same on every CPU
    double plain = 0;
    for (float v : x) plain += double(zinf::engine::to_float(zinf::engine::to_bf16(v))) * zinf::engine::to_float(zinf::engine::to_bf16(v));
    CHECK(cpu::sum_of_squares(h.data(), int64_t(n)) == Approx(plain).epsilon(1e-12));
  }
}
