// What machine this process runs on, as a hwprofile records it (core::MachineRecord): the CPU's
// model and the features zinf's CPU paths depend on, the cores it may use, RAM, and the disk under
// a directory. Read from /proc and /sys on Linux; stateless and thread-safe.
#pragma once
#include <string>

#include "core/hwprofile.hpp"

namespace zinf::engine {

// `disk_dir`: the NVMe directory whose device and file system to record ("" leaves disk empty;
// a directory that does not exist is looked up through its nearest existing parent).
core::MachineRecord this_machine(const std::string& disk_dir);

// The features recorded: SIMD levels, FMA, F16C, CRC32C, AVX-512 BF16/FP16 and AMX, as
// /proc/cpuinfo names them.
const std::vector<std::string>& recorded_cpu_flags();

}  // namespace zinf::engine
