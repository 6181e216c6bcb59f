// Names the calling thread (what `top -H`, `ps -L`, perf and experiments/memory_wall/thread_cpu.py
// show), so that a step's CPU time can be told apart by what each thread does: the Executor's lane
// workers ("zinf compute", "zinf nvme_read", ...), CPU Adam's workers ("zinf adam") and the NVMe
// store's completion threads ("zinf io reap"). Threads a library starts (OpenBLAS's workers) keep
// the name of the thread that loaded it, the process's ("zinf"). Linux takes at most 15 bytes.
#pragma once

#include <pthread.h>

#include <string>

namespace zinf::engine {

inline void name_this_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());  // best effort: a name changes nothing else
}

}  // namespace zinf::engine
