// What identifies a training run, as named fields: the run config key by key, the data (its size
// and a checksum of its head), the model. The ranks of a job must agree on them before training
// (engine/comm/agreement.hpp), and a checkpoint records them so that a resume can name each one
// that changed. Stateless functions, safe from any thread.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model_spec.hpp"
#include "core/run_config.hpp"
#include "engine/data/token_data.hpp"

namespace zinf::engine {

// Named values, by name.
using RunFields = std::map<std::string, std::string>;

// The run config key by key ("optimizer.lr" -> "0.001"), as run_config_to_yaml writes it: every
// key, defaults included, so two configs that differ in any value differ in a field.
RunFields config_fields(const core::RunConfig& config);
// The model's shape and micro-batch ("model.layers" -> "2").
RunFields model_fields(const core::ModelSpec& model);

// Which data a run trains on: how many tokens, and a CRC32C of the first kHeadTokens of them (a
// cheap identity: another file, or the same one edited near its start, differs).
struct DataIdentity {
  static constexpr uint64_t kHeadTokens = 1 << 20;
  uint64_t tokens = 0;
  uint32_t head_crc32c = 0;
  std::string source;  // for messages only: the same data under another name is the same data

  nlohmann::json to_json() const;
  // Throws std::runtime_error naming `file` unless `j` holds tokens and head_crc32c.
  static DataIdentity from_json(const nlohmann::json& j, const std::string& file);
  std::string describe() const;  // "N tokens (head CRC32C xxxxxxxx) from SOURCE"
  bool same_as(const DataIdentity& o) const { return tokens == o.tokens && head_crc32c == o.head_crc32c; }
};
DataIdentity data_identity(const TokenCorpus& corpus);

// Each field whose value differs between `before` and `now`, or that only one of them has, as
// "name: A -> B" (a missing value shows as "(none)"), in name order.
std::vector<std::string> field_differences(const RunFields& before, const RunFields& now);

// RunFields to and from a JSON object of strings; from_json throws std::runtime_error naming `file`.
nlohmann::json fields_to_json(const RunFields& fields);
RunFields fields_from_json(const nlohmann::json& j, const std::string& file, const std::string& key);

}  // namespace zinf::engine
