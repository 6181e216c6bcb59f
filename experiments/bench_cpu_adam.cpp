// CPU Adam throughput against two references measured in the same iteration: a STREAM-class
// triad (a = b + s*c) over the same master/m/v memory with the same thread count, the bandwidth
// bound; and the plain reference implementation with the same threads.
//
//   bench_cpu_adam [google benchmark flags]    (ZINF_ADAM_PARAMS: parameters, default 32M)
//
// Bytes per parameter: master, m, v read and written (24), bf16 gradient read (2), bf16 copy
// written (2) = 28; fp32 gradients make it 30. The triad counts 12 bytes per element, STREAM's rule.
// The triad is what a tuned STREAM build does: vectorized at the widest level this CPU has, aligned
// huge-page arrays touched up front, each thread bound to its own core, and timed both with
// ordinary and with streaming (non-temporal) stores; the faster of the two is the bound, so Adam's
// ratio to it is never flattered by a weak reference.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "engine/optim/cpu_adam.hpp"

using namespace zinf::engine;

namespace {

size_t g_n = size_t(32) << 20;

// Big arrays allocated once with huge pages and touched up front: first touch here is slow.
template <class T>
T* huge_array(size_t n) {
  size_t bytes = (n * sizeof(T) + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);
  return static_cast<T*>(p);
}

struct Arrays {
  float *master, *m, *v, *g32;
  bf16 *g16, *out;
  Arrays() {
    master = huge_array<float>(g_n);
    m = huge_array<float>(g_n);
    v = huge_array<float>(g_n);
    g32 = huge_array<float>(g_n);
    g16 = huge_array<bf16>(g_n);
    out = huge_array<bf16>(g_n);
    for (size_t i = 0; i < g_n; ++i) {
      master[i] = 0.01f * float(i % 1000) - 5.0f;
      g32[i] = 1e-3f * float(int(i % 97) - 48);
      g16[i] = to_bf16(g32[i]);
    }
  }
};

Arrays& arrays() {
  static Arrays a;
  return a;
}

// Persistent threads for the triad, so it pays no thread start-up that Adam's workers do not.
class Team {
public:
  explicit Team(unsigned n) : n_(n), start_(n), end_(n) {
    for (unsigned i = 1; i < n; ++i)
      threads_.emplace_back([this, i] {
        for (;;) {
          start_.arrive_and_wait();
          if (stop_) return;
          job_(i);
          end_.arrive_and_wait();
        }
      });
  }
  ~Team() {
    stop_ = true;
    if (n_ > 1) start_.arrive_and_wait();
    for (auto& t : threads_) t.join();
  }
  void run(std::function<void(unsigned)> job) {
    job_ = std::move(job);
    if (n_ > 1) start_.arrive_and_wait();
    job_(0);
    if (n_ > 1) end_.arrive_and_wait();
  }

private:
  unsigned n_;
  std::barrier<> start_, end_;
  std::function<void(unsigned)> job_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

double seconds_of(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One thread's share of the triad: 64-byte aligned (huge-page arrays, parts in multiples of 64
// elements), with ordinary or streaming stores, at the given SIMD width.
__attribute__((target("avx512f"))) void triad_avx512(float* a, const float* b, const float* c, size_t lo, size_t hi, bool stream) {
  const __m512 s = _mm512_set1_ps(0.5f);
  if (stream)
    for (size_t i = lo; i < hi; i += 16) _mm512_stream_ps(a + i, _mm512_add_ps(_mm512_load_ps(b + i), _mm512_mul_ps(s, _mm512_load_ps(c + i))));
  else
    for (size_t i = lo; i < hi; i += 16) _mm512_store_ps(a + i, _mm512_add_ps(_mm512_load_ps(b + i), _mm512_mul_ps(s, _mm512_load_ps(c + i))));
  _mm_sfence();
}

__attribute__((target("avx2"))) void triad_avx2(float* a, const float* b, const float* c, size_t lo, size_t hi, bool stream) {
  const __m256 s = _mm256_set1_ps(0.5f);
  if (stream)
    for (size_t i = lo; i < hi; i += 8) _mm256_stream_ps(a + i, _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(s, _mm256_load_ps(c + i))));
  else
    for (size_t i = lo; i < hi; i += 8) _mm256_store_ps(a + i, _mm256_add_ps(_mm256_load_ps(b + i), _mm256_mul_ps(s, _mm256_load_ps(c + i))));
  _mm_sfence();
}

void triad_scalar(float* a, const float* b, const float* c, size_t lo, size_t hi, bool) {
  for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 0.5f * c[i];
}

void bind_to_core(unsigned core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core % std::max(1u, std::thread::hardware_concurrency()), &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Seconds of the faster of the two triads (ordinary stores, streaming stores). The calling thread
// runs part 0 bound to core 0 and gets its own affinity back afterwards: threads it starts later
// (CpuAdam's workers) inherit its mask and must not all land on one core.
double triad_seconds(Team& team, unsigned threads, float* a, const float* b, const float* c, size_t n) {
  cpu_set_t caller;
  pthread_getaffinity_np(pthread_self(), sizeof caller, &caller);
  auto* kernel = simd_supported(SimdLevel::Avx512) ? triad_avx512 : simd_supported(SimdLevel::Avx2) ? triad_avx2 : triad_scalar;
  const size_t per = (n / threads) / 64 * 64;
  double best = 1e30;
  for (bool stream : {false, true}) {
    best = std::min(best, seconds_of([&] {
      team.run([=](unsigned part) {
        bind_to_core(part);
        const size_t lo = part * per, hi = part + 1 == threads ? n / 64 * 64 : lo + per;
        kernel(a, b, c, lo, hi, stream);
      });
    }));
  }
  pthread_setaffinity_np(pthread_self(), sizeof caller, &caller);
  return best;
}

void BM_Adam(benchmark::State& state, SimdLevel level, bool bf16_grad) {
  if (!simd_supported(level)) {
    state.SkipWithError("this CPU lacks that SIMD level");
    return;
  }
  const unsigned threads = unsigned(state.range(0));
  Arrays& a = arrays();
  AdamOptions o;
  o.weight_decay = 0.01;
  CpuAdam fast(o, threads, level), ref(o, threads, SimdLevel::Reference);
  Team team(threads);
  const size_t n = g_n;
  auto step = [&](CpuAdam& adam, int64_t t) {
    if (bf16_grad)
      adam.step(t, n, a.master, a.m, a.v, a.g16, a.out);
    else
      adam.step(t, n, a.master, a.m, a.v, a.g32, a.out);
  };
  step(fast, 1);  // warm: pages resident, workers started
  double t_fast = 0, t_triad = 0, t_ref = 0;
  int64_t t = 2;
  for (auto _ : state) {
    double s = seconds_of([&] { step(fast, t++); });
    state.SetIterationTime(s);
    t_fast += s;
    t_triad += triad_seconds(team, threads, a.master, a.m, a.v, n);
    t_ref += seconds_of([&] { step(ref, t++); });
  }
  const double bytes_per_param = bf16_grad ? 28 : 30;
  const double iters = double(state.iterations());
  const double adam_gbps = bytes_per_param * double(n) * iters / t_fast / 1e9;
  const double triad_gbps = 12.0 * double(n) * iters / t_triad / 1e9;
  state.counters["Gparams_per_s"] = double(n) * iters / t_fast / 1e9;
  state.counters["adam_GBps"] = adam_gbps;
  state.counters["triad_GBps"] = triad_gbps;
  state.counters["ratio_to_triad"] = adam_gbps / triad_gbps;
  state.counters["ratio_to_reference"] = t_ref / t_fast;
  state.counters["goal_0.8_met"] = adam_gbps / triad_gbps >= 0.8 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* p = std::getenv("ZINF_ADAM_PARAMS")) g_n = std::stoull(p);
  benchmark::Initialize(&argc, argv);
  for (SimdLevel level : {SimdLevel::Avx512, SimdLevel::Avx2}) {
    if (!simd_supported(level)) continue;  // dispatch picks the best; show what this CPU has
    for (bool bf16_grad : {true, false}) {
      std::string name = std::string("BM_Adam/") + to_string(level) + (bf16_grad ? "/bf16_grad" : "/fp32_grad");
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { BM_Adam(s, level, bf16_grad); })
          ->ArgName("threads")
          ->Arg(1)
          ->Arg(2)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(5)
          ->Repetitions(5)
          ->ReportAggregatesOnly(true);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
