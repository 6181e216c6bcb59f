// Pinned pool checkout + return, in ns (the Time column; pool_ns with one thread alone), against
// what a pool avoids: pinning a 1 MiB buffer on use (mlock + munlock), measured in the same run. Before the benchmarks,
// a child process runs a million checkouts and returns under SECCOMP_MODE_STRICT, where any
// system call but read/write/exit kills it: surviving shows the path makes none.
//
//   bench_pinned_pool [google benchmark flags]
#include <benchmark/benchmark.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "engine/memory/pinned_pool.hpp"

using namespace zinf::engine;

namespace {

constexpr size_t kBuffer = 1 << 20;

PinnedPool& pool() {
  static PinnedPool p({8, kBuffer});
  return p;
}

char* unpinned_buffer() {
  static char* buf = [] {
    void* q = mmap(nullptr, kBuffer, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    std::memset(q, 1, kBuffer);
    return static_cast<char*>(q);
  }();
  return buf;
}

template <class F>
double ns_per(int reps, F f) {
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / reps;
}

void BM_PoolCheckoutReturn(benchmark::State& state) {
  PinnedPool& p = pool();
  for (auto _ : state) {
    PinnedBuffer b = p.try_acquire();
    benchmark::DoNotOptimize(b.data());
  }
  if (state.thread_index() != 0) return;
  // The reference, in the same run: page-locking a buffer on use instead of keeping it locked.
  char* buf = unpinned_buffer();
  double mlock_ns = ns_per(2000, [&] {
    mlock(buf, kBuffer);
    munlock(buf, kBuffer);
  });
  double pool_ns = ns_per(2000000, [&] {
    PinnedBuffer b = p.try_acquire();
    benchmark::DoNotOptimize(b.data());
  });
  state.counters["pool_ns"] = pool_ns;
  state.counters["mlock_munlock_ns"] = mlock_ns;
  state.counters["speedup_vs_mlock"] = mlock_ns / pool_ns;
}

bool no_syscalls_on_path() {
  PinnedPool& p = pool();
  pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) syscall(SYS_exit, 2);
    for (int i = 0; i < 1000000; ++i) {
      PinnedBuffer a = p.try_acquire();
      PinnedBuffer b = p.acquire();
      if (!a || !b) syscall(SYS_exit, 3);
    }
    syscall(SYS_exit, 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

BENCHMARK(BM_PoolCheckoutReturn)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(BM_PoolCheckoutReturn)->Threads(2)->Repetitions(5)->ReportAggregatesOnly(true);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::printf("system calls on checkout/return: %s (1M cycles under SECCOMP_MODE_STRICT)\n",
              no_syscalls_on_path() ? "none" : "SOME - the child was killed");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
