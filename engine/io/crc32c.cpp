#include "engine/io/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zinf::engine {

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // the Castagnoli polynomial, bit-reversed

uint32_t crc32c_table_entry(uint32_t i) {
  uint32_t c = i;
  for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
  return c;
}

uint32_t crc32c_table(const unsigned char* p, size_t n, uint32_t crc) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) t[i] = crc32c_table_entry(i);
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

// Polynomials modulo the CRC's, as the register holds them: bit 31 is x^0, bit 0 is x^31.
constexpr uint32_t kOne = 0x80000000u;

// a(x) * b(x) mod P, one bit of `a` at a time (b is multiplied by x as a's degree rises).
uint32_t multiply_mod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = kOne; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b >> 1) ^ (kPoly & (0u - (b & 1u)));
  }
  return product;
}

// x^k mod P by squaring.
uint32_t x_to_the(uint64_t k) {
  uint32_t result = kOne, square = kOne >> 1;  // x^0, x^1
  for (; k != 0; k >>= 1) {
    if (k & 1) result = multiply_mod(result, square);
    square = multiply_mod(square, square);
  }
  return result;
}

// The interleaved paths split a run into three streams of `bytes` each, checksummed at once, and
// join them by shifting the earlier streams' registers past the later ones: the register is linear
// in the data, so reg(A B) = reg(A) * x^(8|B|) + reg_from_zero(B). Longer streams first; a 4 KiB
// page (the store's unit) takes one round of 1360 and a 16-byte tail.
constexpr std::array<size_t, 4> kStreamBytes = {4096, 1360, 256, 64};

// The shift by one stream's length, as the two paths apply it.
struct Shift {
  uint32_t factor = 0;                   // x^(8 * bytes) mod P
  uint32_t clmul_factor = 0;             // x^(8 * bytes - 33) mod P: see shift_clmul
  std::array<std::array<uint32_t, 256>, 4> by_byte{};  // factor times each byte of the register
};

const std::array<Shift, kStreamBytes.size()>& shifts() {
  static const auto table = [] {
    std::array<Shift, kStreamBytes.size()> s{};
    for (size_t level = 0; level < kStreamBytes.size(); ++level) {
      Shift& sh = s[level];
      sh.factor = x_to_the(8 * kStreamBytes[level]);
      sh.clmul_factor = x_to_the(8 * kStreamBytes[level] - 33);
      // The product is linear in the register: one table per byte of it.
      for (int byte = 0; byte < 4; ++byte)
        for (uint32_t v = 0; v < 256; ++v) sh.by_byte[size_t(byte)][v] = multiply_mod(v << (8 * byte), sh.factor);
    }
    return s;
  }();
  return table;
}

uint32_t shift_table(uint32_t reg, const Shift& s) {
  return s.by_byte[0][reg & 0xffu] ^ s.by_byte[1][(reg >> 8) & 0xffu] ^ s.by_byte[2][(reg >> 16) & 0xffu] ^
         s.by_byte[3][reg >> 24];
}

#if defined(__x86_64__)
bool cpu_has_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
bool cpu_has_pclmul() {
  static const bool yes = __builtin_cpu_supports("pclmul");
  return yes;
}

uint64_t load64(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// The 64-bit carry-less product of reg (bit 31 - i: x^i) and x^(8n - 33) holds reg * x^(8n - 33)
// with x^62 at bit 0; the crc32 instruction on those 64 bits from a zero register reads bit 0 as
// x^63 and multiplies by x^32, which is reg * x^(8n) mod P in all.
__attribute__((target("sse4.2,pclmul"))) uint32_t shift_clmul(uint32_t reg, const Shift& s) {
  const __m128i product = _mm_clmulepi64_si128(_mm_cvtsi32_si128(int(reg)), _mm_cvtsi32_si128(int(s.clmul_factor)), 0);
  return uint32_t(_mm_crc32_u64(0, uint64_t(_mm_cvtsi128_si64(product))));
}

__attribute__((target("sse4.2"))) uint32_t single_stream(const unsigned char* p, size_t n, uint32_t reg) {
  uint64_t c = reg;
  for (; n >= 8; p += 8, n -= 8) c = _mm_crc32_u64(c, load64(p));
  uint32_t c32 = uint32_t(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const void* data, size_t n, uint32_t crc) {
  return ~single_stream(static_cast<const unsigned char*>(data), n, ~crc);
}

// Three crc32 streams over adjacent runs: the instruction's latency is three times its issue
// interval, so one stream leaves the unit two thirds idle.
// Without PCLMULQDQ in this function's target, a CPU without it (SSE4.2 alone: Nehalem) runs the
// table-shift instance safely; the clmul instance calls shift_clmul, which is not inlined here.
template <bool kClmul>
__attribute__((target("sse4.2"))) uint32_t crc32c_interleaved(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto& table = shifts();
  uint64_t c0 = ~crc;
  for (size_t level = 0; level < kStreamBytes.size(); ++level) {
    const size_t len = kStreamBytes[level];
    while (n >= 3 * len) {
      uint64_t c1 = 0, c2 = 0;
      for (size_t i = 0; i < len; i += 8) {
        c0 = _mm_crc32_u64(c0, load64(p + i));
        c1 = _mm_crc32_u64(c1, load64(p + len + i));
        c2 = _mm_crc32_u64(c2, load64(p + 2 * len + i));
      }
      const Shift& s = table[level];
      const auto shift = [&s](uint64_t r) {
        if constexpr (kClmul) return shift_clmul(uint32_t(r), s);
        else return shift_table(uint32_t(r), s);
      };
      c0 = shift(shift(c0) ^ c1) ^ c2;
      p += 3 * len;
      n -= 3 * len;
    }
  }
  return ~single_stream(p, n, uint32_t(c0));
}
#endif

const Crc32cImplementation& best() {
  static const Crc32cImplementation chosen = crc32c_implementations().back();
  return chosen;
}

}  // namespace

uint32_t crc32c(const void* data, size_t length, uint32_t crc) { return best().checksum(data, length, crc); }

uint32_t crc32c_portable(const void* data, size_t length, uint32_t crc) {
  return crc32c_table(static_cast<const unsigned char*>(data), length, crc);
}

const char* crc32c_implementation() { return best().name; }

std::vector<Crc32cImplementation> crc32c_implementations() {
  std::vector<Crc32cImplementation> all = {{"portable", crc32c_portable}};
#if defined(__x86_64__)
  if (cpu_has_sse42()) {
    all.push_back({"sse4.2", crc32c_sse42});
    all.push_back({"sse4.2x3", crc32c_interleaved<false>});
    if (cpu_has_pclmul()) all.push_back({"sse4.2x3+pclmul", crc32c_interleaved<true>});
  }
#endif
  return all;
}

}  // namespace zinf::engine
