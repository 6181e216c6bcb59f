#include "formats/hf_config.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "formats/bounded_input.hpp"
#include "core/errors.hpp"
#include "formats/hf_families.hpp"
#include "formats/hf_reader.hpp"

namespace zinf::models {
namespace {

namespace fs = std::filesystem;

// The model's name: its folder's (a hub checkout is named after the model), else the file's stem.
std::string model_name(const std::string& path) {
  const fs::path p(path);
  const std::string folder = p.parent_path().filename().string();
  if (p.filename() == "config.json" && !folder.empty() && folder != "." && folder != "..") return folder;
  return p.stem().string();
}

}  // namespace

core::ModelSpec parse_hf_config(const std::string& json_text, const std::string& path) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw core::ConfigError(path, "", fmt::format("not valid JSON (at byte {})", e.byte));
  }
  if (!root.is_object()) throw core::ConfigError(path, "", "expected a JSON object (a Hugging Face config.json)");
  HfReader r(root, path);
  if (!r.has("model_type")) throw core::ConfigError(path, "model_type", "missing; a Hugging Face config.json names its model_type");
  const std::string type = r.text("model_type", "");
  core::ModelSpec m;
  m.name = model_name(path);
  m.file = path;
  bool known = false;
  std::vector<std::string> names;
  for (core::Family f : core::all_families()) {
    names.push_back(core::to_string(f));
    if (type == core::to_string(f)) core::apply_family_defaults(m, f), known = true;
  }
  if (!known)
    throw core::ConfigError(path, "model_type",
                            fmt::format("'{}' is not a family zinf models; it reads: {}", type, fmt::join(names, ", ")));
  const int64_t max_positions = read_family(r, m);
  r.finish();
  m.seq = max_positions > 0 ? std::min(max_positions, kDefaultHfSeq) : kDefaultHfSeq;
  m.micro_batch = 1;
  core::validate(m, path);
  return m;
}

core::ModelSpec load_hf_config(const std::string& path) {
  return parse_hf_config(core::read_bounded_file(path, core::kMaxConfigBytes, "Hugging Face config"), path);
}

std::string hf_config_path(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path inside = fs::path(path) / "config.json";
    return fs::exists(inside, ec) ? inside.string() : std::string();
  }
  return fs::path(path).extension() == ".json" ? path : std::string();
}

}  // namespace zinf::models
