// engine/fp16.hpp: IEEE half conversions. Widening is checked on every one of the 65536 halves
// (exact, and narrowing it back gives the same bits); narrowing on known values, on every rounding
// boundary between two neighbouring halves (the tie and one fp32 ulp either side), and, where the
// compiler has _Float16, against its conversion on a sweep of fp32 bit patterns.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "engine/fp16.hpp"

using zinf::engine::fp16;
using zinf::engine::to_float;
using zinf::engine::to_fp16;

namespace {

bool is_nan_half(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// The value of a half from its fields, in double, independently of to_float.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(double(m), -24);
  return sign * std::ldexp(double(1024 + m), e - 25);
}

}  // namespace

TEST_CASE("fp16: every half widens exactly and narrows back to its own bits", "[fp16]") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = to_float(fp16{uint16_t(h)});
    if (is_nan_half(uint16_t(h))) {
      REQUIRE(std::isnan(f));
      REQUIRE(is_nan_half(to_fp16(f).bits));
      continue;
    }
    REQUIRE(double(f) == half_value(uint16_t(h)));
    REQUIRE(to_fp16(f).bits == h);
  }
}

TEST_CASE("fp16: known values, overflow to infinity and the subnormal range", "[fp16]") {
  CHECK(to_fp16(1.0f).bits == 0x3c00);
  CHECK(to_fp16(-2.0f).bits == 0xc000);
  CHECK(to_fp16(0.1f).bits == 0x2e66);
  CHECK(to_fp16(1.0f / 3.0f).bits == 0x3555);
  CHECK(to_fp16(65504.0f).bits == 0x7bff);           // the largest finite half
  CHECK(to_fp16(65519.996f).bits == 0x7bff);         // below the half-way point to 65536
  CHECK(to_fp16(65520.0f).bits == 0x7c00);           // the tie rounds to even: infinity
  CHECK(to_fp16(1e6f).bits == 0x7c00);
  CHECK(to_fp16(-1e6f).bits == 0xfc00);
  CHECK(to_fp16(std::numeric_limits<float>::infinity()).bits == 0x7c00);
  CHECK(to_fp16(0x1p-14f).bits == 0x0400);           // the smallest normal
  CHECK(to_fp16(0x1p-24f).bits == 0x0001);           // the smallest subnormal
  CHECK(to_fp16(0x1p-25f).bits == 0x0000);           // its half: a tie, to even (zero)
  CHECK(to_fp16(0x1.8p-24f).bits == 0x0002);         // 1.5 units: a tie, to even (2)
  CHECK(to_fp16(0x1.000002p-25f).bits == 0x0001);    // just above the tie
  CHECK(to_fp16(-0.0f).bits == 0x8000);
  CHECK(to_fp16(1e-10f).bits == 0x0000);
  CHECK(to_fp16(1.0f + 0x1p-11f).bits == 0x3c00);    // tie between 1 and 1 + 2^-10: to even (1)
  CHECK(to_fp16(1.0f + 0x1.8p-10f).bits == 0x3c02); // tie between 1 + 2^-10 and 1 + 2^-9: to even
  CHECK(is_nan_half(to_fp16(std::numeric_limits<float>::quiet_NaN()).bits));
}

TEST_CASE("fp16: every boundary between neighbouring halves rounds to nearest, ties to even", "[fp16]") {
  // For each pair of finite positive neighbours (a, b): the midpoint goes to the even one,
  // one fp32 ulp below it to a, one above to b; the same for their negatives.
  for (uint32_t a = 0; a < 0x7bff; ++a) {  // 0x7bff's neighbour is infinity: the known values cover it
    const uint32_t b = a + 1;
    const double mid = 0.5 * (half_value(uint16_t(a)) + half_value(uint16_t(b)));
    const float m = float(mid);  // exact: a midpoint of two halves has at most 12 significant bits
    REQUIRE(double(m) == mid);
    const uint16_t even = (a & 1) ? uint16_t(b) : uint16_t(a);
    REQUIRE(to_fp16(m).bits == even);
    REQUIRE(to_fp16(std::nextafter(m, 0.0f)).bits == a);
    REQUIRE(to_fp16(std::nextafter(m, 1e9f)).bits == b);
    REQUIRE(to_fp16(-m).bits == (even | 0x8000));
  }
}

#ifdef __FLT16_MAX__
namespace {
float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace

TEST_CASE("fp16: narrowing agrees with the compiler's _Float16 on a sweep of fp32 bit patterns", "[fp16]") {
  int64_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 9973) {
    const float f = bits_to_float(uint32_t(u));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, sizeof want);
    REQUIRE(to_fp16(f).bits == want);
    ++checked;
  }
  CHECK(checked > 400000);
}
#endif
