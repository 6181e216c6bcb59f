// The engine's CPU-dependent choices: the paths reported by `zinf --version` are the ones the
// dispatchers take. tests/emulated_cpu.sh runs this and the other CPU-dependent tests (crc32c_test,
// cpu_adam_test, cpu_kernels_test) again on emulated CPUs without AVX-512 and without AVX2. The
// BLAS threads zinf pins for every command, and what profile-hw measures of them.
#include <catch2/catch.hpp>
#include <cblas.h>

#include <string>

#include "engine/build_info.hpp"
#include "engine/io/crc32c.hpp"
#include "engine/optim/cpu_adam.hpp"
#include "engine/probe/machine_probe.hpp"

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

TEST_CASE("ScopedBlasThreads runs OpenBLAS on the count it names and restores the count it found") {
  pin_blas_threads("2");
  const int found = openblas_get_num_threads();
  {
    const ScopedBlasThreads one(1);
    CHECK(openblas_get_num_threads() == 1);
  }
  CHECK(openblas_get_num_threads() == found);
  pin_blas_threads("1");
  {
    const ScopedBlasThreads none(0);  // below one: one
    CHECK(openblas_get_num_threads() == 1);
  }
  CHECK(openblas_get_num_threads() == 1);
  pin_blas_threads(nullptr);
}

TEST_CASE("profile-hw measures the cores per kernel only on several BLAS threads: one core or two on two") {
  pin_blas_threads("1");
  const auto gemm1 = probe::measure_gemm(true);
  const auto attention1 = probe::measure_attention(true);
  const auto one = probe::measure_kernel_threads(gemm1, attention1, true);
  CHECK(one.gemm.empty());
  CHECK(one.attention.empty());
  pin_blas_threads("2");
  if (openblas_get_num_threads() < 2) {
    pin_blas_threads(nullptr);
    WARN("OpenBLAS runs one thread here: the two-thread measurement was not made");
    return;
  }
  const auto gemm2 = probe::measure_gemm(true);
  const auto attention2 = probe::measure_attention(true);
  const auto two = probe::measure_kernel_threads(gemm2, attention2, true);
  CHECK(openblas_get_num_threads() >= 2);  // the one-thread measurement gave the threads back
  pin_blas_threads(nullptr);
  REQUIRE(two.gemm.size() == gemm2.size());
  REQUIRE(two.attention.size() == attention2.size());
  for (size_t i = 0; i < gemm2.size(); ++i) {
    CHECK(two.gemm[i].first == double(gemm2[i].dim));
    CHECK((two.gemm[i].second >= 1.0 && two.gemm[i].second <= 2.0));
  }
  for (size_t i = 0; i < attention2.size(); ++i) {
    CHECK(two.attention[i].first == double(attention2[i].head));
    CHECK((two.attention[i].second >= 1.0 && two.attention[i].second <= 2.0));
  }
  // The cores' throughput is one BLAS thread's whatever the process runs: between one and the cores.
  pin_blas_threads("2");
  const double throughput = probe::measure_parallel_throughput(2, true);
  CHECK(openblas_get_num_threads() >= 2);
  pin_blas_threads(nullptr);
  CHECK((throughput >= 1.0 && throughput <= 2.0));
}
