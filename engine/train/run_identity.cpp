#include "engine/train/run_identity.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <stdexcept>

#include "engine/io/crc32c.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::engine {
namespace {

void flatten(const YAML::Node& n, const std::string& prefix, RunFields& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, prefix.empty() ? kv.first.Scalar() : prefix + "." + kv.first.Scalar(), out);
  } else if (n.IsSequence()) {
    std::string joined;
    for (const auto& e : n) joined += (joined.empty() ? "" : ", ") + YAML::Dump(e);
    out[prefix] = "[" + joined + "]";
  } else {
    out[prefix] = n.IsNull() ? "" : n.Scalar();
  }
}

}  // namespace

RunFields config_fields(const core::RunConfig& config) {
  RunFields fields;
  flatten(YAML::Load(core::run_config_to_yaml(config, "")), "", fields);
  fields.erase("description");
  RunFields out;
  for (auto& [k, v] : fields) out["config." + k] = std::move(v);
  return out;
}

RunFields model_fields(const core::ModelSpec& m) {
  return {{"model.layers", std::to_string(m.layers)},   {"model.hidden", std::to_string(m.hidden)},
          {"model.heads", std::to_string(m.heads)},     {"model.seq", std::to_string(m.seq)},
          {"model.vocab", std::to_string(m.vocab)},     {"model.micro_batch", std::to_string(m.micro_batch)},
          {"model.ffn_multiple", std::to_string(m.ffn_multiple)},
          {"model.tied_embeddings", m.tied_embeddings ? "true" : "false"}};
}

nlohmann::json DataIdentity::to_json() const {
  return {{"tokens", tokens}, {"head_crc32c", head_crc32c}, {"source", source}};
}

DataIdentity DataIdentity::from_json(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_number_unsigned() || !j.contains("head_crc32c") ||
      !j["head_crc32c"].is_number_unsigned() || j["head_crc32c"].get<uint64_t>() > 0xffffffffull)
    throw std::runtime_error(fmt::format("checkpoint {}: field 'data' needs tokens and head_crc32c", file));
  DataIdentity d;
  d.tokens = j["tokens"].get<uint64_t>();
  d.head_crc32c = uint32_t(j["head_crc32c"].get<uint64_t>());
  if (j.contains("source") && j["source"].is_string()) d.source = j["source"].get<std::string>().substr(0, 4096);
  return d;
}

std::string DataIdentity::describe() const {
  return fmt::format("{} tokens (CRC32C of the first {}: {:08x}){}", tokens, std::min<uint64_t>(tokens, kHeadTokens),
                     head_crc32c, source.empty() ? "" : " from " + source);
}

// The checksum is of the head's ids as 16-bit values when they all fit, as 32-bit ones otherwise:
// the same ids give the same identity whichever width holds them, and a 16-bit corpus keeps the
// identity its checkpoints recorded before ids could be 32 bits.
DataIdentity data_identity(const TokenCorpus& corpus) {
  DataIdentity d;
  d.tokens = corpus.tokens.size();
  const size_t head = size_t(std::min<uint64_t>(d.tokens, DataIdentity::kHeadTokens));
  if (!corpus.tokens.wide()) {
    d.head_crc32c = crc32c(corpus.tokens.narrow().data(), head * sizeof(uint16_t));
  } else {
    const auto& ids = corpus.tokens.wide_ids();
    if (std::all_of(ids.begin(), ids.begin() + std::ptrdiff_t(head), [](uint32_t id) { return id <= UINT16_MAX; })) {
      const std::vector<uint16_t> narrow(ids.begin(), ids.begin() + std::ptrdiff_t(head));
      d.head_crc32c = crc32c(narrow.data(), head * sizeof(uint16_t));
    } else {
      d.head_crc32c = crc32c(ids.data(), head * sizeof(uint32_t));
    }
  }
  d.source = corpus.source;
  return d;
}

std::vector<std::string> field_differences(const RunFields& before, const RunFields& now) {
  std::vector<std::string> out;
  auto a = before.begin(), b = now.begin();
  const auto shown = [](const std::string& v) { return v.empty() ? std::string("(empty)") : v; };
  while (a != before.end() || b != now.end()) {
    if (b == now.end() || (a != before.end() && a->first < b->first)) {
      out.push_back(fmt::format("{}: {} -> (none)", a->first, shown(a->second)));
      ++a;
    } else if (a == before.end() || b->first < a->first) {
      out.push_back(fmt::format("{}: (none) -> {}", b->first, shown(b->second)));
      ++b;
    } else {
      if (a->second != b->second) out.push_back(fmt::format("{}: {} -> {}", a->first, shown(a->second), shown(b->second)));
      ++a;
      ++b;
    }
  }
  return out;
}

nlohmann::json fields_to_json(const RunFields& fields) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : fields) j[k] = v;
  return j;
}

RunFields fields_from_json(const nlohmann::json& j, const std::string& file, const std::string& key) {
  if (!j.is_object()) throw std::runtime_error(fmt::format("checkpoint {}: field '{}' must be an object", file, key));
  RunFields out;
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string())
      throw std::runtime_error(fmt::format("checkpoint {}: field '{}.{}' must be a string", file, key, k.substr(0, 64)));
    out[k] = v.get<std::string>();
  }
  return out;
}

}  // namespace zinf::engine
