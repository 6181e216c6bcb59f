#include "engine/backend/cuda/cuda_check.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace zinf::engine::cuda {

void throw_cuda_error(const char* call, const char* file, int line, cudaError_t e) {
  throw std::runtime_error(fmt::format("{} failed at {}:{}: {} ({})", call, file, line, cudaGetErrorString(e),
                                       cudaGetErrorName(e)));
}

void throw_cublas_error(const char* call, const char* file, int line, cublasStatus_t s) {
  throw std::runtime_error(fmt::format("{} failed at {}:{}: {}", call, file, line, cublasGetStatusString(s)));
}

}  // namespace zinf::engine::cuda
