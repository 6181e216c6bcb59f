// HfReader hands out the typed values of one config.json object and remembers which keys were
// read, so that every key nobody read is refused by name unless it is one that changes nothing zinf
// models. Internal to formats/hf_config.cpp and hf_families.cpp. Not thread-safe; one per file.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/errors.hpp"

namespace zinf::models {

class HfReader {
public:
  HfReader(nlohmann::json root, std::string file) : root_(std::move(root)), file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw core::ConfigError(file_, key, message);
  }
  // The key present and not null.
  bool has(const std::string& key) const;
  // The key present, null or not (null can mean "none" where absence means the default).
  bool contains(const std::string& key) const { return root_.contains(key); }
  // The first of `keys` present (a family's old and new names for one field, e.g. n_layer and
  // num_hidden_layers); two of them with different values are refused. Empty when none is.
  std::string which(std::initializer_list<const char*> keys);

  // An integer in [lowest, highest]; `fallback` when absent or null.
  int64_t integer(const std::string& key, int64_t lowest, int64_t highest, int64_t fallback);
  // An integer, or nullopt when absent or null.
  std::optional<int64_t> maybe_integer(const std::string& key, int64_t lowest, int64_t highest);
  double number(const std::string& key, double lowest, double highest, double fallback);
  bool flag(const std::string& key, bool fallback);
  std::string text(const std::string& key, const std::string& fallback);
  std::string choice(const std::string& key, const std::vector<std::string>& allowed, const std::string& fallback);
  std::vector<int64_t> integers(const std::string& key, int64_t lowest, int64_t highest);  // a list; absent or null: empty
  std::vector<std::string> strings(const std::string& key);  // a list of strings; absent or null: empty
  // rope_scaling: null or an object with a known type (it changes no parameter or FLOP zinf counts).
  // Returns the type, empty for none or "default" (the engine's kernels rotate without scaling).
  std::string rope_scaling();
  // Keys read without interpreting them: they change nothing zinf models.
  void accept(std::initializer_list<const char*> keys);
  // Refuses the first key nobody read that is not one of the keys every family may carry.
  void finish() const;

  const std::string& file() const { return file_; }

private:
  const nlohmann::json* at(const std::string& key);
  nlohmann::json root_;
  std::string file_;
  std::set<std::string> read_;
};

}  // namespace zinf::models
