// What this build of the engine can use: which backends and collectives were compiled in.
#pragma once
#include <string>

namespace zinf::engine {

struct BuildInfo {
  bool cuda = false;  // the CUDA backend was compiled (nvcc found)
  bool mpi = false;   // MPI collectives were compiled
};
BuildInfo build_info();
std::string describe(const BuildInfo& b);

}  // namespace zinf::engine
