#include "engine/backend/backend_select.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>

#include "engine/backend/cuda_plugin.hpp"

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
  std::string reason;
  const CudaPlugin* plugin = cuda_plugin(&reason);
  const int count = plugin ? plugin->device_count(&reason) : -1;
  if (count > 0) {
    if (why) why->clear();
    return true;
  }
  if (why) *why = count == 0 ? "cudaGetDeviceCount: 0 devices" : reason;
  return false;
}

bool cuda_driver_present() {
  void* driver = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!driver) return false;
  ::dlclose(driver);
  return true;
}

BackendKind select_backend(const std::string& name) {
  if (name == "cpu") return BackendKind::Cpu;
  if (name == "auto") return cuda_built() && cuda_driver_present() && cuda_device_available() ? BackendKind::Cuda : BackendKind::Cpu;
  if (name == "cuda") {
    std::string why;
    if (!cuda_device_available(&why))  // without the plugin, why says what is missing: the build, the file
      throw std::invalid_argument(cuda_plugin() ? "--backend cuda: no CUDA device found (" + why + ")"
                                                : "--backend cuda: " + why);
    return BackendKind::Cuda;
  }
  throw std::invalid_argument("--backend '" + name + "': expected cpu, cuda or auto");
}

int cuda_device_for_rank(int rank) {
  int local = rank;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) {
      local = std::atoi(v);
      break;
    }
  const CudaPlugin* plugin = cuda_plugin();
  const int count = plugin ? plugin->device_count(nullptr) : 0;
  return count > 0 ? local % count : 0;
}

}  // namespace zinf::engine
