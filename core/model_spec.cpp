#include "core/model_spec.hpp"

#include <fmt/format.h>

#include "core/config_reader.hpp"

namespace zinf::core {
namespace {

ModelSpec read(ConfigReader& r) {
  ModelSpec m;
  m.name = r.str("name");
  m.layers = r.positive_int("layers");
  m.hidden = r.positive_int("hidden");
  m.heads = r.positive_int("heads");
  m.ffn_multiple = r.positive_int("ffn_multiple", 4);
  m.seq = r.positive_int("seq");
  m.vocab = r.positive_int("vocab");
  m.micro_batch = r.positive_int("micro_batch", 1);
  m.tied_embeddings = r.boolean("tied_embeddings", true);
  r.ignore("description");
  r.reject_unread();
  validate(m, r.file());
  return m;
}

}  // namespace

void validate(const ModelSpec& m, const std::string& file) {
  if (m.hidden % m.heads != 0)
    throw ConfigError(file, "heads", fmt::format("hidden ({}) must be divisible by heads ({})", m.hidden, m.heads));
}

ModelSpec load_model_spec(const std::string& path) {
  auto r = ConfigReader::from_file(path);
  return read(r);
}

ModelSpec parse_model_spec(const std::string& yaml_text, const std::string& name) {
  auto r = ConfigReader::from_string(yaml_text, name);
  return read(r);
}

}  // namespace zinf::core
