// Paths of the source tree's config folders, for tests.
#pragma once
#include <string>

namespace zinf::test {
inline std::string source(const std::string& rel) { return std::string(ZINF_SOURCE_DIR) + "/" + rel; }
}  // namespace zinf::test
