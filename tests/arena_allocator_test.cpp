// The CUDA backend's device-arena bookkeeping (engine/backend/cuda/cuda_device_arena.hpp), which is plain C++
// and runs without a GPU: first fit, alignment, merging of freed neighbours, and the over-budget
// error naming the bytes and the budget.
#include <catch2/catch.hpp>

#ifdef ZINF_HAVE_CUDA
#include "engine/backend/cuda/cuda_device_arena.hpp"

using zinf::engine::cuda::ArenaAllocator;
using zinf::engine::cuda::ArenaFull;
using Catch::Matchers::Contains;

TEST_CASE("arena allocator: aligned first-fit blocks, merged again when freed", "[arena]") {
  ArenaAllocator a(4096, 256);
  const uint64_t x = a.allocate(100, "x"), y = a.allocate(256, "y"), z = a.allocate(1000, "z");
  CHECK(x == 0);
  CHECK(y == 256);
  CHECK(z == 512);
  CHECK(a.in_use() == 256 + 256 + 1024);
  a.free(y);
  CHECK(a.allocate(200, "w") == 256);  // the hole is reused
  a.free(256);
  a.free(x);
  a.free(z);
  CHECK(a.in_use() == 0);
  CHECK(a.largest_free() == 4096);  // every neighbour merged back into one block
  CHECK(a.peak() == 1536);
  a.reset_peak();  // a step's peak starts from what is held now
  CHECK(a.peak() == 0);
  CHECK(a.allocate(4096, "all") == 0);
  CHECK(a.peak() == 4096);
}

TEST_CASE("arena allocator: going over the budget names the bytes and the budget", "[arena]") {
  ArenaAllocator a(1 << 20);
  a.allocate(600 << 10, "activations");
  REQUIRE_THROWS_AS(a.allocate(600 << 10, "gathered parameters h.0.mlp.c_fc"), ArenaFull);
  REQUIRE_THROWS_WITH(a.allocate(600 << 10, "gathered parameters h.0.mlp.c_fc"),
                      Contains("614400 bytes for gathered parameters h.0.mlp.c_fc") && Contains("budget is 1048576"));
  REQUIRE_THROWS_AS(a.free(12345), std::logic_error);
}

#endif
