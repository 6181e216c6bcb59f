// I/O threads above compute under a real-time policy. A process started with `chrt -r N` (as the
// benchmarks are, on a shared machine) runs every thread at SCHED_RR priority N: then a thread that
// wakes to reap NVMe completions and submit the next blocks waits for a compute or Adam thread's
// whole round-robin slice (100 ms) when they hold every core, and the disk idles meanwhile. The
// NVMe store's completion threads and the Executor's NVMe lane workers call
// raise_io_thread_priority() as they start: under SCHED_RR or SCHED_FIFO the calling thread goes
// one priority above the process's; under any other policy nothing changes. They sleep on the disk
// most of the time, so compute keeps the cores.
#pragma once

namespace zinf::engine {

// Returns the calling thread's real-time priority after the call, or 0 when its policy is not
// real-time (nothing done) or the kernel refused the change (the thread keeps its priority).
int raise_io_thread_priority();

}  // namespace zinf::engine
