#include "engine/machine_info.hpp"

#include "core/errors.hpp"

#include <cblas.h>

#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/units.hpp"
#include "engine/build_info.hpp"
#include "engine/cpu_threads.hpp"

namespace zinf::engine {

namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// "model name" and "flags" of the first processor in /proc/cpuinfo.
void read_cpuinfo(core::MachineRecord& m) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line) && (m.cpu.empty() || flags.empty())) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "model name" && m.cpu.empty()) m.cpu = value;
    if (key == "flags" && flags.empty()) flags = value;
  }
  if (m.cpu.empty()) m.cpu = "unknown CPU";
  std::istringstream words(flags);
  for (std::string f; words >> f;)
    if (std::find(recorded_cpu_flags().begin(), recorded_cpu_flags().end(), f) != recorded_cpu_flags().end())
      m.cpu_flags.push_back(f);
  std::sort(m.cpu_flags.begin(), m.cpu_flags.end());
}

// A field of /proc/meminfo ("MemTotal:", "MemAvailable:") in bytes; 0 when absent.
double meminfo_bytes(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key) {
    if (key == field) {
      in >> kib;
      return kib * 1024.0;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

double mem_total() {
  const double total = meminfo_bytes("MemTotal:");
  return total > 0 ? total : double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
}

std::string fs_type(unsigned long magic) {
  switch (magic) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlayfs";
    case 0x2FC12FC1: return "zfs";
    default: {
      std::ostringstream s;
      s << "fs 0x" << std::hex << magic;
      return s.str();
    }
  }
}

// "vda (ext4)": the block device holding `dir` by its kernel name, and the file system type.
std::string disk_of(const std::string& dir) {
  std::filesystem::path p = dir;
  std::error_code ec;
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  if (p.empty()) p = ".";
  struct stat st {};
  struct statfs fs {};
  if (::stat(p.c_str(), &st) != 0 || ::statfs(p.c_str(), &fs) != 0) return "";
  std::string device = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  const auto link = std::filesystem::path("/sys/dev/block") / device;
  if (std::filesystem::exists(link, ec)) {
    auto target = std::filesystem::canonical(link, ec);
    if (!ec) device = target.filename().string();
  }
  return device + " (" + fs_type(static_cast<unsigned long>(fs.f_type)) + ")";
}

}  // namespace

double available_memory() { return meminfo_bytes("MemAvailable:"); }

void check_plan_fits_ram(const core::PerTier& peak, bool device_in_host_memory, int ranks_on_node, double available) {
  if (available <= 0) return;
  const double host = peak[size_t(core::Tier::Host)], device = peak[size_t(core::Tier::Device)];
  const double per_rank = host + (device_in_host_memory ? device : 0.0) + kProcessOverhead;
  const double needed = per_rank * std::max(1, ranks_on_node);
  if (needed <= available) return;
  throw core::PlanError(
      "this run needs " + core::format_bytes(needed) + " of RAM and the machine has " + core::format_bytes(available) +
      " available (MemAvailable): " + std::to_string(std::max(1, ranks_on_node)) + " rank(s) x (" +
      (device_in_host_memory ? "device arena " + core::format_bytes(device) + " + " : std::string()) + "host tier " +
      core::format_bytes(host) + " + " + core::format_bytes(kProcessOverhead) +
      " per process). Lower --device-memory or --host-memory so the plan offloads more, or free memory");
}

double peak_rss() {
  struct rusage u {};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return double(u.ru_maxrss) * 1024.0;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

namespace {

// A "Vm...:  1234 kB" line of /proc/self/status in bytes (0 when unreadable).
double status_bytes(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::atof(line.c_str() + field.size()) * 1024.0;
  return 0;
}

}  // namespace

double peak_rss_since_reset() { return status_bytes("VmHWM:"); }
double current_rss() { return status_bytes("VmRSS:"); }

double planned_ram(const core::PerTier& peak, bool device_in_host_memory) {
  return peak[size_t(core::Tier::Host)] + (device_in_host_memory ? peak[size_t(core::Tier::Device)] : 0.0) +
         kProcessOverhead;
}

MemoryComparison compare_memory(const core::PerTier& peak, bool device_in_host_memory, double arena_peak, double rss,
                                double rss_before_homes) {
  const double device = peak[size_t(core::Tier::Device)];
  const double ram = planned_ram(peak, device_in_host_memory);
  MemoryComparison c;
  c.text = "memory per rank, planned vs measured: device " + core::format_bytes(device) + " vs arena peak " +
           (arena_peak >= 0 ? core::format_bytes(arena_peak) : std::string("(none)")) + "; RAM " + core::format_bytes(ram) +
           " (" + (device_in_host_memory ? "device + " : "") + "host + " + core::format_bytes(kProcessOverhead) +
           " overhead) vs peak RSS " + core::format_bytes(rss);
  if (rss_before_homes > 0)
    c.text += "; the run's own RAM " + core::format_bytes(ram - kProcessOverhead) + " (" +
              (device_in_host_memory ? "device + " : "") + "host) vs " + core::format_bytes(rss - rss_before_homes) +
              " (peak RSS less the " + core::format_bytes(rss_before_homes) + " held before the homes were built)";
  std::string why;
  if (arena_peak > 1.1 * device) why += " the device arena held " + core::format_bytes(arena_peak) + ", the plan counts " + core::format_bytes(device) + ";";
  if (rss > 1.1 * ram) why += " the process peaked at " + core::format_bytes(rss) + " of RAM, the plan counts " + core::format_bytes(ram) + ";";
  if (!why.empty()) {
    c.over = true;
    why.pop_back();
    c.text += "\nwarning: measured memory is over the plan:" + why;
  }
  return c;
}

const std::vector<std::string>& recorded_cpu_flags() {
  static const std::vector<std::string> flags = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                                                 "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"};
  return flags;
}

core::MachineRecord this_machine(const std::string& disk_dir) {
  core::MachineRecord m;
  read_cpuinfo(m);
  m.cores = usable_cores();
  m.memory = mem_total();
  if (!disk_dir.empty()) m.disk = disk_of(disk_dir);
  m.blas = openblas_get_corename();
  m.blas_threads = openblas_get_num_threads();
  m.blas_threads_from = to_string(pinned_blas_threads().source);
  return m;
}

int usable_cores() { return usable_cores(this_process_cores()); }

}  // namespace zinf::engine
