// PinnedPool: loans are distinct, aligned and returned; concurrent lanes never share a buffer;
// a too-low memlock limit is refused up front with the fix; checkout/return enter no system call.
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>
#include <thread>
#include <vector>

#include "engine/memory/pinned_pool.hpp"

using namespace zinf::engine;

TEST_CASE("buffers are distinct, aligned, and come back") {
  PinnedPool pool({4, 100000});
  CHECK(pool.buffer_size() == 102400);
  CHECK(std::string(pool.memory_kind()) == "mlock");
  std::vector<PinnedBuffer> out;
  std::set<std::byte*> seen;
  for (int i = 0; i < 4; ++i) {
    out.push_back(pool.try_acquire());
    REQUIRE(out.back());
    CHECK(reinterpret_cast<uintptr_t>(out.back().data()) % 4096 == 0);
    seen.insert(out.back().data());
  }
  CHECK(seen.size() == 4);
  CHECK_FALSE(pool.try_acquire());
  CHECK(pool.available() == 0);
  out.pop_back();
  CHECK(pool.available() == 1);
  PinnedBuffer again = pool.try_acquire();
  CHECK(again);
  PinnedBuffer moved = std::move(again);
  CHECK(moved);
  CHECK_FALSE(again);
  auto regions = pool.regions();
  REQUIRE(regions.size() == 1);
  CHECK(regions[0].iov_len == 4 * 102400);
}

TEST_CASE("concurrent lanes never hold the same buffer") {
  PinnedPool pool({3, 4096});
  std::vector<std::atomic<int>> owner(3);
  for (auto& o : owner) o = -1;
  std::atomic<int> clashes{0};
  auto lane = [&](int me) {
    for (int i = 0; i < 100000; ++i) {
      PinnedBuffer b = (i % 2) ? pool.acquire() : pool.try_acquire();
      if (!b) continue;
      if (owner[b.index()].exchange(me) != -1) ++clashes;
      b.data()[0] = std::byte(me);
      if (owner[b.index()].exchange(-1) != me) ++clashes;
    }
  };
  std::vector<std::thread> lanes;
  for (int t = 0; t < 4; ++t) lanes.emplace_back(lane, t);
  for (auto& t : lanes) t.join();
  CHECK(clashes == 0);
  CHECK(pool.available() == 3);
}

TEST_CASE("acquire waits for a buffer to come back") {
  PinnedPool pool({1, 4096});
  PinnedBuffer held = pool.acquire();
  std::atomic<bool> got{false};
  std::thread lane([&] {
    PinnedBuffer b = pool.acquire();
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(got);
  held.reset();
  lane.join();
  CHECK(got);
}

TEST_CASE("a memlock limit too low is refused up front, with the limit and the fix") {
  MlockHostMemory limited([] { return MemlockLimits{8 << 20, false}; });
  try {
    PinnedPool pool({4, 4 << 20}, limited);
    FAIL("expected the pool to refuse");
  } catch (const std::runtime_error& e) {
    std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("8388608 bytes") && Catch::Contains("16777216 bytes") && Catch::Contains("ulimit -l"));
  }
  MlockHostMemory privileged([] { return MemlockLimits{8 << 20, true}; });
  CHECK_NOTHROW(PinnedPool({4, 4 << 20}, privileged));
}

// Strict seccomp lets a process only read, write and exit: any other system call kills it. A
// child that survives a million checkouts and returns under it proves the path stays in user space.
TEST_CASE("checkout and return make no system call") {
  PinnedPool pool({4, 4096});
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) syscall(SYS_exit, 2);
    for (int i = 0; i < 1000000; ++i) {
      PinnedBuffer a = pool.try_acquire();
      PinnedBuffer b = pool.acquire();
      if (!a || !b) syscall(SYS_exit, 3);
    }
    syscall(SYS_exit, 0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child status " << status);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
