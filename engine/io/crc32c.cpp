#include "engine/io/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zinf::engine {

namespace {

uint32_t crc32c_table_entry(uint32_t i) {
  uint32_t c = i;
  for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
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

bool crc32c_hardware() {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  return sse42;
#else
  return false;
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n, uint32_t crc) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t length, uint32_t crc) {
  auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (crc32c_hardware()) return crc32c_sse42(p, length, crc);
#endif
  return crc32c_table(p, length, crc);
}

uint32_t crc32c_portable(const void* data, size_t length, uint32_t crc) {
  return crc32c_table(static_cast<const unsigned char*>(data), length, crc);
}

const char* crc32c_implementation() { return crc32c_hardware() ? "sse4.2" : "portable"; }

}  // namespace zinf::engine
