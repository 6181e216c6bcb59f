#include <fmt/core.h>

#include <cstdlib>
#include <string>
#include <exception>

#include "cli/command.hpp"
#include "core/errors.hpp"
#include "engine/build_info.hpp"
#include "engine/train/trainer.hpp"
#include "sim/build_info.hpp"

namespace zinf::cli {

std::string source_dir() { return ZINF_SOURCE_DIR; }

void add_threads_option(CLI::App* cmd) {
  cmd->add_option_function<int>(
         "--threads",
         [](const int& n) {
           const std::string count = std::to_string(n);
           ::setenv("OPENBLAS_NUM_THREADS", count.c_str(), 1);
           zinf::engine::pin_blas_threads(count.c_str(), n);
         },
         "BLAS threads per process (default: the cores this process may use, shared among the ranks on this node; "
         "OPENBLAS_NUM_THREADS chooses too)")
      ->check(CLI::Range(1, 4096));
}

}  // namespace zinf::cli

int main(int argc, char** argv) {
  // Every command runs its GEMMs (training, profile-hw's rates, validate's children) on the same BLAS
  // threads: OPENBLAS_NUM_THREADS, else the cores this process may use over the ranks on its node
  // (engine/build_info.hpp); a command's --threads sets them again when parsed.
  zinf::engine::pin_blas_threads(std::getenv("OPENBLAS_NUM_THREADS"));
  CLI::App app{"zinf: ZeRO-Infinity-class training and its simulator"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "zinf 0.1.0 (" + zinf::engine::describe(zinf::engine::build_info()) +
                                        "; SimGrid " + zinf::sim::simgrid_version() + ")\n" +
                                        zinf::engine::describe(zinf::engine::cpu_paths()));
  // The commands, in the order `zinf --help` lists them.
  using namespace zinf::cli;
  for (auto add : {add_plan_command, add_train_command, add_sim_command, add_tune_command, add_sweep_command,
                   add_validate_command, add_io_bench_command, add_profile_hw_command, add_tokenize_command,
                   add_sample_command})
    add(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const zinf::cli::ExitCode& e) {
    if (!e.message.empty()) fmt::print(stderr, "{}\n", e.message);
    return e.code;
  } catch (const zinf::engine::TrainingDiverged& e) {
    fmt::print(stderr, "zinf: training diverged: {}\n", e.what());
    return 4;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "zinf: error: out of memory (the configuration asks for more than this machine has; "
                       "check micro-batch, gradient accumulation and model sizes)\n");
    return 1;
  } catch (const zinf::core::ConfigError& e) {
    fmt::print(stderr, "zinf: config error: {}\n", e.what());
    return 2;
  } catch (const zinf::core::PlanError& e) {
    fmt::print(stderr, "zinf: plan refused: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "zinf: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
