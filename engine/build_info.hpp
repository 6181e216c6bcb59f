// What this build of the engine can use: which backends and collectives were compiled in, and
// which of its CPU-dependent paths this CPU takes (picked at run time from what the CPU supports).
#pragma once
#include <optional>
#include <string>

#include "engine/cpu_threads.hpp"

namespace zinf::engine {

struct BuildInfo {
  bool cuda = false;  // the CUDA backend was compiled (nvcc found)
  bool mpi = false;   // MPI collectives were compiled
};
BuildInfo build_info();
std::string describe(const BuildInfo& b);

struct CpuPaths {
  std::string adam;       // CPU Adam's SIMD level: avx512, avx2 or reference
  std::string crc32c;     // sse4.2x3+pclmul, sse4.2x3, sse4.2 or portable (crc32c_implementation)
  std::string blas_core;  // the kernel set OpenBLAS chose (OPENBLAS_CORETYPE overrides it)
};
CpuPaths cpu_paths();
std::string describe(const CpuPaths& p);

// What to tell a user whose OpenBLAS runs kernels below this CPU's because the environment forces
// them: `coretype_env` is OPENBLAS_CORETYPE's value (null or empty when unset). Some environments
// set Haswell for every machine, which halves GEMM on an AVX-512 CPU (the GEMMs are most of a CPU
// backend's step). Empty when there is nothing to say: the variable unset, a CPU without AVX-512
// (`p.adam` is not avx512), or an AVX-512 kernel set (SkylakeX, Cooperlake, SapphireRapids).
std::string blas_kernel_warning(const CpuPaths& p, const char* coretype_env);

// Sets the threads OpenBLAS runs each GEMM on in this process, as engine/cpu_threads.hpp chooses
// them: the command's --threads (`flag`), else OPENBLAS_NUM_THREADS (`blas_threads_env`, null when
// unset), else the cores this process may use shared among the ranks on this node. OpenBLAS's own
// default, every core of the machine, oversubscribes a process confined to fewer and the ranks
// sharing a node. A profile records the count it was measured with and who chose it
// (core::MachineRecord::blas_threads), so that a run and the profile predicting it use the same.
// Not for use while another thread is inside a BLAS call.
using BlasThreads = ThreadChoice;
BlasThreads pin_blas_threads(const char* blas_threads_env, std::optional<int> flag = std::nullopt);

// The choice the last pin_blas_threads made in this process (the default until one ran).
BlasThreads pinned_blas_threads();

// OpenBLAS on `threads` threads in this process while it lives (profile-hw measures one thread's
// rates beside the chosen count's); the count it found is restored after. Not for use while another
// thread is inside a BLAS call.
class ScopedBlasThreads {
public:
  explicit ScopedBlasThreads(int threads);
  ~ScopedBlasThreads();
  ScopedBlasThreads(const ScopedBlasThreads&) = delete;
  ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;

private:
  int before_;
};

}  // namespace zinf::engine
