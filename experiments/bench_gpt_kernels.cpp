// GPT kernels on this CPU: GFLOP/s of every linear of gpt-mini (forward GEMM, and backward dX + dW),
// causal attention, and a whole forward+backward step of gpt-mini with the fast kernels against
// the plain-loop reference (the reference runs first; the fast step reports the ratio). Times and
// rates are wall-clock: OpenBLAS's worker threads do not show in the main thread's CPU time.
//
//   ninja -C build experiments/bench_gpt_kernels && build/experiments/bench_gpt_kernels
//
// OpenBLAS picks its kernels from OPENBLAS_CORETYPE (some environments force Haswell, which halves
// SGEMM on an AVX-512 CPU; `zinf --version` names the set in use); the context
// line "openblas_core" says which ran. Measured figures swing 30-50% on a shared host: compare the
// ratios within one run.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/kernels.hpp"
#include "engine/model/gpt2.hpp"
#include "models/gpt.hpp"

namespace {

using namespace zinf;

const core::ModelGraph& mini() {
  static const core::ModelGraph g = models::build_gpt(models::find_model("gpt-mini", ZINF_SOURCE_DIR));
  return g;
}

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One linear of gpt-mini by operator name (block 0; the other blocks have the same shapes).
void linear(benchmark::State& state, const std::string& op_name, bool backward) {
  const core::Operator* op = nullptr;
  for (const auto& o : mini().ops)
    if (o.name == op_name) op = &o;
  const int64_t T = op->m, out = op->n, in = op->k;
  auto x = randn(size_t(T * in), 1), w = randn(size_t(out * in), 2), b = randn(size_t(out), 3),
       dy = randn(size_t(T * out), 4);
  std::vector<float> y(size_t(T * out)), dx(size_t(T * in)), dw(size_t(out * in)), db(static_cast<size_t>(out));
  for (auto _ : state) {
    if (backward)
      engine::cpu::linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), T, in, out);
    else
      engine::cpu::linear_forward(y.data(), x.data(), w.data(), b.data(), T, in, out);
    benchmark::ClobberMemory();
  }
  const double flops = (backward ? 4.0 : 2.0) * double(T) * double(in) * double(out);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("m=" + std::to_string(T) + " n=" + std::to_string(out) + " k=" + std::to_string(in));
}

void attention(benchmark::State& state, bool fast) {
  const auto& s = mini().spec;
  const int64_t B = s.micro_batch, S = s.seq, C = s.hidden, NH = s.heads;
  auto qkv = randn(size_t(B * S * 3 * C), 5), dout = randn(size_t(B * S * C), 6);
  std::vector<float> out(size_t(B * S * C)), att(size_t(B * NH * S * S)), dqkv(qkv.size());
  for (auto _ : state) {
    if (fast) {
      engine::cpu::attention_forward(out.data(), att.data(), qkv.data(), B, S, C, NH);
      engine::cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, S, C, NH);
    } else {
      engine::cpu::ref::attention_forward(out.data(), att.data(), qkv.data(), B, S, C, NH);
      engine::cpu::ref::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, S, C, NH);
    }
    benchmark::ClobberMemory();
  }
  // causal: half of the 4 T S C of forward and 8 T S C of backward are useful
  const double flops = 6.0 * double(B * S) * double(S) * double(C);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

double g_reference_step_seconds = 0;

void gpt_mini_step(benchmark::State& state, engine::KernelImpl impl) {
  engine::Gpt2 model(mini(), impl);
  engine::Gpt2Params p = model.init_params(1), g = model.zeros();
  auto a = model.make_activations();
  std::mt19937 rng(7);
  std::vector<int32_t> in(size_t(mini().tokens)), tgt(in.size());
  for (auto& t : in) t = int32_t(rng() % 256);
  for (auto& t : tgt) t = int32_t(rng() % 256);
  model.set_batch(a, in, tgt);
  model.forward_backward(p, g, a);  // allocate and touch every buffer once
  double total = 0;
  int64_t n = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(model.forward_backward(p, g, a));
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++n;
  }
  const double per_step = total / double(n);
  const double flops = mini().total_fwd_flops() + mini().total_bwd_flops();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(double(mini().tokens), benchmark::Counter::kIsIterationInvariantRate);
  if (impl == engine::KernelImpl::Reference) g_reference_step_seconds = per_step;
  else if (g_reference_step_seconds > 0) state.counters["x_vs_reference"] = g_reference_step_seconds / per_step;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  for (const char* op : {"h.0.attn.c_attn", "h.0.attn.c_proj", "h.0.mlp.c_fc", "h.0.mlp.c_proj", "lm_head"}) {
    benchmark::RegisterBenchmark((std::string("linear_forward/") + op).c_str(),
                                 [op](benchmark::State& s) { linear(s, op, false); })
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("linear_backward/") + op).c_str(),
                                 [op](benchmark::State& s) { linear(s, op, true); })
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("attention_fwd_bwd/reference", [](benchmark::State& s) { attention(s, false); })
      ->UseRealTime();
  benchmark::RegisterBenchmark("attention_fwd_bwd/fast", [](benchmark::State& s) { attention(s, true); })
      ->UseRealTime();
  benchmark::RegisterBenchmark("gpt_mini_step/reference",
                               [](benchmark::State& s) { gpt_mini_step(s, engine::KernelImpl::Reference); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Iterations(3);
  benchmark::RegisterBenchmark("gpt_mini_step/fast",
                               [](benchmark::State& s) { gpt_mini_step(s, engine::KernelImpl::Fast); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
