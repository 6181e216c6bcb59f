#include "engine/build_info.hpp"

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

}  // namespace zinf::engine
