#include "engine/cpu_threads.hpp"

#include <fmt/core.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace zinf::engine {

namespace {

// A whole decimal count (no sign, no other characters), as the kernel writes them.
std::optional<long long> parse_count(const std::string& word) {
  if (word.empty() || word.size() > 18 || !std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(word);
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::optional<CpuQuota> quota_of(long long quota, long long period, const std::string& file) {
  if (period <= 0) throw std::invalid_argument(file + ": a CPU period of " + std::to_string(period) + " microseconds");
  return CpuQuota{double(quota) / double(period), file};
}

// The parent of a cgroup directory, or "" at `root`.
std::string parent_within(const std::string& dir, const std::string& root) {
  if (dir.size() <= root.size()) return "";
  const auto slash = dir.find_last_of('/');
  if (slash == std::string::npos || slash < root.size()) return root;
  return dir.substr(0, std::max(slash, root.size()));
}

void keep_tighter(std::optional<CpuQuota>& best, const std::optional<CpuQuota>& q) {
  if (q && (!best || q->cores < best->cores)) best = q;
}

// Walks from `root + path` up to `root`, keeping the tightest quota `at` gives.
std::optional<CpuQuota> tightest_up(const std::string& root, std::string path,
                                    const std::function<std::optional<CpuQuota>(const std::string& dir)>& at) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  std::optional<CpuQuota> best;
  for (std::string dir = root + (path == "/" ? "" : path); !dir.empty(); dir = parent_within(dir, root)) {
    keep_tighter(best, at(dir));
    if (dir == root) break;
  }
  return best;
}

std::optional<std::string> read_whole(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::optional<CpuQuota> parse_cpu_max(const std::string& text, const std::string& file) {
  const auto w = words(text);
  if (w.size() != 2) throw std::invalid_argument(file + ": expected '<quota|max> <period>', read '" + text + "'");
  const auto period = parse_count(w[1]);
  if (!period) throw std::invalid_argument(file + ": the period '" + w[1] + "' is not a count of microseconds");
  if (w[0] == "max") return std::nullopt;
  const auto quota = parse_count(w[0]);
  if (!quota) throw std::invalid_argument(file + ": the quota '" + w[0] + "' is neither 'max' nor a count of microseconds");
  return quota_of(*quota, *period, file);
}

std::optional<CpuQuota> parse_cfs_quota(const std::string& quota_text, const std::string& period_text, const std::string& file) {
  const auto q = words(quota_text), p = words(period_text);
  if (q.size() != 1) throw std::invalid_argument(file + ": expected one number, read '" + quota_text + "'");
  if (q[0] == "-1") return std::nullopt;
  const auto quota = parse_count(q[0]);
  if (!quota) throw std::invalid_argument(file + ": the quota '" + q[0] + "' is neither -1 nor a count of microseconds");
  const auto period = p.size() == 1 ? parse_count(p[0]) : std::nullopt;
  if (!period) throw std::invalid_argument(file + ": its period (cpu.cfs_period_us) reads '" + period_text + "'");
  return quota_of(*quota, *period, file);
}

std::optional<CpuQuota> cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::string& cgroup_root,
                                         const FileReader& read) {
  std::istringstream lines(proc_self_cgroup);
  std::optional<CpuQuota> best;
  for (std::string line; std::getline(lines, line);) {
    // hierarchy-ID:controllers:path; v2's unified hierarchy is "0::path".
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      keep_tighter(best, tightest_up(cgroup_root, path, [&](const std::string& dir) -> std::optional<CpuQuota> {
                     const auto text = read(dir + "/cpu.max");
                     return text ? parse_cpu_max(*text, dir + "/cpu.max") : std::nullopt;
                   }));
      continue;
    }
    std::string list = "," + controllers + ",";
    if (list.find(",cpu,") == std::string::npos) continue;
    for (const std::string& mount : {cgroup_root + "/cpu,cpuacct", cgroup_root + "/cpu"}) {
      keep_tighter(best, tightest_up(mount, path, [&](const std::string& dir) -> std::optional<CpuQuota> {
                     const auto quota = read(dir + "/cpu.cfs_quota_us"), period = read(dir + "/cpu.cfs_period_us");
                     if (!quota) return std::nullopt;
                     return parse_cfs_quota(*quota, period.value_or(""), dir + "/cpu.cfs_quota_us");
                   }));
    }
  }
  return best;
}

int ranks_on_this_node(const EnvReader& env, std::string* source) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    const char* v = env(name);
    const auto n = v ? parse_count(v) : std::nullopt;
    if (n && *n >= 1) {
      if (source) *source = name;
      return int(std::min<long long>(*n, 1 << 20));
    }
  }
  if (source) source->clear();
  return 1;
}

int usable_cores(const CoreBudget& b) {
  int cores = std::max(1, b.affinity);
  if (b.quota) cores = std::min(cores, int(std::floor(b.quota->cores + 1e-9)));
  return std::max(1, cores);
}

bool shared_by_ranks(const CoreBudget& b) { return b.ranks_on_node > 1 && !(b.online > 0 && b.affinity < b.online); }

CoreBudget this_process_cores() {
  CoreBudget b;
  cpu_set_t set;
  b.affinity = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : int(std::max(1u, std::thread::hardware_concurrency()));
  b.online = int(std::max(0L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  if (const auto cgroup = read_whole("/proc/self/cgroup")) {
    // A quota file the kernel wrote in a form not understood here leaves the affinity alone to decide.
    try {
      b.quota = cgroup_cpu_quota(*cgroup, "/sys/fs/cgroup", read_whole);
    } catch (const std::invalid_argument&) {
      b.quota.reset();
    }
  }
  b.ranks_on_node = ranks_on_this_node([](const char* name) { return std::getenv(name); }, &b.ranks_source);
  return b;
}

namespace {

std::string plural(int n, const char* one, const char* many) { return std::to_string(n) + " " + (n == 1 ? one : many); }

// "2 usable cores (affinity), 1 rank on this node"
std::string default_reason(const CoreBudget& b) {
  const int cores = usable_cores(b);
  std::string why = plural(cores, "usable core", "usable cores");
  if (b.quota && int(std::floor(b.quota->cores + 1e-9)) < std::max(1, b.affinity))
    why += fmt::format(" (cgroup quota of {:g} cores in {}; affinity {})", b.quota->cores, b.quota->file, b.affinity);
  else
    why += " (affinity)";
  if (shared_by_ranks(b))
    why += ", shared by " + std::to_string(b.ranks_on_node) + " ranks on this node (" + b.ranks_source + ")";
  else if (b.ranks_on_node > 1)
    why += fmt::format(" of {} online, this rank's own (bound by the launcher); {} ranks on this node ({})", b.online,
                       b.ranks_on_node, b.ranks_source);
  else
    why += ", 1 rank on this node";
  return why;
}

}  // namespace

ThreadChoice choose_threads(std::optional<int> flag, const char* blas_threads_env, const CoreBudget& b) {
  ThreadChoice c;
  const int by_cores = std::max(1, usable_cores(b) / (shared_by_ranks(b) ? b.ranks_on_node : 1));
  const std::string default_why = default_reason(b);
  char* end = nullptr;
  const long env = blas_threads_env ? std::strtol(blas_threads_env, &end, 10) : 0;
  if (flag && *flag >= 1) {
    c.threads = std::min(*flag, 4096);
    c.source = ThreadSource::Flag;
    c.why = fmt::format("--threads {} (the default here: {}, from {})", c.threads, by_cores, default_why);
  } else if (blas_threads_env && end != blas_threads_env && *end == '\0' && env > 0) {
    c.threads = int(std::min<long>(env, 4096));
    c.source = ThreadSource::Environment;
    c.why = fmt::format("OPENBLAS_NUM_THREADS={} (the default here: {}, from {})", blas_threads_env, by_cores, default_why);
  } else {
    c.threads = by_cores;
    c.source = ThreadSource::Cores;
    c.why = default_why;
  }
  return c;
}

std::string describe(const ThreadChoice& c) {
  return plural(c.threads, "BLAS thread", "BLAS threads") + ": " + c.why;
}

const char* to_string(ThreadSource s) {
  switch (s) {
    case ThreadSource::Cores: return "cores";
    case ThreadSource::Environment: return "OPENBLAS_NUM_THREADS";
    case ThreadSource::Flag: return "--threads";
  }
  return "cores";
}

}  // namespace zinf::engine
