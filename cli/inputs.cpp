#include "cli/inputs.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "cli/command.hpp"
#include "core/config_paths.hpp"
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
  in.config_path = path;
  in.config_name = core::display_path(path, root);  // results name it without this machine's paths
  return in;
}

}  // namespace zinf::cli
