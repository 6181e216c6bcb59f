// CRC32C (engine/io/crc32c.hpp) in GB/s, each implementation this CPU runs, against memcpy of the
// same buffer in the same run: a 4 KiB page (the NVMe store checksums each page of its swap files),
// 1 MiB (the store's default block) and 64 MiB (beyond the caches). The buffers are allocated once
// and touched before timing, so first-touch page faults are not counted.
//
//   build/experiments/bench_crc32c [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/io/crc32c.hpp"

namespace {

struct Buffers {
  std::vector<unsigned char> src, dst;
  explicit Buffers(size_t bytes) : src(bytes), dst(bytes) {
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    std::memset(dst.data(), 1, bytes);
  }
};

Buffers& buffers(size_t bytes) {
  static std::vector<std::unique_ptr<Buffers>> all;
  for (auto& b : all)
    if (b->src.size() == bytes) return *b;
  all.push_back(std::make_unique<Buffers>(bytes));
  return *all.back();
}

void BM_Crc32c(benchmark::State& state, zinf::engine::Crc32cImplementation impl) {
  const size_t bytes = size_t(state.range(0));
  Buffers& b = buffers(bytes);
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = impl.checksum(b.src.data(), bytes, crc);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.SetLabel(impl.name);
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0));
  Buffers& b = buffers(bytes);
  for (auto _ : state) {
    std::memcpy(b.dst.data(), b.src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const std::vector<int64_t> sizes = {4 << 10, 1 << 20, 64 << 20};
  for (const auto& impl : zinf::engine::crc32c_implementations()) {
    auto* b = benchmark::RegisterBenchmark((std::string("BM_Crc32c/") + impl.name).c_str(),
                                           [impl](benchmark::State& s) { BM_Crc32c(s, impl); });
    for (int64_t n : sizes) b->Arg(n);
  }
  auto* m = benchmark::RegisterBenchmark("BM_Memcpy", BM_Memcpy);
  for (int64_t n : sizes) m->Arg(n);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
