#include "sim/build_info.hpp"

#include <xbt/base.h>
#include <simgrid/version.h>

#include <string>

namespace zinf::sim {
std::string simgrid_version() {
  return std::to_string(SIMGRID_VERSION_MAJOR) + "." + std::to_string(SIMGRID_VERSION_MINOR);
}
}  // namespace zinf::sim
