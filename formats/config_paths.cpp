#include "formats/config_paths.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/errors.hpp"

namespace fs = std::filesystem;

namespace zinf::core {

std::string zinf_root(const std::string& built_in_root) {
  if (const char* env = std::getenv("ZINF_HOME"); env && *env) return env;
  return built_in_root;
}

std::vector<std::string> list_configs(const std::string& folder, const std::string& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(root) / folder, ec)) {
    auto ext = e.path().extension().string();
    if (ext == ".yaml" || ext == ".yml" || ext == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string display_path(const std::string& name_or_path, const std::string& root) {
  if (name_or_path.find('/') == std::string::npos || root.empty()) return name_or_path;
  std::error_code ec;
  const fs::path file = fs::weakly_canonical(fs::absolute(name_or_path, ec), ec);
  if (ec) return name_or_path;
  const fs::path tree = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (ec) return name_or_path;
  const fs::path rel = file.lexically_relative(tree);
  if (rel.empty() || *rel.begin() == "..") return name_or_path;
  return rel.string();
}

std::string resolve_config(const std::string& name_or_path, const std::string& folder, const std::string& root) {
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || fs::is_regular_file(name_or_path, ec)) {
    if (!fs::exists(name_or_path, ec)) throw ConfigError(name_or_path, "", "no such file");
    return name_or_path;
  }
  for (const char* ext : {".yaml", ".yml", ".json"}) {
    fs::path p = fs::path(root) / folder / (name_or_path + ext);
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  throw ConfigError((fs::path(root) / folder / (name_or_path + ".yaml")).string(), "",
                    fmt::format("unknown {} '{}'; available: {}", folder, name_or_path,
                                fmt::join(list_configs(folder, root), ", ")));
}

}  // namespace zinf::core
