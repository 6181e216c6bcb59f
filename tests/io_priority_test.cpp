// raise_io_thread_priority: one real-time priority above the process's under SCHED_RR, nothing
// under the default policy; keep_realtime_for_io_only: compute off real time, I/O threads back on it.
#include <catch2/catch.hpp>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/io/io_priority.hpp"
#include "skip.hpp"

using zinf::engine::raise_io_thread_priority;

namespace {

// The kernel's view of the calling thread (glibc's pthread_getschedparam may answer from a cache).
int current_priority(int& policy) {
  sched_param p{};
  policy = sched_getscheduler(0);
  sched_getparam(0, &p);
  return p.sched_priority;
}

}  // namespace

TEST_CASE("an I/O thread of a SCHED_OTHER process keeps its policy", "[io][priority]") {
  int before_policy = 0;
  current_priority(before_policy);
  if (before_policy != SCHED_OTHER) {
    ZINF_SKIP("this test process runs under a real-time policy");
  }
  std::thread([] {
    CHECK(raise_io_thread_priority() == 0);
    int policy = 0;
    CHECK(current_priority(policy) == 0);
    CHECK(policy == SCHED_OTHER);
  }).join();
}

namespace {
// Puts the process and this thread under SCHED_RR 10 and says what they were; false where that is
// not permitted (needs CAP_SYS_NICE).
bool enter_sched_rr_10(int& old_policy, sched_param& old) {
  sched_param rr{};
  rr.sched_priority = 10;
  pthread_getschedparam(pthread_self(), &old_policy, &old);
  if (sched_setscheduler(0, SCHED_RR, &rr) != 0) return false;
  pthread_setschedparam(pthread_self(), SCHED_RR, &rr);
  return true;
}
}  // namespace

TEST_CASE("an I/O thread of a SCHED_RR process goes one priority above it", "[io][priority]") {
  // Run in a child thread whose process-level priority stays as it is: the child sets SCHED_RR 10
  // for the whole process (sched_setscheduler(0) is the main thread's) only if allowed.
  int old_policy = 0;
  sched_param old{};
  if (!enter_sched_rr_10(old_policy, old))
    ZINF_SKIP("setting SCHED_RR is not permitted here (needs CAP_SYS_NICE)");
  int got = -1, policy = -1, seen = -1;
  std::thread([&] {  // inherits SCHED_RR 10
    got = raise_io_thread_priority();
    seen = current_priority(policy);
  }).join();
  // Back to what it was, before any CHECK can stop the test.
  sched_setscheduler(0, old_policy, &old);
  pthread_setschedparam(pthread_self(), old_policy, &old);
  CHECK(got == 11);
  CHECK(seen == 11);
  CHECK(policy == SCHED_RR);
}

TEST_CASE("under SCHED_RR a trainer keeps real time for its I/O threads only", "[io][priority]") {
  int old_policy = 0;
  sched_param old{};
  if (!enter_sched_rr_10(old_policy, old))
    ZINF_SKIP("setting SCHED_RR is not permitted here (needs CAP_SYS_NICE)");
  // A thread that exists before the call (as a BLAS pool's do) is moved too.
  std::atomic<bool> stop{false};
  std::atomic<int> earlier_policy{-1};
  std::thread earlier([&] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int p = -1;
    current_priority(p);
    earlier_policy = p;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int moved = zinf::engine::keep_realtime_for_io_only();
  int main_policy = -1;
  current_priority(main_policy);
  const int main_nice = getpriority(PRIO_PROCESS, id_t(gettid()));
  stop = true;
  earlier.join();
  int compute_policy = -1, io_policy = -1, io_seen = -1, io_got = -1;
  std::thread([&] { current_priority(compute_policy); }).join();  // a thread started later: compute
  std::thread([&] {                                                 // an I/O thread started later
    io_got = raise_io_thread_priority();
    io_seen = current_priority(io_policy);
  }).join();
  zinf::engine::restore_realtime_compute();
  int restored_policy = -1;
  current_priority(restored_policy);
  sched_setscheduler(0, old_policy, &old);
  pthread_setschedparam(pthread_self(), old_policy, &old);
  CHECK(moved >= 2);
  CHECK(main_policy == SCHED_OTHER);
  CHECK(main_nice < 0);
  CHECK(earlier_policy == SCHED_OTHER);
  CHECK(compute_policy == SCHED_OTHER);
  CHECK(io_got == 11);
  CHECK(io_seen == 11);
  CHECK(io_policy == SCHED_RR);
  CHECK(restored_policy == SCHED_RR);
}

TEST_CASE("keeping real time for I/O only does nothing to a SCHED_OTHER process", "[io][priority]") {
  int policy = 0;
  current_priority(policy);
  if (policy != SCHED_OTHER) {
    ZINF_SKIP("this test process runs under a real-time policy");
  }
  CHECK(zinf::engine::keep_realtime_for_io_only() == 0);
  std::thread([] { CHECK(raise_io_thread_priority() == 0); }).join();
}
