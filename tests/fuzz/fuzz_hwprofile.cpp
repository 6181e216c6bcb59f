// Fuzz target: hardware profiles (core::parse_hwprofile).
#include "core/hwprofile.hpp"
#include "fuzz_target.hpp"
#include "formats/hwprofile_reader.hpp"

namespace zinf::fuzz {
void fuzz_one(std::string_view input) { core::parse_hwprofile(std::string(input), "fuzz.yaml"); }
std::vector<std::string> builtin_seeds() { return {}; }
}  // namespace zinf::fuzz
