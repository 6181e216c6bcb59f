// CRC32C (engine/io/crc32c.hpp): the standard check value, the dispatched path held to the
// portable one at every length and alignment, and a checksum continued over pieces. Also run on
// emulated CPUs by tests/emulated_cpu.sh.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "engine/io/crc32c.hpp"

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

TEST_CASE("crc32c: continuing over pieces gives the checksum of the whole") {
  std::mt19937 rng(11);
  std::vector<unsigned char> data(10000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(4096), size_t(9999), size_t(10000)}) {
    INFO("cut at " << cut);
    CHECK(crc32c(data.data() + cut, data.size() - cut, crc32c(data.data(), cut)) == whole);
    CHECK(crc32c_portable(data.data() + cut, data.size() - cut, crc32c_portable(data.data(), cut)) == whole);
  }
  CHECK(crc32c(data.data(), data.size()) != crc32c(data.data(), data.size() - 1));
}
