#include "engine/build_info.hpp"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

#include "engine/io/crc32c.hpp"
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

std::string blas_kernel_warning(const CpuPaths& p, const char* coretype_env) {
  if (!coretype_env || !*coretype_env || p.adam != "avx512") return "";
  std::string core = p.blas_core;
  for (char& c : core) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* wide : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core == wide) return "";
  return "OpenBLAS runs its " + p.blas_core + " kernels because OPENBLAS_CORETYPE=" + coretype_env +
         " forces them, and this CPU has AVX-512, whose kernels run GEMMs up to about twice as fast: unset "
         "OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE, which goes with it) to use them";
}

namespace {

std::mutex g_pinned_mu;
std::optional<BlasThreads> g_pinned;

}  // namespace

BlasThreads pin_blas_threads(const char* blas_threads_env, std::optional<int> flag) {
  BlasThreads b = choose_threads(flag, blas_threads_env, this_process_cores());
  openblas_set_num_threads(b.threads);
  std::lock_guard lock(g_pinned_mu);
  g_pinned = b;
  return b;
}

BlasThreads pinned_blas_threads() {
  {
    std::lock_guard lock(g_pinned_mu);
    if (g_pinned) return *g_pinned;
  }
  return choose_threads(std::nullopt, std::getenv("OPENBLAS_NUM_THREADS"), this_process_cores());
}

ScopedBlasThreads::ScopedBlasThreads(int threads) : before_(openblas_get_num_threads()) {
  openblas_set_num_threads(std::max(1, threads));
}

ScopedBlasThreads::~ScopedBlasThreads() { openblas_set_num_threads(before_); }

}  // namespace zinf::engine
