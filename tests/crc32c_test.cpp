// CRC32C (engine/io/crc32c.hpp): the standard check values, every implementation this CPU runs
// (portable, one crc32 stream, three interleaved streams joined by a table or a carry-less
// multiply) held to the portable one at every length and alignment, and a checksum continued over
// pieces. Also run on emulated CPUs by tests/emulated_cpu.sh, where fewer implementations run.
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

TEST_CASE("crc32c: every implementation gives the published check values") {
  // RFC 3720 (iSCSI), appendix B.4: 32 bytes of zeros, of ones, ascending and descending.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[size_t(i)] = static_cast<unsigned char>(i), down[size_t(i)] = static_cast<unsigned char>(31 - i);
  const std::string check = "123456789";
  const auto all = crc32c_implementations();
  REQUIRE(std::string(all.front().name) == "portable");
  CHECK(std::string(all.back().name) == crc32c_implementation());
  for (const auto& impl : all) {
    INFO(impl.name);
    CHECK(impl.checksum(check.data(), check.size(), 0) == 0xE3069283u);
    CHECK(impl.checksum(zeros.data(), 32, 0) == 0x8A9136AAu);
    CHECK(impl.checksum(ones.data(), 32, 0) == 0x62A8AB43u);
    CHECK(impl.checksum(up.data(), 32, 0) == 0x46DD794Eu);
    CHECK(impl.checksum(down.data(), 32, 0) == 0x113FDB5Cu);
    CHECK(impl.checksum(nullptr, 0, 0x5a5a5a5au) == 0x5a5a5a5au);
  }
}

TEST_CASE("crc32c: every implementation equals the portable one at lengths 0..4100 and beyond, at any alignment") {
  std::mt19937 rng(13);
  std::vector<unsigned char> data(3 * 4096 * 4 + 64);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 4100; ++n) lengths.push_back(n);
  // Each stream length of the interleaved paths, once, twice and once more with a tail.
  for (size_t n : {size_t(3 * 64), size_t(3 * 256), size_t(3 * 1360), size_t(3 * 4096), size_t(2 * 3 * 4096 + 3 * 1360 + 17),
                   size_t(4 * 3 * 4096), size_t(65536 - 1), size_t(12345)})
    lengths.push_back(std::min(n, data.size() - 16));
  std::uniform_int_distribution<size_t> align(0, 15);
  std::uniform_int_distribution<uint32_t> seed;
  for (const auto& impl : crc32c_implementations()) {
    size_t mismatches = 0, first_bad = 0;
    for (size_t n : lengths) {
      const size_t offset = align(rng);
      const uint32_t start = seed(rng);
      if (impl.checksum(data.data() + offset, n, start) != crc32c_portable(data.data() + offset, n, start) && mismatches++ == 0)
        first_bad = n;
    }
    INFO(impl.name << ": first mismatch at length " << first_bad);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("crc32c: continuing over pieces gives the checksum of the whole") {
  std::mt19937 rng(11);
  std::vector<unsigned char> data(40000);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (const auto& impl : crc32c_implementations()) {
    const uint32_t whole = impl.checksum(data.data(), data.size(), 0);
    CHECK(whole == crc32c_portable(data.data(), data.size()));
    for (size_t cut : {size_t(0), size_t(1), size_t(4096), size_t(12289), size_t(39999), size_t(40000)}) {
      INFO(impl.name << " cut at " << cut);
      CHECK(impl.checksum(data.data() + cut, data.size() - cut, impl.checksum(data.data(), cut, 0)) == whole);
    }
  }
  CHECK(crc32c(data.data(), data.size()) != crc32c(data.data(), data.size() - 1));
}
