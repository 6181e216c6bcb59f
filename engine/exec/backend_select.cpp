#include "engine/exec/backend_select.hpp"

#include <cstdlib>
#include <stdexcept>

#ifdef ZINF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zinf::engine {

const char* to_string(BackendKind k) { return k == BackendKind::Cuda ? "cuda" : "cpu"; }

bool cuda_built() {
#ifdef ZINF_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_available(std::string* why) {
#ifdef ZINF_HAVE_CUDA
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error so later calls start clean
    return false;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount: 0 devices";
    return false;
  }
  if (why) why->clear();
  return true;
#else
  if (why) *why = "this zinf was built without CUDA (nvcc was not found when it was configured)";
  return false;
#endif
}

BackendKind select_backend(const std::string& name) {
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "auto") return cuda_device_available() ? BackendKind::Cuda : BackendKind::Cpu;
  if (name == "cuda") {
    std::string why;
    if (!cuda_built()) throw std::invalid_argument("--backend cuda: " + (cuda_device_available(&why), why));
    if (!cuda_device_available(&why)) throw std::invalid_argument("--backend cuda: no CUDA device found (" + why + ")");
    return BackendKind::Cuda;
  }
  throw std::invalid_argument("--backend '" + name + "': expected cpu, cuda or auto");
}

void require_backend_runs(BackendKind kind, const core::Program& program) {
  if (kind == BackendKind::Cuda && !program.activations().empty())
    throw std::invalid_argument(
        "activation_offload: the plan offloads activations, which the cuda backend does not run yet; use "
        "--backend cpu, or activation_offload.policy: none with activation_checkpoint for the cuda backend");
}

int cuda_device_for_rank(int rank) {
  int local = rank;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
#ifdef ZINF_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
#else
  const int count = 0;
#endif
  return count > 0 ? local % count : 0;
}

}  // namespace zinf::engine
