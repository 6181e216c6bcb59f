// The engine's CPU-dependent choices: each fast path agrees with its portable one, and the paths
// reported by `zinf --version` are the ones the dispatchers take. tests/emulated_cpu.sh runs this
// and the other CPU-dependent tests again on emulated CPUs without AVX-512 and without AVX2.
#include <catch2/catch.hpp>
#include <cblas.h>

#include <random>
#include <string>
#include <vector>

#include "engine/build_info.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/optim/cpu_adam.hpp"

using namespace zinf::engine;

TEST_CASE("crc32c: the check value, and the dispatched path equals the portable one at every length") {
  const std::string check = "123456789";
  CHECK(crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(crc32c_portable(check.data(), check.size()) == 0xE3069283u);
  std::mt19937 rng(7);
  std::vector<unsigned char> data(4099);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (size_t offset : {size_t(0), size_t(1), size_t(3)})
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(63), size_t(4096)}) {
      INFO("offset " << offset << " length " << n << " path " << crc32c_implementation());
      CHECK(crc32c(data.data() + offset, n, 0x1234u) == crc32c_portable(data.data() + offset, n, 0x1234u));
    }
}

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
