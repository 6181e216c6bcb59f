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

// What to tell a user whose OpenBLAS runs kernels below this CPU's because the environment forces
// them: `coretype_env` is OPENBLAS_CORETYPE's value (null or empty when unset). Some environments
// set Haswell for every machine, which halves GEMM on an AVX-512 CPU (the GEMMs are most of a CPU
// backend's step). Empty when there is nothing to say: the variable unset, a CPU without AVX-512
// (`p.adam` is not avx512), or an AVX-512 kernel set (SkylakeX, Cooperlake, SapphireRapids).
std::string blas_kernel_warning(const CpuPaths& p, const char* coretype_env);

// The threads OpenBLAS runs each GEMM on in this process. zinf pins them: OPENBLAS_NUM_THREADS when the
// environment sets it to a positive count, else 1 (OpenBLAS's own default is every core, whose
// spinning workers contend with the engine's lane threads and with the other ranks on the same
// cores, so that a step's time depends on the machine's load more than on its rates). A profile
// records the count it was measured with (core::MachineRecord::blas_threads), so a run and the profile
// predicting it use the same. `blas_threads_env` is OPENBLAS_NUM_THREADS's value (null when unset).
struct BlasThreads {
  int threads = 1;
  bool pinned = false;  // zinf chose the count (the environment did not set one)
};
BlasThreads pin_blas_threads(const char* blas_threads_env);
std::string describe(const BlasThreads& b);

// OpenBLAS on `threads` threads in this process while it lives (profile-hw measures one thread's
// rates beside the pinned count's); the count it found is restored after. Not for use while another
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
