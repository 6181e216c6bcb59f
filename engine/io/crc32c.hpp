// CRC32C (Castagnoli): the checksum of the NVMe store's swap-file pages and of checkpoint files.
// Hardware-accelerated where SSE4.2 is available, table-driven elsewhere; both give the same value.
// Stateless and thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zinf::engine {

// CRC32C of `length` bytes at `data`; pass the previous result as `crc` to continue over pieces.
uint32_t crc32c(const void* data, size_t length, uint32_t crc = 0);
// The table-driven path crc32c falls back to without SSE4.2; tests hold the fast one to it.
uint32_t crc32c_portable(const void* data, size_t length, uint32_t crc = 0);
// Which path crc32c takes on this CPU: "sse4.2" or "portable".
const char* crc32c_implementation();

}  // namespace zinf::engine
