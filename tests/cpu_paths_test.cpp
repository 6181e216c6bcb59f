// The engine's CPU-dependent choices: the paths reported by `zinf --version` are the ones the
// dispatchers take. tests/emulated_cpu.sh runs this and the other CPU-dependent tests (crc32c_test,
// cpu_adam_test, cpu_kernels_test) again on emulated CPUs without AVX-512 and without AVX2. The
// BLAS threads zinf pins for every command.
#include <catch2/catch.hpp>
#include <cblas.h>

#include <string>

#include "engine/build_info.hpp"
#include "engine/io/crc32c.hpp"
#include "engine/optim/cpu_adam.hpp"

using namespace zinf::engine;

TEST_CASE("the reported CPU paths are the ones the dispatchers take") {
  const CpuPaths p = cpu_paths();
  CHECK(p.adam == to_string(best_simd_level()));
  CHECK(p.adam == std::string(to_string(CpuAdam(AdamOptions{}).level())));
  CHECK(p.crc32c == crc32c_implementation());
  CHECK(p.blas_core == std::string(openblas_get_corename()));
  CHECK_FALSE(p.blas_core.empty());
  const std::string text = describe(p);
  CHECK_THAT(text, Catch::Contains("adam " + p.adam) && Catch::Contains("openblas " + p.blas_core));
}

TEST_CASE("a warning when OPENBLAS_CORETYPE holds an AVX-512 CPU to narrower kernels, and only then") {
  const CpuPaths haswell_on_avx512{"avx512", "sse4.2", "Haswell"};
  const std::string w = blas_kernel_warning(haswell_on_avx512, "Haswell");
  CHECK_THAT(w, Catch::Contains("Haswell kernels") && Catch::Contains("OPENBLAS_CORETYPE=Haswell") &&
                    Catch::Contains("AVX-512") && Catch::Contains("unset OPENBLAS_CORETYPE"));
  CHECK(blas_kernel_warning(haswell_on_avx512, nullptr).empty());                  // chosen by OpenBLAS itself
  CHECK(blas_kernel_warning(haswell_on_avx512, "").empty());
  CHECK(blas_kernel_warning({"avx2", "sse4.2", "Haswell"}, "Haswell").empty());     // the CPU's best already
  CHECK(blas_kernel_warning({"avx512", "sse4.2", "Cooperlake"}, "COOPERLAKE").empty());
  CHECK(blas_kernel_warning({"avx512", "sse4.2", "SkylakeX"}, "skylakex").empty());
  CHECK_FALSE(blas_kernel_warning({"avx512", "sse4.2", "Zen"}, "Zen").empty());
}

TEST_CASE("zinf pins OpenBLAS to one thread unless OPENBLAS_NUM_THREADS names a count") {
  for (const char* unset : {static_cast<const char*>(nullptr), "", "0", "-3", "two", "2x"}) {
    INFO((unset ? unset : "(null)"));
    const BlasThreads b = pin_blas_threads(unset);
    CHECK(b.threads == 1);
    CHECK(b.pinned);
    CHECK(openblas_get_num_threads() == 1);
    CHECK_THAT(describe(b), Catch::Contains("1 thread per process (pinned by zinf"));
  }
  // A count the environment names is taken as it is (OpenBLAS may run fewer where it has fewer cores).
  const BlasThreads three = pin_blas_threads("3");
  CHECK(three.threads == 3);
  CHECK_FALSE(three.pinned);
  CHECK(openblas_get_num_threads() >= 1);
  CHECK_THAT(describe(three), Catch::Contains("3 threads per process (OPENBLAS_NUM_THREADS)"));
  pin_blas_threads(nullptr);
}
