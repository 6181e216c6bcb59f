// CpuAdam against adam_reference: every SIMD level this CPU has, several thread counts, sizes
// that are not multiples of the vector width, bf16 and fp32 gradients, Adam and AdamW.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/optim/cpu_adam.hpp"

using namespace zinf::engine;

namespace {

struct State {
  std::vector<float> master, m, v, grad32;
  std::vector<bf16> grad16, out;
  explicit State(size_t n, unsigned seed) : master(n), m(n), v(n), grad32(n), grad16(n), out(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (size_t i = 0; i < n; ++i) {
      master[i] = d(rng) * 0.05f;
      m[i] = d(rng) * 1e-3f;
      v[i] = std::abs(d(rng)) * 1e-5f;
      grad32[i] = d(rng) * 1e-2f;
      grad16[i] = to_bf16(grad32[i]);
    }
    if (n > 3) master[3] = 1e-40f;  // a denormal: bf16 rounding must not flush it
  }
};

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::abs(double(a[i]) - double(b[i])), s = std::max(std::abs(double(b[i])), 1e-30);
    worst = std::max(worst, d / s);
  }
  return worst;
}

std::vector<SimdLevel> levels_here() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::Reference, SimdLevel::Avx2, SimdLevel::Avx512})
    if (simd_supported(l)) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("fast paths match the reference at odd sizes, bf16 and fp32 gradients") {
  for (bool adamw : {true, false}) {
    AdamOptions o;
    o.lr = 1e-3;
    o.weight_decay = 0.1;
    o.decoupled_weight_decay = adamw;
    for (size_t n : {size_t(1), size_t(7), size_t(15), size_t(17), size_t(63), size_t(129), size_t(100003)}) {
      for (bool bf16_grad : {true, false}) {
        State ref(n, unsigned(n));
        for (int64_t t = 1; t <= 3; ++t) {
          if (bf16_grad)
            adam_reference(o, t, n, ref.master.data(), ref.m.data(), ref.v.data(), ref.grad16.data(), ref.out.data());
          else
            adam_reference(o, t, n, ref.master.data(), ref.m.data(), ref.v.data(), ref.grad32.data(), ref.out.data());
        }
        for (SimdLevel level : levels_here()) {
          for (unsigned threads : {1u, 2u, 3u}) {
            INFO("adamw " << adamw << " n " << n << " bf16 grad " << bf16_grad << " " << to_string(level) << " threads " << threads);
            CpuAdam adam(o, threads, level);
            State s(n, unsigned(n));
            for (int64_t t = 1; t <= 3; ++t) {
              if (bf16_grad)
                adam.step(t, n, s.master.data(), s.m.data(), s.v.data(), s.grad16.data(), s.out.data());
              else
                adam.step(t, n, s.master.data(), s.m.data(), s.v.data(), s.grad32.data(), s.out.data());
            }
            CHECK(max_rel(s.master, ref.master) <= 1e-6);
            CHECK(max_rel(s.m, ref.m) <= 1e-6);
            CHECK(max_rel(s.v, ref.v) <= 1e-6);
            // Same operations in the same order: the results are not just close but identical.
            CHECK(same_bits(s.master.data(), ref.master.data(), n * 4));
            CHECK(same_bits(s.m.data(), ref.m.data(), n * 4));
            CHECK(same_bits(s.v.data(), ref.v.data(), n * 4));
            CHECK(same_bits(s.out.data(), ref.out.data(), n * 2));
          }
        }
      }
    }
  }
}

TEST_CASE("the bf16 copy is the rounded master, and a null copy is skipped") {
  AdamOptions o;
  State s(1000, 5);
  CpuAdam adam(o, 2);
  adam.step(1, 1000, s.master.data(), s.m.data(), s.v.data(), s.grad16.data(), s.out.data());
  for (size_t i = 0; i < 1000; ++i) CHECK(s.out[i].bits == to_bf16(s.master[i]).bits);
  std::vector<float> before = s.master;
  adam.step(2, 1000, s.master.data(), s.m.data(), s.v.data(), s.grad16.data(), nullptr);
  CHECK(s.master != before);
}

TEST_CASE("special values: NaN gradients propagate, zero gradients leave v alone") {
  AdamOptions o;
  for (SimdLevel level : levels_here()) {
    INFO(to_string(level));
    State s(40, 9), r(40, 9);
    s.grad32[5] = r.grad32[5] = std::nanf("");
    s.grad32[6] = r.grad32[6] = 0.0f;
    CpuAdam adam(o, 1, level);
    adam.step(1, 40, s.master.data(), s.m.data(), s.v.data(), s.grad32.data(), s.out.data());
    adam_reference(o, 1, 40, r.master.data(), r.m.data(), r.v.data(), r.grad32.data(), r.out.data());
    CHECK(std::isnan(s.master[5]));
    CHECK((s.out[5].bits & 0x7fc0) == 0x7fc0);
    CHECK(same_bits(s.out.data(), r.out.data(), 80));
  }
}

TEST_CASE("options from the run config; bad inputs are refused") {
  zinf::core::RunConfig c;
  c.optimizer_type = "adam";
  c.lr = 0.01;
  auto o = AdamOptions::from_run_config(c);
  CHECK_FALSE(o.decoupled_weight_decay);
  CHECK(o.lr == 0.01);
  c.optimizer_type = "sgd";
  CHECK_THROWS_WITH(AdamOptions::from_run_config(c), Catch::Contains("sgd"));
  CpuAdam adam(o, 1, SimdLevel::Reference);
  float x = 0;
  CHECK_THROWS_WITH(adam.step(0, 1, &x, &x, &x, &x, nullptr), Catch::Contains("step counts from 1"));
  CHECK(simd_supported(best_simd_level()));
}

// [native-only]: under qemu-user (tests/emulated_cpu.sh) the address-space limit does not reach
// the emulated threads' stacks.
TEST_CASE("more worker threads than the process can start is an error, not a hang or a crash", "[native-only]") {
  // In a child whose address space cannot hold the threads' stacks, so thread creation fails.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct rlimit limit {512ull << 20, 512ull << 20};
    ::setrlimit(RLIMIT_AS, &limit);
    try {
      CpuAdam adam(AdamOptions{}, 4096, SimdLevel::Reference);
      ::_exit(2);  // every thread started: the limit did not bite
    } catch (const std::runtime_error& e) {
      ::_exit(std::string(e.what()).find("cannot start 4096 worker threads") != std::string::npos ? 0 : 3);
    } catch (...) {
      ::_exit(4);
    }
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
