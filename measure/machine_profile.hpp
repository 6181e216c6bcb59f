// zinf's machine profiler (the library behind `zinf profile-hw`): this machine measured through the
// engine's own code paths and written as a hwprofile the simulator reads, and the check that a
// profile describes the machine it is used on. Depends on engine/ (probes, the Trainer, MPI) and
// sim/ (fitting in-step figures by simulating the same Programs), which never depend on it.
#pragma once
#include <string>

#include "core/hwprofile.hpp"

namespace zinf::measure {

struct ProfileOptions {
  std::string name = "local";         // the profile's name
  std::string nvme_dir = ".";         // directory on the disk to measure (scratch files, removed)
  double device_memory = 2.0 * (1 << 30);  // the CPU backend's device budget to record, bytes
  bool quick = false;                 // fewer shapes, smaller buffers, 3 calibration steps (tests)
  bool no_mpi = false;                // skip the collective and rank-drift measurements
  int calibration_steps = 30;         // measured steps per calibration run
  std::string executable;             // the zinf binary: mpirun runs it for the collective
                                      // measurement (`profile-hw --comm-worker`) and `validate`
  std::string source_dir;             // the tree with models/ (the calibration model gpt-overlap)
};

// Measures this machine (about 30 s; seconds with `quick`), printing each figure as it comes to
// stdout, and returns the hwprofile as YAML text with a comment on how each number was obtained.
// The text loads (core::parse_hwprofile). Throws on a measurement that cannot run.
std::string profile_machine(const ProfileOptions& options);

// One rank of the collective measurement, run under mpirun by profile_machine: all-gathers of
// small and large buffers; rank 0 writes "latency bandwidth" to `out_path`.
void collective_worker(const std::string& out_path);

// For a profile that measured a machine (`measured_on:`) used to predict this one: "" when it was
// measured here, else a message naming the profile at `path`, each difference, and the
// `zinf profile-hw` command that measures this machine. A measured-looking profile without the
// record (written before it existed) gets a message too, and so does one measured on several BLAS
// threads without the cores each kernel keeps busy. `disk_dir`: this run's NVMe directory.
std::string profile_machine_mismatch(const core::HwProfile& hw, const std::string& path, const std::string& disk_dir);

}  // namespace zinf::measure
