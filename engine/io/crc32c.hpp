// CRC32C (Castagnoli): the checksum of the NVMe store's swap-file pages and of checkpoint files.
// Several implementations give the same value: a portable table-driven one, the SSE4.2 crc32
// instruction on one stream, and three interleaved crc32 streams whose partial checksums are joined
// by a shift (a carry-less multiply with PCLMULQDQ, else a table-driven zero-extension operator).
// crc32c() takes the fastest this CPU supports, picked once at run time. Stateless and thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zinf::engine {

// CRC32C of `length` bytes at `data`; pass the previous result as `crc` to continue over pieces.
uint32_t crc32c(const void* data, size_t length, uint32_t crc = 0);
// The table-driven path crc32c falls back to without SSE4.2; tests hold the fast ones to it.
uint32_t crc32c_portable(const void* data, size_t length, uint32_t crc = 0);
// Which path crc32c takes on this CPU: "sse4.2x3+pclmul", "sse4.2x3" (no PCLMULQDQ), "sse4.2" or
// "portable".
const char* crc32c_implementation();

// One implementation, by the name crc32c_implementation() gives it.
struct Crc32cImplementation {
  const char* name;
  uint32_t (*checksum)(const void* data, size_t length, uint32_t crc);
};
// Every implementation this CPU can run, the portable one first and the one crc32c takes last
// (tests and benchmarks compare them).
std::vector<Crc32cImplementation> crc32c_implementations();

}  // namespace zinf::engine
