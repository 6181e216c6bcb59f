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

// What a run's plan needs of this machine's RAM, checked before anything is allocated: each of the
// `ranks_on_node` processes holds its host tier and, when the device is an arena in host memory
// (the CPU backend), its device arena, plus kProcessOverhead. Throws std::runtime_error with the
// figures and what to change when that exceeds `available` (bytes); `available` <= 0 skips it.
inline constexpr double kProcessOverhead = 512.0 * (1 << 20);  // libraries, corpus, BLAS buffers: gpt-tiny peaks at 285 MB
void check_plan_fits_ram(const core::PerTier& per_rank_peak, bool device_in_host_memory, int ranks_on_node, double available);

// The features recorded: SIMD levels, FMA, F16C, CRC32C, AVX-512 BF16/FP16 and AMX, as
// /proc/cpuinfo names them.
const std::vector<std::string>& recorded_cpu_flags();

}  // namespace zinf::engine
