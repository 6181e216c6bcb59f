#include "core/model_spec.hpp"

#include <fmt/format.h>

#include "core/config_reader.hpp"

namespace zinf::core {
namespace {

ModelSpec read(ConfigReader& r) {
  ModelSpec m;
  m.name = r.str("name");
  // Bounds far above any model zinf plans (100T parameters is ~1e14), so that every product of
  // them below stays exact and inside int64_t.
  m.layers = r.int_in("layers", 1, 1'000'000);
  m.hidden = r.int_in("hidden", 1, 1 << 20);
  m.heads = r.int_in("heads", 1, 1 << 16);
  m.ffn_multiple = r.int_in("ffn_multiple", 1, 64, 4);
  m.seq = r.int_in("seq", 1, 1 << 24);
  m.vocab = r.int_in("vocab", 1, 1 << 24);
  m.micro_batch = r.int_in("micro_batch", 1, 65536, 1);
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
  // Parameters, in doubles (no overflow): per layer (4 + 2·ffn)·hd², plus the embeddings.
  const double hd = double(m.hidden);
  const double params = double(m.layers) * (4.0 + 2.0 * double(m.ffn_multiple)) * hd * hd + double(m.vocab + m.seq) * hd;
  constexpr double kMaxParams = 1e16;
  if (params > kMaxParams)
    throw ConfigError(file, "layers",
                      fmt::format("the model would have {:.3g} parameters; zinf plans models up to {:.0e}", params, kMaxParams));
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
