// The subcommands of `zinf`: each cli/<name>.cpp defines add_<name>_command, which adds its
// subcommand to the CLI11 app; main() adds them in the order of its list, then parses and runs
// the chosen one.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace zinf::cli {

// Each adds its subcommand to `app`; the callback set on it runs the command.
void add_plan_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_sim_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_io_bench_command(CLI::App& app);
void add_profile_hw_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_sample_command(CLI::App& app);

// Adds --threads N to a command that runs GEMMs: OpenBLAS's threads in this process and, through
// OPENBLAS_NUM_THREADS, in the processes it starts (validate's ranks, profile-hw's calibration runs).
// Without it each process takes the cores it may use over the ranks on its node (engine/cpu_threads.hpp).
void add_threads_option(CLI::App* cmd);

// The source tree zinf was built from: the default home of models/, hwprofiles/, configs/.
std::string source_dir();

}  // namespace zinf::cli

namespace zinf::cli {

// Ends `zinf` with this exit code after printing `message` (when not empty) to stderr: how a
// command reports an outcome that is not a plain error (an interrupted run: 130 or 143).
struct ExitCode {
  int code;
  std::string message;
};

}  // namespace zinf::cli
