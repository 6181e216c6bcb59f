// The reader of sweep specs (YAML) into a core::SweepSpec, and of each point's files: a point's
// model, hardware profile and run config read by their readers with its field values written into
// the parsed file first, so that a swept value is checked exactly as the same value written in the
// file would be, and a bad one is named by the spec line that gave it. Stateless functions that
// only read files; safe from several threads.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/run_config.hpp"
#include "core/sweep_spec.hpp"

namespace zinf::core {

// Reads and checks a spec; throws ConfigError naming the spec, the line and the key at fault.
// `root` is where names are looked up (models/, hwprofiles/, configs/). Every field value is
// applied alone to every file of its kind in the spec and read by that file's reader.
SweepSpec load_sweep_spec(const std::string& path, const std::string& root);
SweepSpec parse_sweep_spec(const std::string& yaml_text, const std::string& path, const std::string& root);

// Reads every model of `spec` once by its reader (a Hugging Face config.json, or its folder, by the
// config.json reader; a YAML by zinf's), so that a file its reader refuses refuses the sweep before
// any point runs, naming the spec's line and the file, rather than as an error row in every point.
// Does nothing where an axis writes into the models: a model may then read only with a point's
// values, and those values were checked when the spec was read. Callers check the files' types
// first (zinf sweep refuses a FIFO or a device by the spec's field).
void check_sweep_models(const SweepSpec& spec, const std::string& root);

// Writes one field value into a parsed file. A set creates missing mappings on its path; a scale
// needs the field present as a number (with or without a unit) and writes the product as a plain
// number. Throws ConfigError naming `file`, the key and `o.origin`.
void apply_override(YAML::Node root, const FieldOverride& o, const std::string& file);

// A point's three files, found under `root`, with its overrides applied and read by their readers.
struct PointInputs {
  ModelSpec model;
  HwProfile hw;
  RunConfig config;
  std::string config_path;
  std::vector<std::string> warnings;  // DeepSpeed keys zinf does not support
};
PointInputs load_point_inputs(const SweepPoint& p, const std::string& root);
// A point's file as a command takes it: a tree-relative path joined to `root`; names and absolute
// paths as they are.
std::string point_file(const std::string& text, const std::string& root);

}  // namespace zinf::core
