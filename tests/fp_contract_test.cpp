// The build's floating-point contract (engine/fp_contract.hpp): a*b + c, written as the SIMD
// kernels write it and compiled in their translation unit with FMA available, must round twice.
// If CMakeLists.txt lost -ffp-contract=off, the probes would fuse and this fails on any machine
// that has FMA; on one without, the compiler cannot fuse for it either.
#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>
#include <string>

#include "engine/optim/adam_kernels.hpp"
#include "engine/optim/cpu_adam.hpp"

using namespace zinf::engine;

namespace {

// a = b = 1 + 2^-12: a*b = 1 + 2^-11 + 2^-24 is a tie between two floats and rounds to 1 + 2^-11,
// so with c = -(1 + 2^-11) the unfused result is 0 and the fused one 2^-24.
const float kA = 1.0f + 0x1p-12f, kC = -(1.0f + 0x1p-11f);

float twice_rounded(float a, float b, float c) {
  volatile float product = a * b;  // a store between the two operations: never fused
  return product + c;
}

}  // namespace

TEST_CASE("the probe values tell a fused multiply-add from two roundings") {
  CHECK(twice_rounded(kA, kA, kC) == 0.0f);
  CHECK(std::fma(kA, kA, kC) == 0x1p-24f);
}

// Catch prints 2^-24 as 0.0f: the message shows the value exactly.
static std::string exact(float x) {
  std::ostringstream s;
  s << std::hexfloat << x;
  return s.str();
}

TEST_CASE("the kernels' translation unit does not contract a*b+c into an FMA") {
  // The probes are compiled for targets with FMA (and so VEX encoding): they run only where the
  // CPU has it. Where none can run, no FMA can be fused either.
  if (__builtin_cpu_supports("fma")) {
    const float scalar = adam_detail::contract_probe_scalar(kA, kA, kC);
    INFO("scalar probe " << exact(scalar) << " (0x0p+0 twice rounded, 0x1p-24 fused)");
    CHECK(scalar == 0.0f);
  }
  if (simd_supported(SimdLevel::Avx2) && __builtin_cpu_supports("fma")) {
    const float avx2 = adam_detail::contract_probe_avx2(kA, kA, kC);
    INFO("avx2 probe " << exact(avx2));
    CHECK(avx2 == 0.0f);
  }
  if (simd_supported(SimdLevel::Avx512)) {
    const float avx512 = adam_detail::contract_probe_avx512(kA, kA, kC);
    INFO("avx512 probe " << exact(avx512));
    CHECK(avx512 == 0.0f);
  }
}
