// `zinf validate`: trains a model for real for K steps and simulates the same Program on this
// machine's profile, then prints the step time measured vs predicted, the error, and each lane's
// busy time measured vs predicted (measure/validate_run.hpp does the work). SIGINT, SIGTERM and
// SIGHUP stop the measured run too (measure/child_process.hpp) and exit 128 + the signal, naming
// what the output directory holds.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "core/errors.hpp"
#include "core/program.hpp"
#include "core/self_exe.hpp"
#include "core/units.hpp"
#include "core/validation.hpp"
#include "measure/child_process.hpp"
#include "measure/validate_run.hpp"

namespace zinf::cli {
namespace {

struct Args {
  measure::ValidateOptions o;
  bool json = false;
  bool worker = false;  // internal: one measuring rank
};

void run(Args a) {
  a.o.source_dir = source_dir();
  a.o.executable = core::self_exe().string();
  if (a.worker) return measure::validate_worker(a.o);
  check_named_input("--model", a.o.model, "models");
  check_named_input("--hw", a.o.hw, "hwprofiles");
  check_named_input("--config", a.o.config, "configs");
  nlohmann::json j;
  const auto started = std::filesystem::file_time_type::clock::now();
  try {
    j = measure::validate(a.o, [&](const std::string& line) {
      if (line.rfind("warning: ", 0) == 0)
        fmt::print(stderr, "zinf validate: {}\n", line);
      else if (!a.json)
        fmt::print("{}{}\n", line.rfind("measuring: ", 0) == 0 ? "" : "zinf validate: ", line);
      std::fflush(stdout);
    });
  } catch (const measure::ChildStopped& e) {
    throw ExitCode{128 + e.signal(), fmt::format("zinf validate: {}", e.what())};
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    const auto colon = what.find(": ");
    throw CLI::ValidationError(what.substr(0, colon), colon == std::string::npos ? what : what.substr(colon + 2));
  } catch (const std::runtime_error& e) {
    // Past the measured run, the output directory holds its files: say so beside the error.
    std::error_code ec;
    const auto log = std::filesystem::path(a.o.out_dir) / "measure.log";
    if (dynamic_cast<const core::ConfigError*>(&e) || dynamic_cast<const core::PlanError*>(&e) ||
        std::string(e.what()).find("measure.log") != std::string::npos || !std::filesystem::exists(log, ec) ||
        std::filesystem::last_write_time(log, ec) < started)
      throw;
    throw std::runtime_error(fmt::format("{} ({} keeps what this run wrote before the error: measure.log, the ranks' "
                                         "measured.rank*.json and any timelines; no validate.json)",
                                         e.what(), a.o.out_dir));
  }
  if (a.json) {
    fmt::print("{}\n", j.dump(2));
    return;
  }
  const auto& m = j["measured"];
  const double predicted = j["predicted"], error = j["error"];
  fmt::print("\nstep time   measured {} (median of {} steps, {} .. {})   predicted {}   error {:+.1f}%\n",
             core::format_seconds(m["median"]), m["steps"].get<int>(), core::format_seconds(m["min"]), core::format_seconds(m["max"]),
             core::format_seconds(predicted), 100.0 * error);
  fmt::print("\nbusy time per lane and step (mean over ranks)\n  {:<11}{:>12}{:>12}{:>9}\n", "lane", "measured", "predicted",
             "error");
  for (int k = 0; k < core::kLaneCount; ++k) {
    const auto& lane = j["lanes"][core::to_string(static_cast<core::Lane>(k))];
    const double lm = lane["measured"], lp = lane["predicted"];
    if (lm == 0 && lp == 0) continue;
    const double e = core::relative_error(lp, lm);
    fmt::print("  {:<11}{:>12}{:>12}{:>9}\n", core::to_string(static_cast<core::Lane>(k)), core::format_seconds(lm),
               core::format_seconds(lp), std::isfinite(e) ? fmt::format("{:+.0f}%", 100 * e) : std::string("-"));
  }
  fmt::print("\ntimelines: {0}/measured.csv, {0}/predicted.csv (and .trace.json); summary {0}/validate.json\n", a.o.out_dir);
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "Train for real and simulate the same Program: step time and lanes, measured vs predicted");
  add_threads_option(cmd);
  auto a = std::make_shared<Args>();
  cmd->add_option("--model,-m", a->o.model, "Model name or path")->capture_default_str();
  cmd->add_option("--hw", a->o.hw, "This machine's measured profile (zinf profile-hw)")->capture_default_str();
  cmd->add_option("--config,-c", a->o.config, "Run config")->capture_default_str();
  cmd->add_option("--ranks,-n", a->o.ranks, "Data-parallel ranks (mpirun -np N on this machine; at most 4 per usable core)")
      ->capture_default_str();
  cmd->add_flag("--force-ranks", a->o.force_ranks, "Run --ranks even beyond 4 per usable core");
  cmd->add_option("--steps,-s", a->o.steps, "Steps to run, warm-up included")->capture_default_str()->check(CLI::Range(2, 1000));
  cmd->add_option("--warmup", a->o.warmup, "Steps at the start not counted in the summary")->capture_default_str()->check(CLI::Range(0, 999));
  cmd->add_option("--out-dir,-o", a->o.out_dir, "Where the Timelines and the summary go")->capture_default_str();
  cmd->add_option("--nvme-dir", a->o.nvme_dir, "Directory for NVMe tiers (default: <out-dir>/nvme)");
  cmd->add_option("--label", a->o.label, "Name of this configuration in the summary");
  cmd->add_flag("--json", a->json, "Print the summary as JSON");
  cmd->add_flag("--worker", a->worker, "(internal) one measuring rank")->group("");
  cmd->callback([a] { run(*a); });
}

}  // namespace zinf::cli