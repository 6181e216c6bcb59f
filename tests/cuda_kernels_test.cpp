// Every CUDA kernel of the GPT-2 (engine/backend/cuda/kernels.hpp, gemm.hpp) against the CPU reference
// (engine/backend/cpu/kernels.hpp's cpu::ref, engine/optim's adam_reference) on the same seeded inputs.
// Parameters are bf16 on the GPU, so the reference runs on the same bf16-rounded values; GEMM
// inputs are rounded to bf16 as the GPU path rounds them. Tolerances are stated per test: fp32
// arithmetic in another order (1e-5 relative) for elementwise and row kernels, a little more for
// reductions over long rows and for GEMMs with fp32 accumulation, exact for Adam.
// Without a CUDA device the whole program is skipped (tests/gpu_catch_main.cpp).
#include <catch2/catch.hpp>

#ifdef ZINF_HAVE_CUDA
#include <cublas_v2.h>

#include "cuda_test_util.hpp"
#include "engine/backend/cpu/kernels.hpp"
#include "engine/backend/cuda/gemm.hpp"
#include "engine/backend/cuda/kernels.hpp"
#include "engine/optim/cpu_adam.hpp"

using namespace zinf;
using engine::bf16;
using test::bf16_rounded;
using test::DeviceBuf;
using test::random_floats;
using test::require_close;
namespace cu = engine::cuda;
namespace ref = engine::cpu::ref;

namespace {

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

struct Blas {
  cublasHandle_t h = nullptr;
  Blas() { ZINF_CUBLAS_CHECK(cublasCreate(&h)); }
  ~Blas() { cublasDestroy(h); }
};

}  // namespace

TEST_CASE("cuda kernels: embedding forward and backward match the reference, whole and in vocabulary tiles", "[cuda]") {
  const int64_t B = 3, S = 17, C = 40, V = 50, T = B * S;
  auto wte = bf16_rounded(random_floats(static_cast<size_t>(V * C), 1)), wpe = bf16_rounded(random_floats(static_cast<size_t>(S * C), 2));
  auto tokens = random_tokens(static_cast<size_t>(T), int32_t(V), 3);
  auto dout = random_floats(static_cast<size_t>(T * C), 4);
  std::vector<float> out(static_cast<size_t>(T * C)), dwte(static_cast<size_t>(V * C)), dwpe(static_cast<size_t>(S * C));
  ref::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, S, C);
  ref::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, S, C);

  DeviceBuf<bf16> d_wte(test::to_bf16(wte)), d_wpe(test::to_bf16(wpe));
  DeviceBuf<int32_t> d_tok(tokens);
  DeviceBuf<float> d_out(out.size()), d_dout(dout), d_dwte(dwte.size()), d_dwpe(dwpe.size());
  cu::embedding_forward(d_out, d_tok, d_wte.p, d_wpe.p, B, S, C, 0, V, nullptr);
  cu::embedding_backward(d_dwte, d_dwpe, d_dout, d_tok, B, S, C, 0, V, nullptr);
  require_close(d_out.download(), out, 0, 0, "embedding forward");  // one add: exact
  require_close(d_dwte.download(), dwte, 1e-5, 1e-5, "dwte");
  require_close(d_dwpe.download(), dwpe, 1e-5, 1e-5, "dwpe");
  // Two vocabulary tiles, [0, 20) and [20, V): each writes its tokens, the first adds wpe's gradient.
  DeviceBuf<float> t_out(out.size()), t_dwte(dwte.size()), t_dwpe(dwpe.size());
  const int64_t cut = 20;
  cu::embedding_forward(t_out, d_tok, d_wte.p + cut * C, d_wpe.p, B, S, C, cut, V, nullptr);
  cu::embedding_forward(t_out, d_tok, d_wte.p, d_wpe.p, B, S, C, 0, cut, nullptr);
  cu::embedding_backward(t_dwte.p + cut * C, nullptr, d_dout, d_tok, B, S, C, cut, V, nullptr);
  cu::embedding_backward(t_dwte, t_dwpe, d_dout, d_tok, B, S, C, 0, cut, nullptr);
  require_close(t_out.download(), out, 0, 0, "embedding forward in tiles");
  require_close(t_dwte.download(), dwte, 1e-5, 1e-5, "dwte in tiles");
  require_close(t_dwpe.download(), dwpe, 1e-5, 1e-5, "dwpe in tiles");
}

TEST_CASE("cuda kernels: layernorm forward and backward match the reference", "[cuda]") {
  const int64_t T = 70, C = 300;
  auto x = random_floats(static_cast<size_t>(T * C), 5, 2.0f);
  for (int64_t t = 0; t < T; ++t) x[static_cast<size_t>(t * C)] += 3.0f;  // rows with a nonzero mean
  auto gamma = bf16_rounded(random_floats(static_cast<size_t>(C), 6)), beta = bf16_rounded(random_floats(static_cast<size_t>(C), 7));
  auto dout = random_floats(static_cast<size_t>(T * C), 8);
  std::vector<float> out(static_cast<size_t>(T * C)), mean(static_cast<size_t>(T)), rstd(static_cast<size_t>(T));
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), T, C);
  std::vector<float> dx(static_cast<size_t>(T * C), 0.5f), dg(static_cast<size_t>(C), 0.25f), db(static_cast<size_t>(C), -0.25f);  // accumulates
  auto dx0 = dx, dg0 = dg, db0 = db;
  ref::layernorm_backward(dx.data(), dg.data(), db.data(), dout.data(), x.data(), gamma.data(), mean.data(),
                          rstd.data(), T, C);

  DeviceBuf<float> d_x(x), d_out(out.size()), d_mean(mean.size()), d_rstd(rstd.size()), d_dout(dout), d_dx(dx0),
      d_dg(dg0), d_db(db0);
  DeviceBuf<bf16> d_g(test::to_bf16(gamma)), d_b(test::to_bf16(beta));
  cu::layernorm_forward(d_out, d_mean, d_rstd, d_x, d_g, d_b, T, C, nullptr);
  require_close(d_out.download(), out, 1e-5, 1e-5, "layernorm out");
  require_close(d_mean.download(), mean, 1e-6, 1e-5, "layernorm mean");
  require_close(d_rstd.download(), rstd, 1e-6, 1e-5, "layernorm rstd");
  cu::layernorm_backward(d_dx, d_dg, d_db, d_dout, d_x, d_g, d_mean, d_rstd, T, C, nullptr);
  require_close(d_dx.download(), dx, 1e-4, 1e-4, "layernorm dx");
  require_close(d_dg.download(), dg, 1e-4, 1e-4, "layernorm dgamma");
  require_close(d_db.download(), db, 1e-4, 1e-4, "layernorm dbeta");
}

TEST_CASE("cuda kernels: linear (whole and one row tile) in bf16 matches the reference", "[cuda]") {
  const int64_t T = 48, in = 96, out = 80;
  auto x = bf16_rounded(random_floats(static_cast<size_t>(T * in), 9));
  auto w = bf16_rounded(random_floats(static_cast<size_t>(out * in + out), 10, 0.1f));  // weight rows, then biases
  auto dy = bf16_rounded(random_floats(static_cast<size_t>(T * out), 11));
  Blas blas;
  for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, out}, {24, 56}}) {
    const int64_t rows = r1 - r0;
    // The tile's own buffer: rows x in weights then its biases, as core's ParamUnit lays it out.
    std::vector<float> tile(static_cast<size_t>(rows * in + rows));
    std::copy_n(w.data() + r0 * in, rows * in, tile.data());
    std::copy_n(w.data() + out * in + r0, rows, tile.data() + rows * in);
    std::vector<float> y(static_cast<size_t>(T * out), 0.0f), dx(static_cast<size_t>(T * in), 0.0f), dw(tile.size(), 0.0f);
    ref::linear_forward(y.data(), x.data(), tile.data(), tile.data() + rows * in, T, in, out, r0, r1);
    ref::linear_backward(dx.data(), dw.data(), dw.data() + rows * in, dy.data(), x.data(), tile.data(), T, in, out, r0,
                         r1);
    DeviceBuf<float> d_x(x), d_y(y.size()), d_dy(dy), d_dx(dx.size()), d_dw(dw.size());
    DeviceBuf<bf16> d_w(test::to_bf16(tile)), xs(static_cast<size_t>(T * in)), dys(static_cast<size_t>(T * out));
    cu::linear_forward(blas.h, d_y, d_x, d_w, d_w + rows * in, T, in, out, r0, r1, xs);
    cu::linear_backward(blas.h, d_dx, d_dw, d_dw + rows * in, d_dy, d_x, d_w, T, in, out, r0, r1, xs, dys);
    INFO("tile [" << r0 << ", " << r1 << ")");
    require_close(d_y.download(), y, 1e-4, 1e-4, "linear y");
    require_close(d_dx.download(), dx, 1e-4, 1e-4, "linear dx");
    require_close(d_dw.download(), dw, 1e-4, 1e-4, "linear dw, db");
  }
}

TEST_CASE("cuda kernels: causal attention forward and backward match the reference", "[cuda]") {
  const int64_t B = 2, S = 37, C = 48, NH = 4;  // S not a multiple of the warp width
  auto qkv = random_floats(static_cast<size_t>(B * S * 3 * C), 12);
  auto dout = random_floats(static_cast<size_t>(B * S * C), 13);
  std::vector<float> out(static_cast<size_t>(B * S * C)), att(static_cast<size_t>(B * NH * S * S)), dqkv(qkv.size(), 0.0f);
  ref::attention_forward(out.data(), att.data(), qkv.data(), B, S, C, NH);
  ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, S, C, NH);
  Blas blas;
  DeviceBuf<float> d_qkv(qkv), d_out(out.size()), d_att(att.size()), d_dout(dout), d_dqkv(dqkv.size()),
      scratch(static_cast<size_t>(cu::attention_scratch(B, S, C, NH)));
  cu::attention_forward(blas.h, d_out, d_att, d_qkv, B, S, C, NH, scratch);
  require_close(d_att.download(), att, 1e-5, 1e-4, "attention probabilities");
  require_close(d_out.download(), out, 1e-5, 1e-4, "attention out");
  cu::attention_backward(blas.h, d_dqkv, d_dout, d_qkv, d_att, B, S, C, NH, scratch);
  require_close(d_dqkv.download(), dqkv, 1e-4, 1e-4, "attention dqkv");
}

TEST_CASE("cuda kernels: GELU and residual match the reference", "[cuda]") {
  const int64_t n = 10007;
  auto x = random_floats(static_cast<size_t>(n), 14, 3.0f), y = random_floats(static_cast<size_t>(n), 15), dout = random_floats(static_cast<size_t>(n), 16);
  std::vector<float> g(static_cast<size_t>(n)), dx(static_cast<size_t>(n), 1.0f), r(static_cast<size_t>(n)), da(static_cast<size_t>(n), 0.0f), db(static_cast<size_t>(n), 2.0f);
  auto dx0 = dx, da0 = da, db0 = db;
  ref::gelu_forward(g.data(), x.data(), n);
  ref::gelu_backward(dx.data(), dout.data(), x.data(), n);
  ref::residual_forward(r.data(), x.data(), y.data(), n);
  ref::residual_backward(da.data(), db.data(), dout.data(), n);
  DeviceBuf<float> d_x(x), d_y(y), d_dout(dout), d_g(static_cast<size_t>(n)), d_dx(dx0), d_r(static_cast<size_t>(n)), d_da(da0), d_db(db0);
  cu::gelu_forward(d_g, d_x, n, nullptr);
  cu::gelu_backward(d_dx, d_dout, d_x, n, nullptr);
  cu::residual_forward(d_r, d_x, d_y, n, nullptr);
  cu::residual_backward(d_da, d_db, d_dout, n, nullptr);
  require_close(d_g.download(), g, 1e-6, 1e-5, "gelu");
  require_close(d_dx.download(), dx, 1e-5, 1e-5, "gelu backward");
  require_close(d_r.download(), r, 0, 0, "residual");
  require_close(d_da.download(), da, 0, 0, "residual backward a");
  require_close(d_db.download(), db, 0, 0, "residual backward b");
}

TEST_CASE("cuda kernels: softmax + cross-entropy match the reference", "[cuda]") {
  const int64_t T = 33, V = 1000;
  auto logits = random_floats(static_cast<size_t>(T * V), 17, 4.0f);
  auto targets = random_tokens(static_cast<size_t>(T), int32_t(V), 18);
  std::vector<float> stats(static_cast<size_t>(3 * T)), dlogits = logits;
  const double loss = ref::crossentropy_forward(stats.data(), logits.data(), targets.data(), T, V);
  ref::crossentropy_backward(dlogits.data(), stats.data(), targets.data(), 0, 1.0 / double(T), T, V, V, 0, V);
  DeviceBuf<float> d_logits(logits), d_stats(stats.size());
  DeviceBuf<int32_t> d_t(targets);
  cu::crossentropy_forward(d_stats, d_logits, d_t, T, V, nullptr);
  // The gradient in two vocabulary tiles, over the logits.
  cu::crossentropy_backward(d_logits, d_stats, d_t, float(1.0 / double(T)), T, V, 400, V, nullptr);
  cu::crossentropy_backward(d_logits, d_stats, d_t, float(1.0 / double(T)), T, V, 0, 400, nullptr);
  auto got_stats = d_stats.download();
  std::vector<float> got_losses(got_stats.begin() + 2 * T, got_stats.end()), losses(stats.begin() + 2 * T, stats.end());
  double got = 0;
  for (float l : got_losses) got += double(l);
  CHECK(got / double(T) == Approx(loss).epsilon(1e-5));
  require_close(got_stats, stats, 1e-5, 1e-5, "statistics and losses");
  require_close(got_losses, losses, 1e-5, 1e-5, "losses");
  require_close(d_logits.download(), dlogits, 1e-8, 1e-4, "dlogits");
}

TEST_CASE("cuda kernels: device Adam is bitwise the reference Adam", "[cuda]") {
  const int64_t n = 4099;
  for (const char* type : {"adamw", "adam"}) {
    engine::AdamOptions o;
    o.lr = 1e-3;
    o.weight_decay = 0.1;
    o.decoupled_weight_decay = std::string(type) == "adamw";
    auto master = random_floats(static_cast<size_t>(n), 19), m = random_floats(static_cast<size_t>(n), 20, 0.01f);
    auto v = random_floats(static_cast<size_t>(n), 21, 0.01f);
    for (auto& x : v) x = x * x;
    auto grad = test::to_bf16(random_floats(static_cast<size_t>(n), 22));
    DeviceBuf<float> d_master(master), d_m(m), d_v(v);
    DeviceBuf<bf16> d_grad(grad), d_out(static_cast<size_t>(n));
    std::vector<bf16> out(static_cast<size_t>(n));
    for (int64_t step = 1; step <= 3; ++step) {
      engine::adam_reference(o, step, static_cast<size_t>(n), master.data(), m.data(), v.data(), grad.data(), out.data());
      const double bc1 = 1.0 - std::pow(o.beta1, double(step)), bc2 = 1.0 - std::pow(o.beta2, double(step));
      cu::AdamCoeffs c{float(o.beta1), float(1.0 - o.beta1), float(o.beta2), float(1.0 - o.beta2), float(o.lr / bc1),
                       float(1.0 / std::sqrt(bc2)), float(o.eps),
                       o.decoupled_weight_decay ? float(o.lr * o.weight_decay) : 0.0f,
                       o.decoupled_weight_decay ? 0.0f : float(o.weight_decay)};
      cu::adam_step(c, d_master, d_m, d_v, d_grad, d_out, n, nullptr);
    }
    INFO(type);
    require_close(d_master.download(), master, 0, 0, "master");
    require_close(d_m.download(), m, 0, 0, "m");
    require_close(d_v.download(), v, 0, 0, "v");
    auto got = d_out.download();
    size_t diff = 0;
    for (int64_t i = 0; i < n; ++i) diff += got[static_cast<size_t>(i)].bits != out[static_cast<size_t>(i)].bits;
    CHECK(diff == 0);
  }
}

TEST_CASE("cuda kernels: gradient accumulation rounds as the CPU backend and sums squares", "[cuda]") {
  const int64_t n = 5001;
  auto partial = test::to_bf16(random_floats(static_cast<size_t>(n), 23));
  auto add = random_floats(static_cast<size_t>(n), 24);
  std::vector<bf16> want(static_cast<size_t>(n));
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) {
    want[static_cast<size_t>(i)] = engine::to_bf16(engine::to_float(partial[static_cast<size_t>(i)]) + add[static_cast<size_t>(i)]);
    ss += double(engine::to_float(want[static_cast<size_t>(i)])) * engine::to_float(want[static_cast<size_t>(i)]);
  }
  DeviceBuf<bf16> d_home(static_cast<size_t>(n)), d_partial(partial);
  DeviceBuf<float> d_add(add);
  DeviceBuf<double> d_ss(1);
  cu::accumulate_grad(d_home, d_partial, d_add, n, false, d_ss, nullptr);
  auto got = d_home.download();
  size_t diff = 0;
  for (int64_t i = 0; i < n; ++i) diff += got[static_cast<size_t>(i)].bits != want[static_cast<size_t>(i)].bits;
  CHECK(diff == 0);
  CHECK(d_ss.download()[0] == Approx(ss).epsilon(1e-12));
}

#endif
