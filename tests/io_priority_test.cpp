// raise_io_thread_priority: one real-time priority above the process's under SCHED_RR, nothing
// under the default policy.
#include <catch2/catch.hpp>
#include <pthread.h>
#include <sched.h>

#include <thread>

#include "engine/io/io_priority.hpp"

using zinf::engine::raise_io_thread_priority;

namespace {

int current_priority(int& policy) {
  sched_param p{};
  pthread_getschedparam(pthread_self(), &policy, &p);
  return p.sched_priority;
}

}  // namespace

TEST_CASE("an I/O thread of a SCHED_OTHER process keeps its policy", "[io][priority]") {
  int before_policy = 0;
  current_priority(before_policy);
  if (before_policy != SCHED_OTHER) {
    WARN("not run: this test process runs under a real-time policy");
    return;
  }
  std::thread([] {
    CHECK(raise_io_thread_priority() == 0);
    int policy = 0;
    CHECK(current_priority(policy) == 0);
    CHECK(policy == SCHED_OTHER);
  }).join();
}

TEST_CASE("an I/O thread of a SCHED_RR process goes one priority above it", "[io][priority]") {
  // Run in a child thread whose process-level priority stays as it is: the child sets SCHED_RR 10
  // for the whole process (sched_setscheduler(0) is the main thread's) only if allowed.
  sched_param rr{};
  rr.sched_priority = 10;
  int old_policy = 0;
  sched_param old{};
  pthread_getschedparam(pthread_self(), &old_policy, &old);
  if (sched_setscheduler(0, SCHED_RR, &rr) != 0) {
    WARN("not run: setting SCHED_RR is not permitted here (needs CAP_SYS_NICE)");
    return;
  }
  pthread_setschedparam(pthread_self(), SCHED_RR, &rr);
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
