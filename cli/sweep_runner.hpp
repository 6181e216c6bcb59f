// Runs the points of a sweep, each simulated in a child process of its own (sim/isolate), over the
// ranks of an `mpirun` job or in this process alone. Rank 0 holds the list of points still to run
// and hands them out one at a time to whichever rank asks, itself included, so that points a
// thousand times dearer than others do not leave ranks idle (a worker holds at most one point
// beyond those it runs, to start it without a round trip); results travel back to rank 0, the
// only rank that calls `done`. A SweepWorld is created once per process, on the main thread, which
// is the only one that uses it.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace zinf::cli {

class SweepWorld {
public:
  // Joins the MPI job when mpirun started this process (initializing MPI), else a world of one.
  SweepWorld();
  ~SweepWorld();
  SweepWorld(const SweepWorld&) = delete;
  SweepWorld& operator=(const SweepWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Whether mpirun started this process (then each rank is meant to have a core or more of its own).
  bool under_mpi() const { return mpi_; }
  // Whether every rank, and whether rank 0, could go on (each passes its own `ok`); collective.
  struct Verdict {
    bool all_ok = true;
    bool rank0_ok = true;
  };
  Verdict agree(bool ok) const;

  // Runs `todo` (point indices, read on rank 0 only), at most `jobs` at a time on every rank.
  // `job(i)` runs in a child process and returns its result text; on rank 0, `done(i, ok, text)` is
  // called as each ends, ok false with the error or how the process died.
  void run(const std::vector<size_t>& todo, int jobs, const std::function<std::string(size_t)>& job,
           const std::function<void(size_t, bool, const std::string&)>& done) const;

private:
  void run_rank0(const std::vector<size_t>& todo, int jobs, const std::function<std::string(size_t)>& job,
                 const std::function<void(size_t, bool, const std::string&)>& done) const;
  void run_worker(int jobs, const std::function<std::string(size_t)>& job) const;

  int rank_ = 0;
  int size_ = 1;
  bool mpi_ = false;
};

}  // namespace zinf::cli
