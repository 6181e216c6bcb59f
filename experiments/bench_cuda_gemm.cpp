// The device's measured bf16 GEMM rate through cuBLAS (bf16 inputs, fp32 accumulation and output:
// the GEMM the CUDA backend's linear layers run), for square sizes and for GPT-like shapes
// (tokens x hidden x 4 hidden). Reports TFLOP/s per GPU as the counter "TFLOPs" (a rate).
// Without a CUDA device every benchmark is skipped with that message.
#include <benchmark/benchmark.h>

#ifdef ZINF_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "engine/backend/cuda/cuda_check.hpp"
#include "engine/backend/backend_select.hpp"

namespace {

void BM_CublasBf16Gemm(benchmark::State& state) {
  std::string why;
  if (!zinf::engine::cuda_device_available(&why)) {
    state.SkipWithError(("no CUDA device: " + why).c_str());
    return;
  }
  const int m = int(state.range(0)), n = int(state.range(1)), k = int(state.range(2));
  void *a = nullptr, *b = nullptr, *c = nullptr;
  ZINF_CUDA_CHECK(cudaMalloc(&a, size_t(m) * size_t(k) * 2));
  ZINF_CUDA_CHECK(cudaMalloc(&b, size_t(k) * size_t(n) * 2));
  ZINF_CUDA_CHECK(cudaMalloc(&c, size_t(m) * size_t(n) * 4));
  ZINF_CUDA_CHECK(cudaMemset(a, 0, size_t(m) * size_t(k) * 2));
  ZINF_CUDA_CHECK(cudaMemset(b, 0, size_t(k) * size_t(n) * 2));
  cublasHandle_t h;
  ZINF_CUBLAS_CHECK(cublasCreate(&h));
  cudaEvent_t start, stop;
  ZINF_CUDA_CHECK(cudaEventCreate(&start));
  ZINF_CUDA_CHECK(cudaEventCreate(&stop));
  const float alpha = 1.0f, beta = 0.0f;
  auto gemm = [&] {
    ZINF_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_16BF, k, b, CUDA_R_16BF, k,
                                   &beta, c, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  gemm();  // warm-up: heuristics and workspace
  ZINF_CUDA_CHECK(cudaDeviceSynchronize());
  const int reps = 20;
  for (auto _ : state) {
    ZINF_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < reps; ++i) gemm();
    ZINF_CUDA_CHECK(cudaEventRecord(stop));
    ZINF_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ZINF_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(double(ms) / 1e3);
  }
  state.counters["TFLOPs"] = benchmark::Counter(2.0 * m * n * k * reps / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
}

BENCHMARK(BM_CublasBf16Gemm)
    ->Args({4096, 4096, 4096})
    ->Args({8192, 8192, 8192})
    ->Args({4096, 8192, 1024})   // gpt2-medium c_fc: 4*1024 out, 8 x 1024 tokens, 1024 in
    ->Args({6144, 8192, 1536})   // a 1.5k-hidden model's c_fc
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

#else

namespace {
void BM_CublasBf16Gemm(benchmark::State& state) { state.SkipWithError("zinf was built without CUDA"); }
BENCHMARK(BM_CublasBf16Gemm);
}  // namespace

#endif

BENCHMARK_MAIN();
