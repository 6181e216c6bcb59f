#include "engine/io/io_priority.hpp"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace zinf::engine {

namespace {

// The real-time policy and priority the process had when keep_realtime_for_io_only() moved it off
// them (policy -1: it did not).
std::atomic<int> g_policy{-1};
std::atomic<int> g_priority{0};

std::vector<int> threads_of_this_process() {
  std::vector<int> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') tids.push_back(std::atoi(e->d_name));
    closedir(d);
  }
  return tids;
}

}  // namespace

int raise_io_thread_priority() {
  // The kernel's view of this thread (0: the calling thread): glibc's pthread_getschedparam may
  // answer from a cache that sched_setscheduler on a thread id does not update.
  const int current = sched_getscheduler(0);
  sched_param param{};
  if (current < 0 || sched_getparam(0, &param) != 0) return 0;
  const bool realtime = current == SCHED_RR || current == SCHED_FIFO;
  int policy = current;
  int base = 0;
  if (const int recorded = g_policy.load(); recorded >= 0) {
    // keep_realtime_for_io_only() moved the process off real time: back to it, for this thread.
    policy = recorded;
    base = g_priority.load();
  } else {
    if (!realtime) return 0;
    // One above the process's priority: the main thread's, which every other thread inherited.
    sched_param process{};
    base = sched_getparam(getpid(), &process) == 0 ? process.sched_priority : param.sched_priority;
  }
  const int want = std::min(sched_get_priority_max(policy), base + 1);
  if (realtime && current == policy && want <= param.sched_priority) return param.sched_priority;
  sched_param raised{};
  raised.sched_priority = want;
  if (pthread_setschedparam(pthread_self(), policy, &raised) != 0) return 0;
  return want;
}

int keep_realtime_for_io_only() {
  if (const char* keep = std::getenv("ZINF_REALTIME_COMPUTE"); keep && std::strcmp(keep, "1") == 0) return 0;
  const int policy = sched_getscheduler(0);
  if (policy != SCHED_RR && policy != SCHED_FIFO) return 0;
  sched_param process{};
  if (sched_getparam(0, &process) != 0) return 0;
  g_priority.store(process.sched_priority);
  g_policy.store(policy);
  int moved = 0;
  const sched_param normal{};
  for (int tid : threads_of_this_process()) {
    if (sched_setscheduler(tid, SCHED_OTHER, &normal) != 0) continue;
    ++moved;
    // The most weight against other processes the kernel allows, down to kComputeNice.
    for (int nice = kComputeNice; nice < 0 && setpriority(PRIO_PROCESS, id_t(tid), nice) != 0; ++nice) {
    }
  }
  return moved;
}

void restore_realtime_compute() {
  const int policy = g_policy.exchange(-1);
  if (policy < 0) return;
  sched_param rt{};
  rt.sched_priority = g_priority.load();
  for (int tid : threads_of_this_process()) {
    setpriority(PRIO_PROCESS, id_t(tid), 0);
    sched_setscheduler(tid, policy, &rt);
  }
}

}  // namespace zinf::engine
