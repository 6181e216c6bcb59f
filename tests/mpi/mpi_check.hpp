// What the training checks run under mpirun share: pass/fail counting, one scratch directory per job
// (named by rank 0's pid), and the ending every rank takes together.
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "engine/comm/collectives.hpp"

namespace zinf::mpi_check {

inline int passed = 0, failed = 0;

inline void expect(bool ok, const std::string& what) {
  ++(ok ? passed : failed);
  if (!ok) fmt::print(stderr, "FAILED: {}\n", what);
}

// <tmp>/<prefix>_<rank 0's pid>, the same on every rank (a collective).
inline std::filesystem::path job_dir(engine::Collectives& comm, const std::string& prefix) {
  double pid = comm.rank() == 0 ? double(::getpid()) : 0.0;
  comm.all_reduce(&pid, 1, "pid");
  return std::filesystem::temp_directory_path() / fmt::format("{}_{}", prefix, int64_t(pid));
}

// Every rank learns whether any failed; rank 0 removes the job's directory. Returns the exit code.
inline int finish(engine::Collectives& comm, const std::filesystem::path& dir) {
  double bad = failed;
  comm.all_reduce(&bad, 1, "result");
  comm.barrier("end");
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
  return bad == 0 ? 0 : 1;
}

}  // namespace zinf::mpi_check
