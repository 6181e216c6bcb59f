// I/O threads above compute under a real-time policy. A process started with `chrt -r N` (as the
// benchmarks are, on a shared machine) runs every thread at SCHED_RR priority N: then a thread that
// wakes to reap NVMe completions and submit the next blocks waits for a compute or Adam thread's
// whole round-robin slice (100 ms) when they hold every core, and the disk idles meanwhile. The
// NVMe store's completion threads and the Executor's NVMe lane workers call
// raise_io_thread_priority() as they start: under SCHED_RR or SCHED_FIFO the calling thread goes
// one priority above the process's; under any other policy nothing changes. They sleep on the disk
// most of the time, so compute keeps the cores.
//
// That is not enough: the kernel finishes block I/O partly in its own per-CPU workers, which run
// under SCHED_OTHER, and a real-time thread that computes on a CPU starves them there whatever the
// submitting thread's priority. Measured with fio (1 MiB, queue depth 32, io_uring, O_DIRECT) on
// the 2-vCPU development machine: reads fall from about 0.9 GB/s to 0.1-0.15 GB/s while one
// SCHED_RR thread spins, even with fio one real-time priority above it; with two spinners at
// SCHED_OTHER nice -10 they run at full rate. So a trainer keeps real time for its I/O threads only
// (keep_realtime_for_io_only): compute moves to SCHED_OTHER at nice -10, which still gets most of
// the cores against other processes' nice-0 threads.
#pragma once

namespace zinf::engine {

// Returns the calling thread's real-time priority after the call, or 0 when its policy is not
// real-time (nothing done) or the kernel refused the change (the thread keeps its priority). After
// keep_realtime_for_io_only() it uses the priority the process had then.
int raise_io_thread_priority();

// When the process runs under SCHED_RR or SCHED_FIFO: records the policy and priority, and moves
// every thread of the process to SCHED_OTHER at nice kComputeNice (or the lowest nice the kernel
// allows), so threads created later start there too; I/O threads then go back to real time with
// raise_io_thread_priority(). Returns how many threads it moved (0: not real-time, or the
// environment sets ZINF_REALTIME_COMPUTE=1 to keep the old behaviour for comparison).
int keep_realtime_for_io_only();
// Undoes keep_realtime_for_io_only() for every thread of the process (tests).
void restore_realtime_compute();

inline constexpr int kComputeNice = -10;

}  // namespace zinf::engine
