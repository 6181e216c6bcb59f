// ConfigReader walks one YAML (or JSON) mapping and hands out typed values, remembering
// which keys were read so that keys nobody read are reported by name: an error for zinf's own
// files, a warning for DeepSpeed configs. A key given twice in one mapping is an error. Every failure is a ConfigError naming the file, the
// dotted key path and what is allowed. Not thread-safe; one reader per file being parsed.
#pragma once
#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/units.hpp"

namespace zinf::core {

class ConfigReader {
public:
  // Parses `path`; throws ConfigError if it cannot be read or parsed.
  static ConfigReader from_file(const std::string& path);
  static ConfigReader from_string(const std::string& text, const std::string& name);
  ConfigReader(YAML::Node node, std::string file, std::string prefix);

  bool has(const std::string& key) const;
  ConfigReader child(const std::string& key);            // required mapping
  std::optional<ConfigReader> maybe_child(const std::string& key);

  std::string str(const std::string& key);
  std::string str(const std::string& key, const std::string& fallback);
  std::string choice(const std::string& key, const std::vector<std::string>& allowed, const std::string& fallback);
  std::string choice(const std::string& key, const std::vector<std::string>& allowed);
  int64_t positive_int(const std::string& key);
  int64_t positive_int(const std::string& key, int64_t fallback);
  int64_t non_negative_int(const std::string& key, int64_t fallback);
  // Integers and numbers within [lowest, highest]: every number a config gives is range-checked
  // before it is used. Integers never exceed 2^53 (exact in a double, no overflow in int64_t).
  int64_t int_in(const std::string& key, int64_t lowest, int64_t highest);
  int64_t int_in(const std::string& key, int64_t lowest, int64_t highest, int64_t fallback);
  double number_in(const std::string& key, UnitKind kind, double lowest, double highest);
  double number_in(const std::string& key, UnitKind kind, double lowest, double highest, double fallback);
  double fraction_below_one(const std::string& key, double fallback);  // in [0, 1): Adam's betas
  bool boolean(const std::string& key, bool fallback);
  double positive_number(const std::string& key, UnitKind kind);
  double positive_number(const std::string& key, UnitKind kind, double fallback);
  double non_negative_number(const std::string& key, UnitKind kind, double fallback);
  double fraction(const std::string& key, double fallback);  // in [0, 1]
  std::vector<std::pair<double, double>> curve(const std::string& key);  // [[x, y], ...] with x increasing
  // A non-empty list of distinct words, each one of `allowed`.
  std::vector<std::string> list(const std::string& key, const std::vector<std::string>& allowed);
  std::vector<int64_t> int_list(const std::string& key, int64_t lowest, int64_t highest);  // [a, b, ...], not empty
  // Marks a key as read without interpreting it (documentation-only fields).
  void ignore(const std::string& key);

  // Keys present in the mapping that nothing read, as dotted paths.
  std::vector<std::string> unread_keys() const;
  // Throws ConfigError for the first unread key.
  void reject_unread() const;

  const std::string& file() const { return file_; }
  std::string path(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // A value as an error message quotes it: at most 64 characters, then its length.
  static std::string shown(const std::string& value);

private:
  YAML::Node value(const std::string& key) const;
  double number(const std::string& key, UnitKind kind);
  int64_t integer(const std::string& key, double lowest, double highest);

  YAML::Node node_;
  std::string file_;
  std::string prefix_;
  std::shared_ptr<std::set<std::string>> read_;  // shared with children, by dotted path
};

}  // namespace zinf::core
