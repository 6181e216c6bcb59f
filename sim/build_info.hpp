// The SimGrid library this simulator was built against.
#pragma once
#include <string>

namespace zinf::sim {
std::string simgrid_version();
}
