// A sweep spec (YAML) names the points `zinf sweep` simulates. Axes are whole files (models,
// hwprofiles, run configs, node counts) or single fields of those files: any run-config key, any
// hwprofile field, any model field, set to listed values or scaled by factors. Axes combine as a
// product, except those grouped under `zip:`, which advance together. The spec and each point's
// files are read by formats/sweep_spec_reader.hpp. Plain value types and pure functions; thread-safe.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zinf::core {

// Which file a field axis writes into.
enum class SweepTarget { Model, Hwprofile, Config };
const char* to_string(SweepTarget t);

// One axis: a list of files or node counts, or the values of one field.
struct SweepAxis {
  enum class Kind { Models, Hwprofiles, Configs, Nodes, Field };
  Kind kind = Kind::Field;
  SweepTarget target = SweepTarget::Config;  // Field only
  std::string key;                           // Field only: dotted path inside the file, "node.nvme.read_bandwidth"
  bool scale = false;                        // Field only: values are factors on the file's own value
  std::vector<std::string> texts;            // each value as the spec writes it (file names resolved to paths)
  std::vector<YAML::Node> values;            // Field, set: the YAML each value places
  std::vector<double> factors;               // Field, scale
  std::vector<int> lines;                    // spec line of each value (1-based)

  size_t size() const { return texts.size(); }
  // The CSV column of a field axis: "hwprofile.node.nvme.read_bandwidth", "... (scale)" for factors.
  std::string column() const;
};

// Axes that advance together (one axis alone, or the members of a `zip:`); the spec's points are
// the product of its groups, the first group outermost.
struct SweepGroup {
  std::vector<SweepAxis> axes;
  size_t size() const { return axes.empty() ? 0 : axes.front().size(); }
};

struct SweepSpec {
  std::string path;
  std::vector<SweepGroup> groups;
  std::string collective = "hierarchical";
  std::string output;  // CSV path as the spec gives it (relative to the working directory), or empty

  // Field axes in the order of their CSV columns.
  std::vector<const SweepAxis*> field_axes() const;
};

// One field value of a point.
struct FieldOverride {
  SweepTarget target = SweepTarget::Config;
  std::string key;
  bool scale = false;
  YAML::Node value;     // set
  double factor = 1.0;  // scale
  std::string origin;   // "SPEC:LINE", for messages
};

struct SweepPoint {
  // Names, or paths: relative to the zinf tree when the file lies in it (as the CSV names them), else
  // absolute. point_file turns one into what zinf sim's --model/--hw/--config take.
  std::string model, hwprofile, config;
  int nodes = 1;
  std::vector<FieldOverride> overrides;
  std::vector<std::string> coords;  // the text of each field axis's value, in column order
  // Identifies the point among the spec's (and a resumed CSV's rows).
  std::string key() const;
};

// The most points a spec may have: each is a simulation, and the points are expanded in memory.
inline constexpr uint64_t kMaxSweepPoints = 1'000'000;
// The number of points, the product of the groups' sizes, each step checked: throws ConfigError
// naming the spec, with the product so far, when it passes kMaxSweepPoints (or 64 bits).
uint64_t point_count(const SweepSpec& spec);

// Every point, in spec order (product of the groups, first group outermost); counted first.
std::vector<SweepPoint> expand(const SweepSpec& spec);

}  // namespace zinf::core
