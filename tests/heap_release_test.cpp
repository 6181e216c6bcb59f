// release_freed_memory_promptly: on glibc's malloc (this test program does not link tcmalloc;
// `zinf` does, and cli_planned_measured runs that path), large buffers freed after it leave the
// process at once, where glibc's adaptive threshold keeps them in its heap (40 MiB of the pattern
// below, measured without it); ZINF_HEAP_RELEASE=0 leaves the allocator alone.
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "engine/machine_info.hpp"
#include "engine/memory/heap_release.hpp"
#include "skip.hpp"

using namespace zinf;

namespace {

// RSS growth left behind by the pattern glibc's adaptive threshold keeps: a 24 MiB buffer (mapped
// on its own, and its free raises the threshold), then a 16 MiB one, now served from the heap and
// freed below a small allocation that stays (so no trim at the top returns it). Without prompt
// release this leaves 40 MiB behind after four rounds.
double rss_left_after_churn() {
  const double before = engine::current_rss();
  std::vector<std::unique_ptr<char[]>> pins;
  for (int round = 0; round < 4; ++round) {
    auto big = std::make_unique<char[]>(24 << 20);
    std::memset(big.get(), 1, 24 << 20);
    big.reset();
    auto mid = std::make_unique<char[]>(16 << 20);
    std::memset(mid.get(), 1, 16 << 20);
    pins.push_back(std::make_unique<char[]>(4096));
    mid.reset();
  }
  return engine::current_rss() - before;
}

}  // namespace

TEST_CASE("prompt release: freed buffers leave the process", "[heap]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  ZINF_SKIP("a sanitizer's allocator keeps freed memory in quarantine: RSS cannot show the release");
#else
  const auto off = engine::release_freed_memory_promptly("0");
  CHECK_FALSE(off.prompt);
  CHECK_THAT(engine::describe(off), Catch::Matchers::Contains("ZINF_HEAP_RELEASE=0"));
  const auto h = engine::release_freed_memory_promptly(nullptr);
  REQUIRE(h.allocator == "glibc malloc");
  REQUIRE(h.prompt);
  CHECK_THAT(engine::describe(h), Catch::Matchers::Contains("1 MiB"));
  CHECK(rss_left_after_churn() < 4.0 * (1 << 20));
#endif
}
