// The inputs most subcommands share: --model, --hw, --nodes, --config, resolved and loaded, with
// warnings for DeepSpeed keys zinf does not support printed to stderr.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/run_config.hpp"
#include "measure/machine_profile.hpp"
#include "tune/auto_config.hpp"

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
  std::string config_path;  // the run config read
  std::string config_name;  // how reports name it: relative to the zinf tree when it lies there
};

void add_input_options(CLI::App& cmd, InputOptions& o);
Inputs load_inputs(const InputOptions& o);

// Shared with the libraries behind the commands: the check that a profile describes this machine
// (measure/machine_profile.hpp) and `auto` for a run of N ranks (tune/auto_config.hpp).
using measure::profile_machine_mismatch;
using sim::resolve_auto_for_ranks;

}  // namespace zinf::cli
