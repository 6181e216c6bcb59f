#include "cli/inputs.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "cli/command.hpp"
#include "core/config_paths.hpp"
#include "engine/machine_info.hpp"
#include "models/gpt.hpp"

namespace zinf::cli {

void add_input_options(CLI::App& cmd, InputOptions& o) {
  cmd.add_option("--model,-m", o.model, "Model name (models/NAME.yaml) or path")->capture_default_str();
  cmd.add_option("--hw", o.hw, "Hardware profile name (hwprofiles/NAME.yaml) or path")->capture_default_str();
  cmd.add_option("--nodes,-n", o.nodes, "Number of nodes")->check(CLI::PositiveNumber)->capture_default_str();
  cmd.add_option("--config,-c", o.config, "Run config name (configs/NAME.yaml), path, or DeepSpeed JSON")
      ->capture_default_str();
}

Inputs load_inputs(const InputOptions& o) {
  const std::string root = core::zinf_root(source_dir());
  Inputs in;
  in.model = models::find_model(o.model, source_dir());
  in.hw = core::load_hwprofile(core::resolve_config(o.hw, "hwprofiles", root));
  std::string path = core::resolve_config(o.config, "configs", root);
  std::vector<std::string> warnings;
  in.config = core::load_any_run_config(path, warnings);
  for (const auto& w : warnings) fmt::print(stderr, "zinf: warning: {}\n", w);
  in.config_name = path;
  return in;
}

std::string profile_machine_mismatch(const core::HwProfile& hw, const std::string& path, const std::string& disk_dir) {
  const std::string remedy = "measure this machine with `zinf profile-hw --out " + path + " --nvme-dir " +
                             (disk_dir.empty() ? std::string("DIR") : disk_dir) + "` (about 30 s)";
  if (hw.measured_on.empty())
    return "hwprofile " + path + " does not say which machine it measured (no measured_on section): its predictions may describe "
           "another machine; " + remedy;
  const auto diffs = core::machine_differences(hw.measured_on, engine::this_machine(disk_dir));
  if (diffs.empty()) return "";
  std::string m = "hwprofile " + path + " was measured on another machine; its predictions describe that one:";
  for (const auto& d : diffs) m += "\n  - " + d;
  return m + "\n  To predict this machine, " + remedy + ".";
}

sim::AutoResolution resolve_auto_for_ranks(const core::ModelSpec& model, const core::HwProfile& hw, int ranks,
                                           const core::RunConfig& config) {
  const int gpus = std::max(1, hw.node.gpus);
  if (ranks % gpus != 0) return {config, false, false, ""};
  return sim::resolve_auto(model, hw, ranks / gpus, config);
}

}  // namespace zinf::cli
