// The CUDA plugin's entry point (engine/backend/cuda_plugin.hpp): the table zinf reads after dlopen.
#include <cuda_runtime_api.h>

#include "engine/backend/cuda/gpt_cuda_backend.hpp"
#include "engine/backend/cuda/nccl_collectives.hpp"
#include "engine/backend/cuda_plugin.hpp"

namespace zinf::engine {

namespace {

int device_count(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return -1;
  }
  return count;
}

std::unique_ptr<TrainingBackend> make_backend(const core::Program& program, const core::Plan& plan, const Gpt2& model,
                                              int rank, Collectives& comm, const GptBackendOptions& options, int device) {
  return std::make_unique<cuda::GptCudaBackend>(program, plan, model, rank, comm,
                                                cuda::GptCudaBackendOptions{options, device});
}

const CudaPlugin kPlugin{kCudaPluginAbi, &device_count, &cuda::make_device_collectives, &make_backend};

}  // namespace

}  // namespace zinf::engine

extern "C" const zinf::engine::CudaPlugin* zinf_cuda_plugin() { return &zinf::engine::kPlugin; }
