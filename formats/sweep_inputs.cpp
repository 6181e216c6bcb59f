#include "formats/sweep_spec_reader.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "formats/deepspeed_config.hpp"
#include "core/errors.hpp"
#include "formats/hjson.hpp"
#include "core/units.hpp"
#include "formats/hf_config.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::core {

namespace {

std::string slurp(const std::string& path) { return read_bounded_file(path, kMaxConfigBytes, "file"); }

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t dot = key.find('.', pos);
    parts.push_back(key.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return parts;
}

// A number in the file, whatever unit it is written in, in the reader's base units (bytes, bytes/s,
// FLOP/s, seconds). Units are tried so that "70B" reads as bytes rather than a count of billions:
// no field a sweep scales is a count written with B.
std::optional<double> any_quantity(const std::string& text) {
  for (UnitKind k : {UnitKind::Seconds, UnitKind::Bytes, UnitKind::BytesPerSecond, UnitKind::FlopsPerSecond,
                     UnitKind::Count})
    if (auto v = parse_quantity(text, k)) return v;
  return std::nullopt;
}

void set_at(YAML::Node node, const std::vector<std::string>& parts, size_t i, const FieldOverride& o,
            const std::string& file) {
  const std::string& part = parts[i];
  const std::string so_far = fmt::format("{}", fmt::join(parts.begin(), parts.begin() + static_cast<long>(i) + 1, "."));
  const std::string why = " (" + o.origin + ")";
  if (i + 1 == parts.size()) {
    if (!o.scale) {
      node[part] = YAML::Clone(o.value);
      return;
    }
    YAML::Node cur = node[part];
    if (!cur.IsDefined() || cur.IsNull())
      throw ConfigError(file, o.key, "cannot scale a field the file does not set; give values instead" + why);
    if (!cur.IsScalar()) throw ConfigError(file, o.key, "only a number can be scaled" + why);
    auto v = any_quantity(cur.Scalar());
    if (!v) throw ConfigError(file, o.key, "'" + cur.Scalar() + "' is not a number that can be scaled" + why);
    node[part] = fmt::format("{}", *v * o.factor);
    return;
  }
  YAML::Node child = node[part];
  if (!child.IsDefined() || child.IsNull()) {
    if (o.scale) throw ConfigError(file, o.key, "the file has no '" + so_far + "' to scale within" + why);
    node[part] = YAML::Node(YAML::NodeType::Map);
  } else if (!child.IsMap()) {
    throw ConfigError(file, o.key, "'" + so_far + "' is not a mapping, so it has no field '" + parts[i + 1] + "'" + why);
  }
  set_at(node[part], parts, i + 1, o, file);
}

// The file of one target with the point's overrides for it applied, read by its reader.
struct LoadedFile {
  std::string path, name, text;
  bool overridden = false;
};

LoadedFile overridden_text(const std::string& path, SweepTarget t, const std::vector<FieldOverride>& all) {
  LoadedFile f{path, path, slurp(path), false};
  std::vector<std::string> origins;
  YAML::Node root;
  for (const auto& o : all) {
    if (o.target != t) continue;
    if (!f.overridden) {
      root = load_bounded_yaml(f.text, path);
      if (!root.IsMap()) throw ConfigError(path, "", "expected a mapping of keys at the top level");
      f.overridden = true;
    }
    apply_override(root, o, path);
    origins.push_back(o.origin);
  }
  if (f.overridden) {
    YAML::Emitter e;
    e << root;
    f.name = fmt::format("{} (with {})", path, fmt::join(origins, ", "));
    f.text = e.c_str();
  }
  return f;
}

// A YAML override value as JSON: a quoted scalar stays a string, others read as JSON reads them.
nlohmann::ordered_json yaml_to_json(const YAML::Node& n) {
  if (n.IsSequence()) {
    auto a = nlohmann::ordered_json::array();
    for (const auto& e : n) a.push_back(yaml_to_json(e));
    return a;
  }
  if (n.IsMap()) {
    auto o = nlohmann::ordered_json::object();
    for (const auto& kv : n) o[kv.first.Scalar()] = yaml_to_json(kv.second);
    return o;
  }
  if (!n.IsDefined() || n.IsNull()) return nullptr;
  const std::string t = n.Scalar();
  if (n.Tag() == "!") return t;
  if (t == "true" || t == "false") return t == "true";
  try {
    return nlohmann::ordered_json::parse(t);
  } catch (const nlohmann::json::exception&) {
    return t;
  }
}

// A JSON file (a DeepSpeed config in Hjson, a Hugging Face config.json) with the point's overrides
// of target `t` applied on its keys, as JSON text.
LoadedFile json_overridden_text(const std::string& path, SweepTarget t, const std::vector<FieldOverride>& all) {
  LoadedFile f{path, path, slurp(path), false};
  std::vector<std::string> origins;
  nlohmann::ordered_json root;
  for (const auto& o : all) {
    if (o.target != t) continue;
    if (!f.overridden) root = parse_hjson(f.text, path);
    f.overridden = true;
    const auto parts = split_key(o.key);
    const std::string why = " (" + o.origin + ")";
    nlohmann::ordered_json* node = &root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!node->contains(parts[i])) {
        if (o.scale) throw ConfigError(path, o.key, "the file has no '" + parts[i] + "' to scale within" + why);
        (*node)[parts[i]] = nlohmann::ordered_json::object();
      }
      node = &(*node)[parts[i]];
      if (!node->is_object())
        throw ConfigError(path, o.key, "'" + parts[i] + "' is not a mapping, so it has no field '" + parts[i + 1] + "'" + why);
    }
    if (!o.scale) {
      (*node)[parts.back()] = yaml_to_json(o.value);
    } else {
      if (!node->contains(parts.back()) || !(*node)[parts.back()].is_number())
        throw ConfigError(path, o.key, "only a number the file sets can be scaled" + why);
      (*node)[parts.back()] = (*node)[parts.back()].get<double>() * o.factor;
    }
    origins.push_back(o.origin);
  }
  if (f.overridden) {
    f.name = fmt::format("{} (with {})", path, fmt::join(origins, ", "));
    f.text = root.dump(2);
  }
  return f;
}

PointInputs load_with(const std::string& model_path, const std::string& hw_path, const std::string& config_path,
                      int nodes, const std::vector<FieldOverride>& overrides) {
  PointInputs in;
  const std::string hf = models::hf_config_path(model_path);
  if (!hf.empty()) {
    // Named by its own path whatever the overrides: the model takes its name from the folder.
    in.model = models::parse_hf_config(json_overridden_text(hf, SweepTarget::Model, overrides).text, hf);
  } else {
    const auto m = overridden_text(model_path, SweepTarget::Model, overrides);
    in.model = parse_model_spec(m.text, m.name);
  }
  const auto h = overridden_text(hw_path, SweepTarget::Hwprofile, overrides);
  in.hw = parse_hwprofile(h.text, h.name);
  // The DeepSpeed test looks at the file as written: an override never turns one kind into the other.
  const std::string original = slurp(config_path);
  if (is_deepspeed_json(original)) {
    const auto c = json_overridden_text(config_path, SweepTarget::Config, overrides);
    DeepSpeedContext ctx;
    ctx.ranks = nodes * in.hw.node.gpus;
    ctx.ranks_text = fmt::format("{} node{} x {} GPUs of {}", nodes, nodes == 1 ? "" : "s", in.hw.node.gpus, in.hw.name);
    ctx.model_micro_batch = in.model.micro_batch;
    ctx.hidden = in.model.hidden;
    ctx.hw_precision = native_precision(in.hw.node.gpu);
    ctx.hw_name = in.hw.name;
    in.config = parse_deepspeed_config(c.text, c.name, in.warnings, ctx);
  } else {
    const auto c = overridden_text(config_path, SweepTarget::Config, overrides);
    in.config = parse_run_config(c.text, c.name);
  }
  if (in.config.seq) in.model.seq = *in.config.seq;  // as every command sees the run's sequence
  in.hw = for_precision(in.hw, in.config.precision, &in.warnings);
  in.config_path = config_path;
  return in;
}

}  // namespace

void apply_override(YAML::Node root, const FieldOverride& o, const std::string& file) {
  const auto parts = split_key(o.key);
  for (const auto& p : parts)
    if (p.empty()) throw ConfigError(file, o.key, "a key is words joined by single dots (" + o.origin + ")");
  set_at(root, parts, 0, o, file);
}

std::string point_file(const std::string& text, const std::string& root) {
  if (text.find('/') == std::string::npos || std::filesystem::path(text).is_absolute()) return text;
  return (std::filesystem::path(root) / text).string();
}

PointInputs load_point_inputs(const SweepPoint& p, const std::string& root) {
  return load_with(resolve_config(point_file(p.model, root), "models", root),
                   resolve_config(point_file(p.hwprofile, root), "hwprofiles", root),
                   resolve_config(point_file(p.config, root), "configs", root), p.nodes, p.overrides);
}

}  // namespace zinf::core
