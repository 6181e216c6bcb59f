// Resolves a name given on the command line ("gpt2-small", "dgx2") or a path to a config file.
// Names are looked up as <root>/<folder>/<name>.yaml, where root is $ZINF_HOME if set, else the
// source tree zinf was built from. An unknown name is a ConfigError listing what exists.
#pragma once
#include <string>
#include <vector>

namespace zinf::core {

std::string zinf_root(const std::string& built_in_root);
std::string resolve_config(const std::string& name_or_path, const std::string& folder, const std::string& root);
std::vector<std::string> list_configs(const std::string& folder, const std::string& root);

// How written results name a file: a path inside the zinf tree `root` relative to it (so that CSVs
// and JSON reports carry no machine's paths); a name, or a path outside the tree, as given.
std::string display_path(const std::string& name_or_path, const std::string& root);

}  // namespace zinf::core
