#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
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

namespace {

// The last word of a refused or failed command, written whatever becomes of the write: fmt::print
// throws when stderr is a file on a full disk, and a throw from a handler here would turn the
// documented exit code into an abort.
void say(std::string_view line) noexcept {
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fputc('\n', stderr);
}

}  // namespace

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
    if (!e.message.empty()) say(e.message);
    return e.code;
  } catch (const zinf::engine::TrainingDiverged& e) {
    say(fmt::format("zinf: training diverged: {}", e.what()));
    return 4;
  } catch (const std::bad_alloc&) {
    say("zinf: error: out of memory (the configuration asks for more than this machine has; "
        "check micro-batch, gradient accumulation and model sizes)");
    return 1;
  } catch (const zinf::core::ConfigError& e) {
    say(fmt::format("zinf: config error: {}", e.what()));
    return 2;
  } catch (const zinf::core::PlanError& e) {
    say(fmt::format("zinf: plan refused: {}", e.what()));
    return 3;
  } catch (const std::exception& e) {
    say(fmt::format("zinf: error: {}", e.what()));
    return 1;
  }
  return 0;
}
