// The inputs most subcommands share: --model, --hw, --nodes, --config, resolved and loaded, with
// warnings for DeepSpeed keys zinf does not support printed to stderr.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/run_config.hpp"
#include "sim/auto_config.hpp"

namespace zinf::cli {

struct InputOptions {
  std::string model = "gpt-1t";
  std::string hw = "dgx2-v100";
  int nodes = 1;
  std::string config = "infinity-nvme";
};

struct Inputs {
  core::ModelSpec model;
  core::HwProfile hw;
  core::RunConfig config;
  std::string config_name;
};

void add_input_options(CLI::App& cmd, InputOptions& o);
Inputs load_inputs(const InputOptions& o);

// For a profile that measured a machine (`measured_on:`) used to predict this one: "" when it was
// measured here, else a message naming the profile at `path`, each difference, and the
// `zinf profile-hw` command that measures this machine. A measured-looking profile without the
// record (written before it existed) gets a message too. `disk_dir`: this run's NVMe directory.
std::string profile_machine_mismatch(const core::HwProfile& hw, const std::string& path, const std::string& disk_dir);

// `auto` decided as every command decides it (sim/auto_config.hpp), for a run of `ranks` ranks in
// whole nodes of hw.node.gpus each; otherwise the config comes back unchanged and the planner's own
// `auto` decides.
sim::AutoResolution resolve_auto_for_ranks(const core::ModelSpec& model, const core::HwProfile& hw, int ranks,
                                           const core::RunConfig& config);

}  // namespace zinf::cli
