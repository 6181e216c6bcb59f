// Fuzz target: model specs (core::parse_model_spec).
#include "core/model_spec.hpp"
#include "fuzz_target.hpp"
#include "formats/model_spec_reader.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) { core::parse_model_spec(std::string(input), "fuzz.yaml"); }
std::vector<std::string> builtin_seeds() { return {"name: f\nlayers: 2\nhidden: 64\nheads: 4\nseq: 32\nvocab: 256\n"}; }
}  // namespace zinf::fuzz
