// `zinf profile-hw`: measures this machine through the engine's own code paths and writes the
// hwprofile the simulator reads (measure/machine_profile.hpp does the measuring); `--check P` says
// whether profile P was measured on this machine.
#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "core/hwprofile.hpp"
#include "core/self_exe.hpp"
#include "core/units.hpp"
#include "engine/io/output_file.hpp"
#include "measure/child_process.hpp"
#include "measure/machine_profile.hpp"
#include "formats/hwprofile_reader.hpp"

namespace zinf::cli {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string out = "hwprofiles/local.yaml";
  std::string nvme_dir = ".";
  std::string name = "local";
  std::string device_memory = "2 GiB";
  bool quick = false;
  bool no_mpi = false;
  int calibration_steps = 30;  // measured steps per calibration run (after 3 warm-up steps); --quick: 3
  std::string comm_worker;  // internal: run as one rank of the collective measurement
  std::string check;        // --check: compare this profile's measured_on with this machine, measure nothing
};

void run(const Args& a) {
  if (!a.comm_worker.empty()) return measure::collective_worker(a.comm_worker);
  const auto device_memory = core::parse_quantity(a.device_memory, core::UnitKind::Bytes);
  if (!device_memory) throw CLI::ValidationError("--device-memory", "expected a size such as '2 GiB'");
  measure::ProfileOptions o;
  o.name = a.name;
  o.nvme_dir = a.nvme_dir;
  o.device_memory = *device_memory;
  o.quick = a.quick;
  o.no_mpi = a.no_mpi;
  o.calibration_steps = a.calibration_steps;
  o.executable = core::self_exe().string();
  o.source_dir = source_dir();
  // The path is checked before minutes of measuring: a missing directory is refused now.
  check_output("profile-hw", "--out", a.out);
  std::string y;
  try {
    y = measure::profile_machine(o);
  } catch (const measure::ChildStopped& e) {
    throw ExitCode{128 + e.signal(), fmt::format("zinf profile-hw: {}; {} not written", e.what(), a.out)};
  }
  engine::write_output_file(engine::default_io_env(), a.out, y, "zinf profile-hw --out");
  fmt::print("wrote {}\n", a.out);
}

}  // namespace

void add_profile_hw_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile-hw", "Measure this machine through the engine's code paths and write a hwprofile");
  add_threads_option(cmd);
  auto a = std::make_shared<Args>();
  cmd->add_option("--out,-o", a->out, "Where to write the profile")->capture_default_str();
  cmd->add_option("--nvme-dir", a->nvme_dir, "Directory on the disk to measure (a scratch file is written and removed)")
      ->capture_default_str();
  cmd->add_option("--name", a->name, "Profile name")->capture_default_str();
  cmd->add_option("--device-memory", a->device_memory, "The CPU backend's device budget to record")->capture_default_str();
  cmd->add_flag("--quick", a->quick, "Fewer shapes and smaller buffers (seconds; for tests)");
  cmd->add_flag("--no-mpi", a->no_mpi, "Skip the collective measurement under mpirun");
  cmd->add_option("--calibration-steps", a->calibration_steps,
                  "Steps measured per calibration run (kernels and NVMe inside training steps); more steps, steadier figures")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--check", a->check,
                  "Measure nothing: say whether the hwprofile at this path describes this machine as measured now (exit 1 if not: another machine, or several BLAS threads without the cores each kernel keeps)");
  cmd->add_option("--comm-worker", a->comm_worker, "(internal) one rank of the collective measurement")->group("");
  cmd->callback([a] {
    if (a->check.empty()) return run(*a);
    check_input("--check", a->check, kConfigInput);
    const std::string mismatch = measure::profile_machine_mismatch(core::load_hwprofile(a->check), a->check, a->nvme_dir);
    if (mismatch.empty()) {
      fmt::print("{} was measured on this machine\n", a->check);
      return;
    }
    fmt::print(stderr, "{}\n", mismatch);
    throw CLI::RuntimeError(1);
  });
}

}  // namespace zinf::cli