// The reader of hardware profiles (hwprofiles/*.yaml, schema in hwprofiles/README.md) into a
// core::HwProfile: every key range-checked, unknown keys refused, each error a ConfigError naming
// the file and the key. Stateless functions; safe from several threads.
#pragma once
#include <string>

#include "core/hwprofile.hpp"

namespace zinf::core {

HwProfile load_hwprofile(const std::string& path);
HwProfile parse_hwprofile(const std::string& yaml_text, const std::string& name);

}  // namespace zinf::core
