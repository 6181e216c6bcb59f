// What machine this process runs on, as a hwprofile records it (core::MachineRecord): the CPU's
// model and the features zinf's CPU paths depend on, the cores it may use, RAM, and the disk under
// a directory. Read from /proc and /sys on Linux; stateless and thread-safe.
#pragma once
#include <string>

#include "core/hwprofile.hpp"
#include "core/program.hpp"

namespace zinf::engine {

// `disk_dir`: the NVMe directory whose device and file system to record ("" leaves disk empty;
// a directory that does not exist is looked up through its nearest existing parent).
core::MachineRecord this_machine(const std::string& disk_dir);

// Bytes the kernel says can be allocated without swapping (MemAvailable in /proc/meminfo); 0 when
// it cannot be read.
double available_memory();

// The cores this process may run on: its affinity mask and its cgroup's CPU quota, rounded down
// (engine/cpu_threads.hpp).
int usable_cores();

// What a run's plan needs of this machine's RAM, checked before anything is allocated: each of the
// `ranks_on_node` processes holds its host tier and, when the device is an arena in host memory
// (the CPU backend), its device arena, plus kProcessOverhead. Throws core::PlanError (the run does
// not fit: `zinf train` exits 3) with the figures and what to change when that exceeds `available`
// (bytes); `available` <= 0 skips it.
inline constexpr double kProcessOverhead = 512.0 * (1 << 20);  // libraries, corpus, BLAS buffers: gpt-tiny peaks at 285 MB
void check_plan_fits_ram(const core::PerTier& per_rank_peak, bool device_in_host_memory, int ranks_on_node, double available);

// This process's peak resident set size in bytes (getrusage).
double peak_rss();
// One phase's peak RSS (a checkpoint's save): reset_peak_rss() starts the kernel's high-water mark
// (VmHWM) again from the current RSS, through /proc/self/clear_refs, and returns false where that
// is refused; peak_rss_since_reset() reads VmHWM from /proc/self/status (0 when unreadable).
bool reset_peak_rss();
double peak_rss_since_reset();
// This process's resident set size now (VmRSS of /proc/self/status; 0 when unreadable).
double current_rss();
// The RAM a plan counts per rank: the host tier, the device arena when it is in host memory (the
// CPU backend), and kProcessOverhead.
double planned_ram(const core::PerTier& per_rank_peak, bool device_in_host_memory);

// The planned and the measured memory of a run side by side, per rank: the plan's device and host
// peaks, the device arena's measured peak (-1: no arena) and the process's peak RSS against the
// plan's RAM (device arena on the CPU backend + host tier + kProcessOverhead). With the RSS the
// process held before the run built its homes (`rss_before_homes`, -1: not known), also the run's
// own RAM, peak RSS less that, against the plan's host (+ device) peak without the overhead: the
// Program's bytes measured, not bounded. `over` is set when a measured figure exceeds its planned
// one by more than 10 %.
struct MemoryComparison {
  std::string text;
  bool over = false;
};
MemoryComparison compare_memory(const core::PerTier& planned_peak, bool device_in_host_memory, double arena_peak, double rss,
                                double rss_before_homes = -1);

// The features recorded: SIMD levels, FMA, F16C, CRC32C, AVX-512 BF16/FP16 and AMX, as
// /proc/cpuinfo names them.
const std::vector<std::string>& recorded_cpu_flags();

}  // namespace zinf::engine
