// What this build of the engine can use: which backends and collectives were compiled in, and
// which of its CPU-dependent paths this CPU takes (picked at run time from what the CPU supports).
#pragma once
#include <string>

namespace zinf::engine {

struct BuildInfo {
  bool cuda = false;  // the CUDA backend was compiled (nvcc found)
  bool mpi = false;   // MPI collectives were compiled
};
BuildInfo build_info();
std::string describe(const BuildInfo& b);

struct CpuPaths {
  std::string adam;       // CPU Adam's SIMD level: avx512, avx2 or reference
  std::string crc32c;     // sse4.2 or portable
  std::string blas_core;  // the kernel set OpenBLAS chose (OPENBLAS_CORETYPE overrides it)
};
CpuPaths cpu_paths();
std::string describe(const CpuPaths& p);

}  // namespace zinf::engine
