// How many threads each zinf process runs its GEMMs (OpenBLAS) on, and why. By default: the cores
// this process may run on (its affinity mask, and its cgroup's CPU quota rounded down; at least
// one), shared among the ranks mpirun started on this node. OPENBLAS_NUM_THREADS, or a command's
// --threads flag, choose otherwise. The parsers and the choice are pure functions of what they are
// given (tests inject affinity, quota files and the environment); this_process_cores() reads the
// live system. All of it is stateless and thread-safe.
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace zinf::engine {

// A cgroup CPU quota, in cores (quota over period), and the file that set it.
struct CpuQuota {
  double cores = 0;
  std::string file;
};

// cgroup v2's cpu.max ("max 100000" or "<quota> <period>", microseconds): the quota, none when
// unlimited. Malformed text throws std::invalid_argument naming `file`.
std::optional<CpuQuota> parse_cpu_max(const std::string& text, const std::string& file);
// cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us (-1: unlimited); errors name `file`.
std::optional<CpuQuota> parse_cfs_quota(const std::string& quota_text, const std::string& period_text, const std::string& file);

// Reads a file's text; nullopt when it cannot be read.
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;
// The tightest CPU quota over this process's cgroup and its ancestors, from /proc/self/cgroup's
// text and the files under `cgroup_root` (/sys/fs/cgroup): v2's cpu.max, else v1's cpu controller.
// None when no level sets one (or none can be read).
std::optional<CpuQuota> cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::string& cgroup_root,
                                         const FileReader& read);

// Ranks mpirun started on this node, from the launcher's environment (OpenMPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS); 1 outside a launcher. `source` gets the
// variable's name (empty when none).
using EnvReader = std::function<const char*(const char* name)>;
int ranks_on_this_node(const EnvReader& env, std::string* source = nullptr);

// What a process may use: cores in its affinity mask, its cgroup quota, the ranks beside it.
struct CoreBudget {
  int affinity = 1;
  int online = 0;  // the machine's online cores (0: not known); a mask narrower than them was set by
                   // the launcher or the user, and is this rank's share already
  std::optional<CpuQuota> quota;
  int ranks_on_node = 1;
  std::string ranks_source;  // the variable ranks_on_node came from, empty for one rank
};
// min(affinity, floor(quota)), at least 1.
int usable_cores(const CoreBudget& b);
// Whether the ranks on the node split the usable cores among themselves: several ranks, none bound
// to fewer cores than the machine's.
bool shared_by_ranks(const CoreBudget& b);
CoreBudget this_process_cores();

enum class ThreadSource { Cores, Environment, Flag };

// The threads a process runs its GEMMs on, who chose them, and a sentence saying why.
struct ThreadChoice {
  int threads = 1;
  ThreadSource source = ThreadSource::Cores;
  std::string why;
};
// `flag`: the command's --threads (wins when set); `blas_threads_env`: OPENBLAS_NUM_THREADS's
// value, taken when a positive count; else the usable cores, over the ranks on this node where they
// share them (shared_by_ranks), at least 1.
ThreadChoice choose_threads(std::optional<int> flag, const char* blas_threads_env, const CoreBudget& b);
// "2 BLAS threads: 2 usable cores (affinity), 1 rank on this node"
std::string describe(const ThreadChoice& c);
// The name a profile records for who chose: "cores", "OPENBLAS_NUM_THREADS" or "--threads".
const char* to_string(ThreadSource s);

}  // namespace zinf::engine
