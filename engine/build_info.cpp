#include "engine/build_info.hpp"

#include <cblas.h>

#include "engine/io/nvme_store.hpp"
#include "engine/optim/cpu_adam.hpp"

namespace zinf::engine {

BuildInfo build_info() {
  BuildInfo b;
#ifdef ZINF_HAVE_CUDA
  b.cuda = true;
#endif
#ifdef ZINF_HAVE_MPI
  b.mpi = true;
#endif
  return b;
}

std::string describe(const BuildInfo& b) {
  std::string s = "backends: cpu";
  if (b.cuda) s += ", cuda";
  s += "; collectives: local";
  if (b.mpi) s += ", mpi";
  return s;
}

CpuPaths cpu_paths() {
  CpuPaths p;
  p.adam = to_string(best_simd_level());
  p.crc32c = crc32c_implementation();
  p.blas_core = openblas_get_corename();
  return p;
}

std::string describe(const CpuPaths& p) {
  return "cpu paths: adam " + p.adam + ", crc32c " + p.crc32c + ", openblas " + p.blas_core;
}

}  // namespace zinf::engine
