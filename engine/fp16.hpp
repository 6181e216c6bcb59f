// IEEE 754 binary16 ("half", fp16) storage type and its conversions to and from fp32: fp16 mixed
// precision stores parameters and gradients in it. Conversion from fp32 rounds to nearest, ties to
// even, through the subnormal range; a magnitude from 65520 on (half-way past the largest finite
// half, 65504) becomes infinity, as an overflowing fp16 gradient does; NaN stays a quiet NaN.
// Widening is exact. Header-only, no state, thread-safe.
#pragma once
#include <cstdint>
#include <cstring>

namespace zinf::engine {

struct fp16 {
  uint16_t bits = 0;
};
static_assert(sizeof(fp16) == 2);

inline float to_float(fp16 v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000u) << 16, exp = (v.bits >> 10) & 0x1fu, man = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // infinity, or NaN with its payload
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);  // rebias 15 -> 127
  } else {
    // Zero or subnormal: man * 2^-24, exact in fp32.
    float f = float(man) * 0x1p-24f;
    std::memcpy(&u, &f, sizeof u);
    u |= sign;
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline fp16 to_fp16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u)  // infinity, or NaN kept quiet with the top of its payload
    return fp16{uint16_t(sign | (u == 0x7f800000u ? 0x7c00u : 0x7e00u | ((u >> 13) & 0x3ffu)))};
  if (u >= 0x477ff000u) return fp16{uint16_t(sign | 0x7c00u)};  // 65520 and up round to infinity
  if (u >= 0x38800000u) {  // a normal half: rebias, then round the 13 dropped bits to nearest even
    const uint32_t r = u - 0x38000000u;
    return fp16{uint16_t(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13))};
  }
  if (u < 0x33000000u) return fp16{sign};  // at most 2^-25 (a tie with 0, which is even): zero
  // A subnormal half counts units of 2^-24: the fp32 significand shifted right, rounded to nearest
  // even (a carry into 0x400 is the smallest normal, correctly encoded).
  const uint32_t exp = u >> 23, man = (u & 0x7fffffu) | 0x800000u, shift = 126u - exp;
  uint32_t r = man >> shift;
  const uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) ++r;
  return fp16{uint16_t(sign | r)};
}

}  // namespace zinf::engine
