#include "engine/io/io_priority.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace zinf::engine {

int raise_io_thread_priority() {
  int policy = 0;
  sched_param param{};
  if (pthread_getschedparam(pthread_self(), &policy, &param) != 0) return 0;
  if (policy != SCHED_RR && policy != SCHED_FIFO) return 0;
  // One above the process's priority: the main thread's, which every other thread inherited.
  sched_param process{};
  if (sched_getparam(0, &process) != 0) process = param;
  const int want = std::min(sched_get_priority_max(policy), process.sched_priority + 1);
  if (want <= param.sched_priority) return param.sched_priority;
  sched_param raised{};
  raised.sched_priority = want;
  if (pthread_setschedparam(pthread_self(), policy, &raised) != 0) return 0;
  return want;
}

}  // namespace zinf::engine
