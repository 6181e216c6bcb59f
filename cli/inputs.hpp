// The inputs most subcommands share: --model, --hw, --nodes, --gpus-per-node, --config, resolved
// and loaded, with the DeepSpeed reader's lines (HF autos, DeepSpeed's defaults, keys not
// honoured) printed to stderr.
#pragma once
#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "formats/deepspeed_config.hpp"
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
  int gpus_per_node = 0;  // 0: the profile's
  std::string config = "infinity-nvme";
  int64_t seq = 0;  // 0: the run config's `seq`, else the model's
};

struct Inputs {
  core::ModelSpec model;
  core::HwProfile hw;
  core::RunConfig config;
  std::string config_path;  // the run config read
  std::string config_name;  // how reports name it: relative to the zinf tree when it lies there
  std::optional<core::DeepSpeedReading> deepspeed;  // the reading, when the config is DeepSpeed's
};

void add_input_options(CLI::App& cmd, InputOptions& o);
// Loads the three files; a DeepSpeed config is read for --nodes x the node's GPUs (the profile's,
// or --gpus-per-node), and the profile is seen as the config's precision runs on it
// (core::for_precision). `for_tune`: a DeepSpeed-autotuner config is read as the space to search
// instead of refused.
Inputs load_inputs(const InputOptions& o, bool for_tune = false);
// What zinf knows of a run that a DeepSpeed config's batch triple and HF "auto" depend on.
core::DeepSpeedContext deepspeed_context(const core::ModelSpec& model, const core::HwProfile& hw, int nodes);

// Shared with the libraries behind the commands: the check that a profile describes this machine
// (measure/machine_profile.hpp) and `auto` for a run of N ranks (tune/auto_config.hpp).
using measure::profile_machine_mismatch;
using tune::resolve_auto_for_ranks;

}  // namespace zinf::cli
