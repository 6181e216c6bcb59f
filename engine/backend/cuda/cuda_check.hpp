// Error checking for CUDA runtime, cuBLAS and NCCL calls: a failed call throws std::runtime_error
// naming the call, the file:line it was made from and the library's description of the error.
// Stateless; usable from any thread. Included only by engine/backend/cuda (it pulls in CUDA headers).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace zinf::engine::cuda {

[[noreturn]] void throw_cuda_error(const char* call, const char* file, int line, cudaError_t e);
[[noreturn]] void throw_cublas_error(const char* call, const char* file, int line, cublasStatus_t s);

}  // namespace zinf::engine::cuda

#define ZINF_CUDA_CHECK(call)                                                              \
  do {                                                                                     \
    const cudaError_t zinf_e_ = (call);                                                    \
    if (zinf_e_ != cudaSuccess) ::zinf::engine::cuda::throw_cuda_error(#call, __FILE__, __LINE__, zinf_e_); \
  } while (0)

#define ZINF_CUBLAS_CHECK(call)                                                              \
  do {                                                                                       \
    const cublasStatus_t zinf_s_ = (call);                                                   \
    if (zinf_s_ != CUBLAS_STATUS_SUCCESS) ::zinf::engine::cuda::throw_cublas_error(#call, __FILE__, __LINE__, zinf_s_); \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not at the next unrelated call.
#define ZINF_CUDA_CHECK_LAUNCH() ZINF_CUDA_CHECK(cudaGetLastError())
