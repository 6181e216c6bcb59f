// The sweep spec's reader: the YAML walk, the axes and their checks (formats/sweep_spec_reader.hpp).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>

#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "formats/hf_config.hpp"
#include "formats/model_spec_reader.hpp"
#include "core/errors.hpp"
#include "core/sweep_spec.hpp"
#include "core/units.hpp"
#include "formats/sweep_spec_reader.hpp"

namespace zinf::core {
namespace {

// Nodes a point may span (a million GPUs at 16 per node: beyond any cluster zinf plans).
constexpr int kMaxSweepNodes = 1 << 16;

namespace fs = std::filesystem;

int line_of(const YAML::Node& n) { return n.Mark().line + 1; }

// Errors name the spec and the line: "sweep.yaml:12: key 'axes.key': ...".
[[noreturn]] void fail_at(const std::string& spec, const YAML::Node& at, const std::string& key, const std::string& msg) {
  throw ConfigError(fmt::format("{}:{}", spec, line_of(at)), key, msg);
}

SweepAxis::Kind file_kind(const std::string& key, bool& is_file) {
  is_file = true;
  if (key == "models") return SweepAxis::Kind::Models;
  if (key == "hwprofiles") return SweepAxis::Kind::Hwprofiles;
  if (key == "configs") return SweepAxis::Kind::Configs;
  if (key == "nodes") return SweepAxis::Kind::Nodes;
  is_file = false;
  return SweepAxis::Kind::Field;
}

const char* folder_of(SweepAxis::Kind k) {
  switch (k) {
    case SweepAxis::Kind::Models: return "models";
    case SweepAxis::Kind::Hwprofiles: return "hwprofiles";
    case SweepAxis::Kind::Configs: return "configs";
    default: return "";
  }
}

std::pair<SweepTarget, std::string> field_target(const std::string& key) {
  static const std::vector<std::pair<std::string, SweepTarget>> prefixes = {
      {"model.", SweepTarget::Model}, {"hwprofile.", SweepTarget::Hwprofile}, {"hw.", SweepTarget::Hwprofile},
      {"config.", SweepTarget::Config}};
  for (const auto& [p, t] : prefixes)
    if (key.rfind(p, 0) == 0) return {t, key.substr(p.size())};
  // Unprefixed: hwprofile fields start with node, fabric or reserve; model shape words are the
  // model's; anything else (micro_batch included, which overrides the model's) is the run config's.
  static const std::set<std::string> hw_roots = {"node", "fabric", "reserve"};
  static const std::set<std::string> model_words = {"layers", "hidden", "heads", "ffn_multiple", "seq", "vocab",
                                                    "tied_embeddings"};
  const std::string first = key.substr(0, key.find('.'));
  if (hw_roots.count(first)) return {SweepTarget::Hwprofile, key};
  if (model_words.count(first)) return {SweepTarget::Model, key};
  return {SweepTarget::Config, key};
}

// A list of files or node counts. Names are checked to exist; paths are relative to the spec.
SweepAxis file_axis(const std::string& spec, const YAML::Node& list, SweepAxis::Kind kind, const std::string& key,
                    const std::string& root) {
  if (!list.IsSequence() || list.size() == 0) fail_at(spec, list, key, "expected a non-empty list, e.g. [a, b]");
  SweepAxis a;
  a.kind = kind;
  a.key = key;
  const auto dir = fs::path(spec).parent_path();
  for (const auto& v : list) {
    if (!v.IsScalar()) fail_at(spec, v, key, "every entry must be a name, a path or a number");
    std::string text = v.Scalar();
    if (kind == SweepAxis::Kind::Nodes) {
      auto n = parse_quantity(text, UnitKind::Count);
      // Bounded before the cast: a double beyond int's range has no int to compare with.
      if (!n || !(*n >= 1 && *n <= double(kMaxSweepNodes)) || *n != static_cast<double>(static_cast<int>(*n)))
        fail_at(spec, v, key, fmt::format("'{}' is not a node count from 1 to {}", text, kMaxSweepNodes));
      text = std::to_string(static_cast<int>(*n));
    } else {
      if (text.find('/') != std::string::npos) {  // relative to the spec; kept relative to the tree if in it
        const fs::path file = fs::path(text).is_relative() ? dir / text : fs::path(text);
        text = display_path(fs::absolute(file).lexically_normal().string(), root);
        if (fs::path(text).is_relative() && text.find('/') == std::string::npos) text = "./" + text;
      }
      try {
        resolve_config(point_file(text, root), folder_of(kind), root);
      } catch (const ConfigError& e) {
        fail_at(spec, v, key, e.what());
      }
    }
    a.texts.push_back(text);
    a.lines.push_back(line_of(v));
  }
  return a;
}

// One entry of `axes:` (or a member of a zip): {key: K, values: [...]} or {key: K, scale: [...]}.
SweepAxis read_axis(const std::string& spec, const YAML::Node& n, const std::string& root) {
  if (!n.IsMap()) fail_at(spec, n, "axes", "an axis is a mapping {key: K, values: [...]} or {key: K, scale: [...]}");
  for (const auto& kv : n) {
    const auto k = kv.first.Scalar();
    if (k != "key" && k != "values" && k != "scale")
      fail_at(spec, kv.first, "axes." + k, "unknown key in an axis (allowed: key, values, scale)");
  }
  if (!n["key"] || !n["key"].IsScalar() || n["key"].Scalar().empty())
    fail_at(spec, n, "axes.key", "every axis names the field it varies with key:");
  const std::string key = n["key"].Scalar();
  const bool has_values = n["values"].IsDefined(), has_scale = n["scale"].IsDefined();
  if (has_values == has_scale) fail_at(spec, n, key, "give exactly one of values: [...] or scale: [...]");
  bool is_file = false;
  const auto kind = file_kind(key, is_file);
  if (is_file) {
    if (has_scale) fail_at(spec, n, key, "files and node counts take values:, not scale:");
    return file_axis(spec, n["values"], kind, key, root);
  }
  const YAML::Node list = has_values ? n["values"] : n["scale"];
  if (!list.IsSequence() || list.size() == 0) fail_at(spec, list, key, "expected a non-empty list of values");
  SweepAxis a;
  a.kind = SweepAxis::Kind::Field;
  std::tie(a.target, a.key) = field_target(key);
  a.scale = has_scale;
  for (const auto& v : list) {
    if (a.scale) {
      auto f = v.IsScalar() ? parse_quantity(v.Scalar(), UnitKind::Count) : std::nullopt;
      if (!f || *f <= 0) fail_at(spec, v, key, "a scale factor is a positive number");
      a.factors.push_back(*f);
      a.texts.push_back(v.Scalar());
    } else {
      a.values.push_back(YAML::Clone(v));
      if (v.IsScalar()) {
        a.texts.push_back(v.Scalar());
      } else {
        YAML::Emitter e;
        e << YAML::Flow << v;
        a.texts.push_back(e.c_str());
      }
    }
    a.lines.push_back(line_of(v));
  }
  return a;
}

// Why `p` cannot be read with its value of the field axis `key` ("" if it can): its reader's
// error, or, for a DeepSpeed config, the warning that names the key (a key that reader only warns
// about would have no effect).
std::string problem_of(const SweepPoint& p, const std::string& key, const std::string& root) {
  try {
    for (const auto& w : load_point_inputs(p, root).warnings)
      if (w.find("'" + key + "'") != std::string::npos) return w;
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool some_point_reads(const SweepSpec& s, size_t field, const std::string& text, const std::string& root) {
  const std::string& key = s.field_axes()[field]->key;
  for (const auto& p : expand(s))
    if (p.coords[field] == text && problem_of(p, key, root).empty()) return true;
  return false;
}

// Each field value, applied alone to every file of its kind the spec names, must pass that file's
// reader (and, for a DeepSpeed config, be a key the reader maps rather than one it only warns about).
void check_field_values(const SweepSpec& s, const std::string& root) {
  std::vector<std::string> models, hws, configs;
  for (const auto& g : s.groups)
    for (const auto& a : g.axes) {
      if (a.kind == SweepAxis::Kind::Models) models = a.texts;
      if (a.kind == SweepAxis::Kind::Hwprofiles) hws = a.texts;
      if (a.kind == SweepAxis::Kind::Configs) configs = a.texts;
    }
  const auto fields = s.field_axes();
  for (size_t f = 0; f < fields.size(); ++f) {
    const SweepAxis* a = fields[f];
    const auto& bases = a->target == SweepTarget::Model ? models : a->target == SweepTarget::Hwprofile ? hws : configs;
    for (size_t i = 0; i < a->size(); ++i)
      for (const auto& base : bases) {
        SweepPoint p{models.front(), hws.front(), configs.front(), 1, {}, {}};
        (a->target == SweepTarget::Model ? p.model : a->target == SweepTarget::Hwprofile ? p.hwprofile : p.config) = base;
        const std::string origin = fmt::format("{}:{}", s.path, a->lines[i]);
        p.overrides.push_back({a->target, a->key, a->scale, a->scale ? YAML::Node() : a->values[i],
                               a->scale ? a->factors[i] : 1.0, origin});
        const std::string problem = problem_of(p, a->key, root);
        // A value refused alone may be right beside another axis's value (heads beside hidden):
        // it is kept if some point of the sweep reads, and its other points become error rows.
        if (!problem.empty() && !some_point_reads(s, f, a->texts[i], root))
          throw ConfigError(origin, a->column(),
                            fmt::format("value '{}' is refused for {}: {}", a->texts[i], base, problem));
      }
  }
}

}  // namespace

SweepSpec parse_sweep_spec(const std::string& yaml_text, const std::string& path, const std::string& root) {
  const YAML::Node doc = load_bounded_yaml(yaml_text, path);
  if (!doc.IsMap()) throw ConfigError(path, "", "a sweep spec is a mapping with models, hwprofiles, nodes, configs, axes");
  SweepSpec s;
  s.path = path;
  for (const auto& kv : doc) {
    const auto k = kv.first.Scalar();
    static const std::set<std::string> allowed = {"models", "hwprofiles", "configs", "nodes", "axes",
                                                  "collective", "output", "description"};
    if (!allowed.count(k))
      fail_at(path, kv.first, k,
              "unknown key (allowed: models, hwprofiles, configs, nodes, axes, collective, output, description)");
  }
  // The file axes given at the top level come first, in this order, as `zinf sweep` always ran them.
  for (const char* k : {"hwprofiles", "models", "configs", "nodes"}) {
    if (!doc[k]) continue;
    bool is_file = false;
    s.groups.push_back({{file_axis(path, doc[k], file_kind(k, is_file), k, root)}});
  }
  if (const auto axes = doc["axes"]) {
    if (!axes.IsSequence()) fail_at(path, axes, "axes", "expected a list of axes");
    for (const auto& entry : axes) {
      if (entry.IsMap() && entry["zip"]) {
        if (entry.size() != 1) fail_at(path, entry, "axes.zip", "a zip entry holds only zip: [axis, axis, ...]");
        const auto members = entry["zip"];
        if (!members.IsSequence() || members.size() == 0) fail_at(path, members, "axes.zip", "expected a list of axes");
        SweepGroup g;
        for (const auto& m : members) {
          g.axes.push_back(read_axis(path, m, root));
          if (g.axes.back().size() != g.axes.front().size())
            fail_at(path, m, g.axes.back().key,
                    fmt::format("a zipped axis has {} values where the zip's first axis ({}) has {}; zipped axes advance "
                                "together, so their lists are of equal length",
                                g.axes.back().size(), g.axes.front().key, g.axes.front().size()));
        }
        s.groups.push_back(std::move(g));
      } else {
        s.groups.push_back({{read_axis(path, entry, root)}});
      }
    }
  }
  // Every kind of file and the node count is on exactly one axis; a field on at most one.
  std::set<std::string> seen;
  for (const auto& g : s.groups)
    for (const auto& a : g.axes) {
      const std::string id = a.kind == SweepAxis::Kind::Field ? a.column() : a.key;
      const std::string field = a.kind == SweepAxis::Kind::Field ? std::string(to_string(a.target)) + "." + a.key : a.key;
      if (!seen.insert(field).second)
        throw ConfigError(fmt::format("{}:{}", path, a.lines.front()), id, "this axis is given twice");
    }
  for (const char* k : {"models", "hwprofiles", "configs", "nodes"})
    if (!seen.count(k))
      throw ConfigError(path, k, fmt::format("missing: give {}: [...] at the top level or as an axis", k));
  if (doc["collective"]) {
    s.collective = doc["collective"].Scalar();
    if (s.collective != "ring" && s.collective != "hierarchical")
      fail_at(path, doc["collective"], "collective", "expected ring or hierarchical");
  }
  if (doc["output"]) s.output = doc["output"].Scalar();
  point_count(s);  // refuses a spec of too many points before anything is expanded
  check_field_values(s, root);
  return s;
}

void check_sweep_models(const SweepSpec& s, const std::string& root) {
  for (const auto* f : s.field_axes())
    if (f->target == SweepTarget::Model) return;
  for (const auto& g : s.groups)
    for (const auto& a : g.axes) {
      if (a.kind != SweepAxis::Kind::Models) continue;
      for (size_t i = 0; i < a.size(); ++i) {
        try {
          const std::string file = resolve_config(point_file(a.texts[i], root), "models", root);
          const std::string hf = models::hf_config_path(file);
          if (hf.empty()) load_model_spec(file);
          else models::load_hf_config(hf);
        } catch (const ConfigError& e) {
          throw ConfigError(fmt::format("{}:{}", s.path, a.lines[i]), a.key, e.what());
        }
      }
    }
}

SweepSpec load_sweep_spec(const std::string& path, const std::string& root) {
  return parse_sweep_spec(read_bounded_file(path, kMaxConfigBytes, "sweep spec"), path, root);
}

}  // namespace zinf::core
