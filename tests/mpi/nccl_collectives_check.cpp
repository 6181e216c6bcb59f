// Checks cuda::NcclCollectives under mpirun, one GPU per rank: every collective on device buffers
// (and on host buffers, which it stages) against the values it must produce on every rank.
// Prints "N passed, M failed"; exits non-zero on failure, and 77 (CTest: skipped) when there are
// fewer CUDA devices than ranks.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <string>
#include <vector>

#include "engine/comm/collectives.hpp"
#include "engine/backend/cuda/cuda_check.hpp"
#include "engine/backend/cuda/nccl_collectives.hpp"
#include "engine/backend/backend_select.hpp"

using namespace zinf::engine;

namespace {

int passed = 0, failed = 0;

void expect(bool ok, const std::string& what, int rank) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    fmt::print(stderr, "rank {}: FAILED: {}\n", rank, what);
  }
}

template <class T>
struct Dev {
  T* p = nullptr;
  size_t n;
  explicit Dev(const std::vector<T>& v) : n(v.size()) {
    ZINF_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)));
    ZINF_CUDA_CHECK(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    ZINF_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

void run_checks(Collectives& c) {
  const int r = c.rank(), n = c.size();
  const size_t shard = 1001;
  {  // all-gather of device shards: shard q holds q*10000 + i
    std::vector<float> mine(shard);
    for (size_t i = 0; i < shard; ++i) mine[i] = float(r * 10000 + int(i));
    Dev<float> d_mine(mine), d_full(std::vector<float>(shard * size_t(n), -1.0f));
    c.all_gather(d_mine.p, shard * sizeof(float), d_full.p, "check");
    auto full = d_full.get();
    bool ok = true;
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < shard; ++i) ok &= full[size_t(q) * shard + i] == float(q * 10000 + int(i));
    expect(ok, "all_gather (device)", r);
  }
  {  // reduce-scatter: every rank contributes (rank+1) + i
    std::vector<float> full(shard * size_t(n));
    for (size_t i = 0; i < full.size(); ++i) full[i] = float(r + 1) + float(i % 7);
    Dev<float> d_full(full), d_shard(std::vector<float>(shard, 0.0f));
    c.reduce_scatter(d_full.p, d_shard.p, shard, "check");
    auto got = d_shard.get();
    bool ok = true;
    for (size_t i = 0; i < shard; ++i)
      ok &= got[i] == float(n * (n + 1) / 2) + float(n) * float((size_t(r) * shard + i) % 7);
    expect(ok, "reduce_scatter (device)", r);
  }
  {  // all-reduce, float on the device and double on the host (staged)
    Dev<float> d(std::vector<float>(513, float(r)));
    c.all_reduce(d.p, 513, "check");
    bool ok = true;
    for (float x : d.get()) ok &= x == float(n * (n - 1) / 2);
    expect(ok, "all_reduce float (device)", r);
    std::vector<double> h(3, double(r) + 0.5);
    c.all_reduce(h.data(), h.size(), "check");
    expect(h[0] == double(n * (n - 1)) / 2.0 + 0.5 * n && h[2] == h[0], "all_reduce double (host, staged)", r);
  }
  {  // broadcast from the last rank, reduce to rank 0
    Dev<int32_t> d(std::vector<int32_t>(77, r == n - 1 ? 42 : r));
    c.broadcast(d.p, 77 * sizeof(int32_t), n - 1, "check");
    bool ok = true;
    for (int32_t x : d.get()) ok &= x == 42;
    expect(ok, "broadcast (device)", r);
    Dev<float> in(std::vector<float>(65, 1.0f)), out(std::vector<float>(65, 0.0f));
    c.reduce(in.p, out.p, 65, 0, "check");
    if (r == 0) expect(out.get()[64] == float(n), "reduce (device)", r);
  }
  c.barrier("check");
  expect(true, "barrier", r);
}

}  // namespace

int main() {
  auto bootstrap = make_collectives();
  const int r = bootstrap->rank(), n = bootstrap->size();
  std::string why;
  int devices = 0;
  if (!cuda_device_available(&why) || cudaGetDeviceCount(&devices) != cudaSuccess || devices < n) {
    if (r == 0)
      fmt::print("SKIPPED: NCCL check needs {} CUDA device(s): {}\n", n,
                 why.empty() ? fmt::format("{} found", devices) : why);
    return 77;
  }
  try {
    cuda::NcclCollectives nccl(*bootstrap, cuda_device_for_rank(r));
    run_checks(nccl);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: {}\n", r, e.what());
    ++failed;
  }
  fmt::print("rank {} of {}: {} passed, {} failed\n", r, n, passed, failed);
  return failed ? 1 : 0;
}
