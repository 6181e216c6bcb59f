#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/memory/staging_cache.hpp"

using zinf::engine::Staging;
using zinf::engine::StagingCache;

TEST_CASE("staging sizes round to classes that hold whole pages", "[staging]") {
  CHECK(StagingCache::size_class(1) == 4096);
  CHECK(StagingCache::size_class(4096) == 4096);
  CHECK(StagingCache::size_class(4097) == 8192);
  CHECK(StagingCache::size_class(300000) == 512 * 1024);
  CHECK(StagingCache::size_class(2u << 20) == (2u << 20));
  CHECK(StagingCache::size_class((2u << 20) + 1) == (4u << 20));
  CHECK(StagingCache::size_class(24'000'000) == 12 * (2u << 20));
  for (size_t b : {1ul, 5000ul, 70000ul, 3ul << 20, 9'000'001ul}) {
    CHECK(StagingCache::size_class(b) >= b);
    CHECK(StagingCache::size_class(b) % 4096 == 0);
  }
}

TEST_CASE("a released block is handed out again, aligned, and a repeated pattern maps nothing new", "[staging]") {
  StagingCache cache;
  void* a = cache.allocate(24'000'000);
  void* b = cache.allocate(100'000);
  CHECK(reinterpret_cast<uintptr_t>(a) % (2u << 20) == 0);
  CHECK(reinterpret_cast<uintptr_t>(b) % 4096 == 0);
  std::memset(a, 7, 24'000'000);
  cache.release(a, 24'000'000);
  cache.release(b, 100'000);
  const auto before = cache.stats();
  CHECK(before.in_use_bytes == 0);
  for (int step = 0; step < 5; ++step) {  // the same sizes as a training step asks for each time
    void* x = cache.allocate(24'000'000);
    void* y = cache.allocate(100'000);
    CHECK(x == a);
    cache.release(y, 100'000);
    cache.release(x, 24'000'000);
  }
  CHECK(cache.stats().maps == before.maps);
  CHECK(cache.stats().mapped_bytes == before.mapped_bytes);
}

TEST_CASE("small blocks are carved from one slab and trim returns only whole free mappings", "[staging]") {
  StagingCache cache;
  std::vector<void*> held;
  for (int i = 0; i < 16; ++i) held.push_back(cache.allocate(100'000));  // 16 x 128 KiB = one 2 MiB slab
  CHECK(cache.stats().maps == 1);
  for (size_t i = 0; i < held.size(); ++i)
    for (size_t j = i + 1; j < held.size(); ++j) CHECK(held[i] != held[j]);
  cache.release(held.back(), 100'000);
  held.pop_back();
  cache.trim();
  CHECK(cache.stats().mapped_bytes == (2u << 20));  // a block is still out: the slab stays
  for (void* p : held) cache.release(p, 100'000);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 0);
}

TEST_CASE("large blocks of different sizes share memory: a freed range serves other sizes, merged", "[staging]") {
  StagingCache cache;
  const size_t MiB = 1u << 20;
  std::vector<std::byte*> quarters;
  for (int i = 0; i < 4; ++i) quarters.push_back(static_cast<std::byte*>(cache.allocate(8 * MiB)));
  for (size_t i = 0; i + 1 < quarters.size(); ++i) CHECK(quarters[i + 1] >= quarters[i] + 8 * MiB);  // disjoint
  const auto first = cache.stats();
  for (std::byte* q : quarters) cache.release(q, 8 * MiB);
  void* whole = cache.allocate(40 * MiB);  // the four freed ranges merged, and the mapping's rest
  CHECK(whole == quarters[0]);
  std::vector<std::pair<void*, size_t>> mixed{{cache.allocate(6 * MiB), 6 * MiB}, {cache.allocate(12 * MiB), 12 * MiB}};
  cache.release(whole, 40 * MiB);
  for (size_t b : {10 * MiB, 4 * MiB, 20 * MiB}) mixed.push_back({cache.allocate(b), b});
  CHECK(cache.stats().maps == first.maps);  // 58 MiB, then 52 MiB in use: one 64 MiB mapping serves both
  CHECK(cache.stats().mapped_bytes == first.mapped_bytes);
  std::sort(mixed.begin(), mixed.end());
  for (size_t i = 0; i + 1 < mixed.size(); ++i)
    CHECK(static_cast<std::byte*>(mixed[i + 1].first) >= static_cast<std::byte*>(mixed[i].first) + mixed[i].second);
  void* beyond = cache.allocate(16 * MiB);  // 68 MiB in use: more than one mapping holds
  CHECK(cache.stats().maps == first.maps + 1);
  cache.release(beyond, 16 * MiB);
  for (auto [p, b] : mixed) cache.release(p, b);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 0);
}

TEST_CASE("staging vectors from several threads get disjoint memory", "[staging]") {
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &bad] {
      for (int i = 0; i < 200; ++i) {
        Staging<float> v(size_t(1000 + 37 * i), float(t));
        for (float x : v)
          if (x != float(t)) ++bad[size_t(t)];
      }
    });
  for (auto& th : threads) th.join();
  for (int b : bad) CHECK(b == 0);
}
