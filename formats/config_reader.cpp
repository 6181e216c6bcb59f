#include "formats/config_reader.hpp"

#include "formats/bounded_input.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace zinf::core {

namespace {

// The largest integer every config integer may be: exactly representable as a double (the reader
// parses numbers as doubles), so no cast to int64_t overflows.
constexpr double kMaxConfigInt = 9007199254740992.0;  // 2^53

// Rejects a mapping that names a key twice: yaml-cpp keeps the first value and Python's json the
// last, so either reading would silently differ from what the other tool does.
void reject_duplicate_keys(const YAML::Node& n, const std::string& name, const std::string& prefix) {
  if (n.IsSequence()) {
    for (std::size_t i = 0; i < n.size(); ++i) reject_duplicate_keys(n[i], name, prefix);
    return;
  }
  if (!n.IsMap()) return;
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("?");
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (!seen.insert(key).second)
      throw ConfigError(name, ConfigReader::shown(path),
                        fmt::format("appears twice (line {}); give each key once", it->first.Mark().line + 1));
    reject_duplicate_keys(it->second, name, path);
  }
}

}  // namespace

std::string ConfigReader::shown(const std::string& value) {
  constexpr std::size_t kLongest = 64;
  if (value.size() <= kLongest) return value;
  return value.substr(0, kLongest) + fmt::format("... ({} bytes)", value.size());
}

ConfigReader ConfigReader::from_file(const std::string& path) {
  return from_string(read_bounded_file(path, kMaxConfigBytes, "file"), path);
}

ConfigReader ConfigReader::from_string(const std::string& text, const std::string& name) {
  const YAML::Node root = load_bounded_yaml(text, name);
  if (!root.IsMap()) throw ConfigError(name, "", "expected a mapping of keys at the top level");
  reject_duplicate_keys(root, name, "");
  return ConfigReader(root, name, "");
}

ConfigReader::ConfigReader(YAML::Node node, std::string file, std::string prefix)
    : node_(std::move(node)), file_(std::move(file)), prefix_(std::move(prefix)),
      read_(std::make_shared<std::set<std::string>>()) {}

void ConfigReader::fail(const std::string& key, const std::string& message) const {
  throw ConfigError(file_, path(key), message);
}

bool ConfigReader::has(const std::string& key) const { return node_[key].IsDefined() && !node_[key].IsNull(); }

YAML::Node ConfigReader::value(const std::string& key) const {
  read_->insert(path(key));
  return node_[key];
}

ConfigReader ConfigReader::child(const std::string& key) {
  YAML::Node n = value(key);
  if (!n.IsDefined() || n.IsNull()) fail(key, "missing; a mapping is required here");
  if (!n.IsMap()) fail(key, "must be a mapping of keys");
  ConfigReader c(n, file_, path(key));
  c.read_ = read_;
  return c;
}

std::optional<ConfigReader> ConfigReader::maybe_child(const std::string& key) {
  if (!has(key)) {
    read_->insert(path(key));
    return std::nullopt;
  }
  return child(key);
}

void ConfigReader::ignore(const std::string& key) { read_->insert(path(key)); }

std::string ConfigReader::str(const std::string& key) {
  YAML::Node n = value(key);
  if (!n.IsDefined() || n.IsNull()) fail(key, "missing; a string is required");
  if (!n.IsScalar()) fail(key, "must be a string");
  return n.Scalar();
}

std::string ConfigReader::str(const std::string& key, const std::string& fallback) {
  return has(key) ? str(key) : (ignore(key), fallback);
}

std::string ConfigReader::choice(const std::string& key, const std::vector<std::string>& allowed) {
  std::string v = str(key);
  for (const auto& a : allowed)
    if (a == v) return v;
  fail(key, fmt::format("'{}' is not allowed; expected one of: {}", shown(v), fmt::join(allowed, ", ")));
}

std::string ConfigReader::choice(const std::string& key, const std::vector<std::string>& allowed,
                                 const std::string& fallback) {
  if (!has(key)) {
    ignore(key);
    return fallback;
  }
  return choice(key, allowed);
}

double ConfigReader::number(const std::string& key, UnitKind kind) {
  YAML::Node n = value(key);
  if (!n.IsDefined() || n.IsNull()) fail(key, "missing; a number is required");
  if (!n.IsScalar()) fail(key, "must be a number");
  auto v = parse_quantity(n.Scalar(), kind);
  if (!v) {
    const char* what = kind == UnitKind::Bytes            ? "a size such as 32 GiB or 1.5 TB"
                       : kind == UnitKind::BytesPerSecond ? "a bandwidth such as 12 GB/s"
                       : kind == UnitKind::FlopsPerSecond ? "a rate such as 125 TFLOP/s"
                       : kind == UnitKind::Seconds        ? "a duration such as 5 us"
                                                          : "a number";
    fail(key, fmt::format("'{}' is not {}", shown(n.Scalar()), what));
  }
  return *v;
}

int64_t ConfigReader::integer(const std::string& key, double lowest, double highest) {
  double v = number(key, UnitKind::Count);
  if (v < lowest || v > highest) {
    const std::string what = lowest == 1   ? fmt::format("a positive integer (at most {})", int64_t(highest))
                             : lowest == 0 ? fmt::format("zero or a positive integer (at most {})", int64_t(highest))
                                           : fmt::format("an integer from {} to {}", int64_t(lowest), int64_t(highest));
    fail(key, fmt::format("must be {}, got {}", what, v));
  }
  if (v != std::floor(v)) fail(key, fmt::format("must be an integer, got {}", v));
  return static_cast<int64_t>(v);
}

int64_t ConfigReader::positive_int(const std::string& key) { return integer(key, 1, kMaxConfigInt); }

int64_t ConfigReader::int_in(const std::string& key, int64_t lowest, int64_t highest) {
  return integer(key, double(lowest), double(highest));
}

int64_t ConfigReader::int_in(const std::string& key, int64_t lowest, int64_t highest, int64_t fallback) {
  if (!has(key)) return ignore(key), fallback;
  return int_in(key, lowest, highest);
}

double ConfigReader::number_in(const std::string& key, UnitKind kind, double lowest, double highest) {
  double v = number(key, kind);
  if (v < lowest || v > highest)
    fail(key, fmt::format("must be {}from {} to {}, got {}", lowest > 0 && v <= 0 ? "positive, " : "", lowest, highest, v));
  return v;
}

double ConfigReader::number_in(const std::string& key, UnitKind kind, double lowest, double highest, double fallback) {
  if (!has(key)) return ignore(key), fallback;
  return number_in(key, kind, lowest, highest);
}

double ConfigReader::fraction_below_one(const std::string& key, double fallback) {
  if (!has(key)) return ignore(key), fallback;
  double v = number(key, UnitKind::Count);
  if (!(v >= 0 && v < 1)) fail(key, fmt::format("must be at least 0 and below 1, got {}", v));
  return v;
}

int64_t ConfigReader::positive_int(const std::string& key, int64_t fallback) {
  if (!has(key)) return ignore(key), fallback;
  return positive_int(key);
}

int64_t ConfigReader::non_negative_int(const std::string& key, int64_t fallback) {
  if (!has(key)) return ignore(key), fallback;
  return integer(key, 0, kMaxConfigInt);
}

bool ConfigReader::boolean(const std::string& key, bool fallback) {
  if (!has(key)) return ignore(key), fallback;
  YAML::Node n = value(key);
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "False" || s == "no" || s == "off") return false;
  }
  fail(key, "must be true or false");
}

double ConfigReader::positive_number(const std::string& key, UnitKind kind) {
  double v = number(key, kind);
  if (v <= 0) fail(key, fmt::format("must be positive, got {}", v));
  return v;
}

double ConfigReader::positive_number(const std::string& key, UnitKind kind, double fallback) {
  if (!has(key)) return ignore(key), fallback;
  return positive_number(key, kind);
}

double ConfigReader::non_negative_number(const std::string& key, UnitKind kind, double fallback) {
  if (!has(key)) return ignore(key), fallback;
  double v = number(key, kind);
  if (v < 0) fail(key, fmt::format("must not be negative, got {}", v));
  return v;
}

double ConfigReader::fraction(const std::string& key, double fallback) {
  if (!has(key)) return ignore(key), fallback;
  double v = number(key, UnitKind::Count);
  if (v < 0 || v > 1) fail(key, fmt::format("must be a fraction between 0 and 1, got {}", v));
  return v;
}

std::vector<std::pair<double, double>> ConfigReader::curve(const std::string& key) {
  YAML::Node n = value(key);
  if (!n.IsSequence() || n.size() == 0) fail(key, "must be a list of [x, y] points");
  std::vector<std::pair<double, double>> pts;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const auto& p = n[i];
    if (!p.IsSequence() || p.size() != 2) fail(key, fmt::format("point {} must be [x, y]", i));
    auto x = parse_quantity(p[0].Scalar(), UnitKind::Count);
    auto y = parse_quantity(p[1].Scalar(), UnitKind::Count);
    if (!x || !y) fail(key, fmt::format("point {} must hold two numbers", i));
    if (!pts.empty() && *x <= pts.back().first) fail(key, fmt::format("point {}: x must increase", i));
    pts.emplace_back(*x, *y);
  }
  return pts;
}

std::vector<std::string> ConfigReader::list(const std::string& key, const std::vector<std::string>& allowed) {
  YAML::Node n = value(key);
  const std::string expected = fmt::format("a list of distinct words from: {}", fmt::join(allowed, ", "));
  if (!n.IsSequence() || n.size() == 0) fail(key, "must be " + expected);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string w = n[i].IsScalar() ? n[i].Scalar() : std::string();
    if (std::find(allowed.begin(), allowed.end(), w) == allowed.end() ||
        std::find(out.begin(), out.end(), w) != out.end())
      fail(key, fmt::format("entry {} ('{}') is not allowed; the key must be {}", i, shown(w), expected));
    out.push_back(w);
  }
  return out;
}

std::vector<int64_t> ConfigReader::int_list(const std::string& key, int64_t lowest, int64_t highest) {
  YAML::Node n = value(key);
  if (!n.IsSequence() || n.size() == 0) fail(key, "must be a list of integers");
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    auto v = n[i].IsScalar() ? parse_quantity(n[i].Scalar(), UnitKind::Count) : std::nullopt;
    if (!v || *v != std::floor(*v) || *v < double(lowest) || *v > double(highest))
      fail(key, fmt::format("entry {} must be an integer from {} to {}", i, lowest, highest));
    out.push_back(static_cast<int64_t>(*v));
  }
  return out;
}

std::vector<std::string> ConfigReader::unread_keys() const {
  std::vector<std::string> out;
  // Walk the tree: a key counts as read if it or any ancestor path was read as a leaf.
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n, const std::string& pre) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string k = pre.empty() ? it->first.Scalar() : pre + "." + it->first.Scalar();
      if (!read_->count(k)) {
        out.push_back(k);
        continue;
      }
      if (it->second.IsMap()) {
        // Only descend if some child was read through child(); leaves read whole are fine.
        bool any_child = false;
        for (const auto& r : *read_)
          if (r.size() > k.size() && r.compare(0, k.size() + 1, k + ".") == 0) any_child = true;
        if (any_child) walk(it->second, k);
      }
    }
  };
  if (node_.IsMap()) walk(node_, prefix_);
  return out;
}

void ConfigReader::reject_unread() const {
  auto keys = unread_keys();
  if (!keys.empty()) throw ConfigError(file_, keys.front(), "unknown key (check its spelling against the documented schema)");
}

}  // namespace zinf::core
