#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/memory/staging_cache.hpp"

using zinf::engine::Staging;
using zinf::engine::StagingCache;

TEST_CASE("staging sizes round to classes of whole pages, a little over what is asked", "[staging]") {
  const size_t KiB = 1u << 10, MiB = 1u << 20;
  CHECK(StagingCache::size_class(1) == 4 * KiB);
  CHECK(StagingCache::size_class(4 * KiB) == 4 * KiB);
  CHECK(StagingCache::size_class(4 * KiB + 1) == 8 * KiB);
  CHECK(StagingCache::size_class(20 * KiB + 1) == 24 * KiB);          // whole pages up to 32 KiB
  CHECK(StagingCache::size_class(100'000) == 104 * KiB);              // then eighths: 64 KiB + 5 x 8 KiB
  CHECK(StagingCache::size_class(300000) == 296 * KiB);               // over 256 KiB, 32nds: 37 x 8 KiB
  CHECK(StagingCache::size_class(MiB + 2 * KiB) == MiB + 32 * KiB);
  CHECK(StagingCache::size_class(2 * MiB) == 2 * MiB);
  CHECK(StagingCache::size_class(3 * MiB + 6 * KiB) == 3 * MiB + 64 * KiB);
  CHECK(StagingCache::size_class(24'000'000) == 46 * 512 * KiB);
  CHECK(StagingCache::size_class(100'000'000) == 48 * 2 * MiB);       // from 64 MiB, whole 2 MiB pages
  CHECK_THROWS_AS(StagingCache::size_class(SIZE_MAX), std::bad_alloc);  // rounding up would wrap
  for (size_t b = 1; b < 256 * MiB; b = b * 9 / 8 + 4093) {
    const size_t c = StagingCache::size_class(b);
    CHECK(c >= b);
    CHECK(c % (4 * KiB) == 0);
    CHECK(c - b < std::max(b / (b <= 256 * KiB ? 8 : 32), 4 * KiB));  // or under a page, below 32 KiB
    CHECK(StagingCache::size_class(c) == c);  // a class is its own class
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
  for (int i = 0; i < 16; ++i) held.push_back(cache.allocate(100'000));  // 16 x 104 KiB: one 2 MiB slab holds 19
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

TEST_CASE("blocks of 2 MiB and under share slabs whatever their class, and a slab goes when all its blocks are back", "[staging]") {
  StagingCache cache;
  const size_t KiB = 1u << 10, MiB = 1u << 20;
  // 1056 + 768 + 208 KiB = 2032 KiB: one slab (in powers of two, 2 MiB + 1 MiB + 256 KiB: three).
  auto* a = static_cast<std::byte*>(cache.allocate(MiB + 2 * KiB));
  auto* b = static_cast<std::byte*>(cache.allocate(768 * KiB));
  auto* c = static_cast<std::byte*>(cache.allocate(200 * KiB));
  CHECK(cache.stats().maps == 1);
  CHECK(cache.stats().mapped_bytes == 2 * MiB);
  CHECK(cache.stats().in_use_bytes == 2032 * KiB);
  CHECK(reinterpret_cast<uintptr_t>(a) % (2 * MiB) == 0);
  CHECK(b >= a + MiB + 32 * KiB);
  CHECK(c >= b + 768 * KiB);
  std::memset(a, 1, MiB + 2 * KiB);
  std::memset(b, 2, 768 * KiB);
  std::memset(c, 3, 200 * KiB);
  CHECK((a[MiB + 2 * KiB - 1] == std::byte{1} && b[0] == std::byte{2} && b[768 * KiB - 1] == std::byte{2}));
  // 16 KiB are left in the slab: a 12 KiB block takes them, a 20 KiB one needs a second slab.
  void* d = cache.allocate(12 * KiB);
  CHECK(cache.stats().maps == 1);
  void* e = cache.allocate(20 * KiB);
  CHECK(cache.stats().maps == 2);
  cache.release(a, MiB + 2 * KiB);
  CHECK(cache.allocate(MiB + 30 * KiB) == a);  // the same class: the free block again
  cache.release(a, MiB + 30 * KiB);
  cache.release(b, 768 * KiB);
  cache.release(c, 200 * KiB);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 4 * MiB);  // a 12 KiB block of the first slab is still out
  cache.release(d, 12 * KiB);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 2 * MiB);
  // What the trimmed slab held is not handed out again: a new block comes from the second slab.
  auto* f = static_cast<std::byte*>(cache.allocate(MiB + 2 * KiB));
  CHECK(f == static_cast<std::byte*>(e) + 20 * KiB);
  CHECK(cache.stats().maps == 2);
  std::memset(f, 4, MiB + 2 * KiB);
  cache.release(f, MiB + 2 * KiB);
  cache.release(e, 20 * KiB);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 0);
}

TEST_CASE("at the limit a carved block is cut from a larger free one, and slabs with nothing out are unmapped", "[staging]") {
  StagingCache cache;
  const size_t KiB = 1u << 10, MiB = 1u << 20;
  cache.add_budget(4 * MiB);
  // Phase one: two 1 MiB blocks fill a slab, a 1.5 MiB one takes a second.
  auto* a = static_cast<std::byte*>(cache.allocate(MiB));
  auto* b = static_cast<std::byte*>(cache.allocate(MiB));
  auto* c = static_cast<std::byte*>(cache.allocate(1536 * KiB));
  CHECK(cache.stats().maps == 2);
  std::memset(c, 5, 1536 * KiB);
  cache.release(a, MiB);
  cache.release(c, 1536 * KiB);
  // Phase two asks for 768 KiB blocks, which the second slab's 512 KiB remnant cannot hold: at the
  // 4 MiB limit the smallest larger free block is cut (a, then c; each tail a remnant of its slab)
  // rather than a third slab mapped, and c's tail takes the third.
  auto* d = static_cast<std::byte*>(cache.allocate(768 * KiB));
  auto* e = static_cast<std::byte*>(cache.allocate(768 * KiB));
  auto* f = static_cast<std::byte*>(cache.allocate(768 * KiB));
  CHECK(d == a);
  CHECK(e == c);
  CHECK(f == c + 768 * KiB);
  CHECK(c[768 * KiB] == std::byte{5});  // cut blocks keep their touched pages
  CHECK(cache.stats().maps == 2);
  CHECK(cache.stats().cut_to_size == 2);
  // Nothing free is large enough for a fourth: a slab is mapped, over the limit (b, d, e, f are out).
  auto* g = static_cast<std::byte*>(cache.allocate(768 * KiB));
  CHECK(cache.stats().maps == 3);
  CHECK(cache.stats().mapped_bytes == 6 * MiB);
  // Phase three: everything back but g; a large block over the limit unmaps the two empty slabs.
  for (auto [p, n] : {std::pair{b, MiB}, {d, 768 * KiB}, {e, 768 * KiB}, {f, 768 * KiB}}) cache.release(p, n);
  void* big = cache.allocate(3 * MiB);
  CHECK(cache.stats().mapped_bytes == 2 * MiB + 3 * MiB);  // g's slab and the new block
  CHECK(cache.stats().unmapped_for_limit == 4 * MiB);
  std::memset(g, 6, 768 * KiB);  // g's slab stayed
  cache.release(big, 3 * MiB);
  cache.release(g, 768 * KiB);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 0);
  cache.remove_budget(4 * MiB);
}

TEST_CASE("large blocks are reused by exact size, and a new size unmaps free blocks rather than map beyond the most in use", "[staging]") {
  StagingCache cache;
  const size_t MiB = 1u << 20;
  std::vector<std::byte*> quarters;
  for (int i = 0; i < 4; ++i) quarters.push_back(static_cast<std::byte*>(cache.allocate(8 * MiB)));
  for (std::byte* q : quarters) cache.release(q, 8 * MiB);
  CHECK(cache.stats().mapped_bytes == 32 * MiB);
  void* again = cache.allocate(8 * MiB);  // the same size: a free block, nothing mapped
  CHECK(std::find(quarters.begin(), quarters.end(), again) != quarters.end());
  CHECK(cache.stats().maps == 4);
  // No budget declared: the limit is the most in use at once (32 MiB so far, 48 MiB with this one).
  void* whole = cache.allocate(40 * MiB);
  CHECK(cache.stats().mapped_bytes == 48 * MiB);  // 8 in use + 40; the three free 8 MiB blocks went
  CHECK(cache.stats().unmapped_for_limit == 24 * MiB);
  cache.release(whole, 40 * MiB);
  cache.release(again, 8 * MiB);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 0);
}

TEST_CASE("at the limit a smaller large block is cut from a larger free one, not mapped afresh", "[staging]") {
  StagingCache cache;
  const size_t MiB = 1u << 20;
  cache.add_budget(40 * MiB);
  auto* big = static_cast<std::byte*>(cache.allocate(32 * MiB));
  std::memset(big, 7, 32 * MiB);
  cache.release(big, 32 * MiB);
  // Within the limit a new size is mapped: the free 32 MiB block stays for its own size.
  void* small = cache.allocate(6 * MiB);
  CHECK(small != big);
  CHECK(cache.stats().maps == 2);
  CHECK(cache.stats().cut_to_size == 0);
  // 38 MiB mapped: another 6 MiB would take it over 40, so the free 32 MiB block is cut to 6 MiB.
  auto* cut = static_cast<std::byte*>(cache.allocate(6 * MiB));
  CHECK(cut == big);
  CHECK(cut[6 * MiB - 1] == std::byte{7});  // the head kept its (touched) pages
  CHECK(cache.stats().maps == 2);
  CHECK(cache.stats().cut_to_size == 1);
  CHECK(cache.stats().mapped_bytes == 12 * MiB);
  CHECK(cache.stats().unmapped_for_limit == 26 * MiB);
  CHECK(cache.stats().in_use_bytes == 12 * MiB);
  // The cut block is a 6 MiB block from now on: given back and asked for again, it is reused as such.
  cache.release(cut, 6 * MiB);
  CHECK(cache.allocate(6 * MiB) == cut);
  cache.release(cut, 6 * MiB);
  cache.release(small, 6 * MiB);
  cache.trim();
  CHECK(cache.stats().mapped_bytes == 0);
  cache.remove_budget(40 * MiB);
}

// A step's buffers change size from phase to phase: forward holds many 6 MiB blocks and frees
// every other one, backward asks for 10 MiB ones, the optimizer for 14 MiB ones, and each phase's
// survivors are freed in another order than they came. Carving all sizes out of shared mappings left
// holes no later size fit (192 MiB mapped for 118 MiB in use at most; it grows with the number of
// distinct sizes); keeping every size's free blocks would map the sum of each size's most. With a
// declared budget at least the most in use, mapped never exceeds the budget, and the contents of
// the blocks in use survive the unmapping of free ones.
TEST_CASE("mixed sizes across phases stay within the declared budget, step after step", "[staging]") {
  StagingCache cache;
  const size_t MiB = 1u << 20;
  const uint64_t budget = 120 * MiB;
  cache.add_budget(budget);
  std::vector<std::pair<std::byte*, size_t>> held;
  uint64_t most_mapped = 0;
  const auto take = [&](size_t bytes, int tag) {
    auto* p = static_cast<std::byte*>(cache.allocate(bytes));
    std::memset(p, tag, bytes);
    held.push_back({p, bytes});
    most_mapped = std::max(most_mapped, cache.stats().mapped_bytes);
  };
  const auto give = [&](size_t i) {
    cache.release(held[i].first, held[i].second);
    held.erase(held.begin() + long(i));
  };
  bool intact = true;
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < 16; ++i) take(6 * MiB, 1);             // forward: 96 MiB
    for (size_t i = 0; i < held.size(); ++i) give(i);          // every other one: 48 MiB stay
    for (int i = 0; i < 7; ++i) take(10 * MiB, 2);             // backward: 118 MiB in use
    while (held.size() > 3) give(held.size() / 2);             // free from the middle
    for (int i = 0; i < 5; ++i) take(14 * MiB, 3);             // optimizer
    for (const auto& [p, b] : held)                            // every block in use kept its contents
      for (size_t k = 0; k < b; k += 4096) intact = intact && (p[k] == std::byte{1} || p[k] == std::byte{2} || p[k] == std::byte{3});
    while (!held.empty()) give(0);
  }
  CHECK(intact);
  CHECK(cache.stats().peak_in_use_bytes <= budget);
  CHECK(most_mapped <= budget);
  CHECK(cache.stats().unmapped_for_limit > 0);  // it did have to give free blocks back
  // Without the budget the limit is the most in use at once, and over budget mapped tracks what is in use.
  cache.remove_budget(budget);
  CHECK(cache.stats().budget_bytes == 0);
  std::vector<void*> big;
  for (int i = 0; i < 10; ++i) big.push_back(cache.allocate(18 * MiB));  // 180 MiB in use, over the old budget
  CHECK(cache.stats().mapped_bytes == 180 * MiB);  // the free 6, 10 and 14 MiB blocks went first
  for (void* p : big) cache.release(p, 18 * MiB);
  CHECK(cache.stats().in_use_bytes == 0);
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
