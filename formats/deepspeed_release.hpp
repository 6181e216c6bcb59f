// The DeepSpeed releases whose ZeRO-3 engines zinf has read, each with its behaviours
// (core::DeepSpeedBehaviour), for a run config's `deepspeed_release:`. Stateless functions; safe from
// several threads.
#pragma once
#include <string>
#include <vector>

#include "core/deepspeed_release.hpp"

namespace zinf::core {

// The behaviours of a DeepSpeed release: 0.3.12 to 0.3.16, the releases read. Throws
// std::invalid_argument naming the releases known for any other.
DeepSpeedBehaviour deepspeed_release_behaviour(const std::string& release);
const std::vector<std::string>& known_deepspeed_releases();

}  // namespace zinf::core
