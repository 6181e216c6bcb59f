// ModelSpec is what a models/*.yaml file says about a GPT-family model: its shape and the
// micro-batch it trains with. Plain value type.
#pragma once
#include <cstdint>
#include <string>

namespace zinf::core {

struct ModelSpec {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t ffn_multiple = 4;  // MLP inner size = ffn_multiple * hidden
  int64_t seq = 0;           // sequence length (also the number of learned positions)
  int64_t vocab = 0;
  int64_t micro_batch = 1;   // sequences per rank per micro-batch
  bool tied_embeddings = true;

  int64_t ffn_hidden() const { return ffn_multiple * hidden; }
  int64_t head_dim() const { return hidden / heads; }
};

// Loads and validates a model spec; throws ConfigError naming the file and key.
ModelSpec load_model_spec(const std::string& path);
ModelSpec parse_model_spec(const std::string& yaml_text, const std::string& name);
void validate(const ModelSpec& m, const std::string& file);

}  // namespace zinf::core
