#include "formats/deepspeed_release.hpp"

#include <stdexcept>

namespace zinf::core {

const std::vector<std::string>& known_deepspeed_releases() {
  static const std::vector<std::string> releases = {"0.3.12", "0.3.13", "0.3.14", "0.3.15", "0.3.16"};
  return releases;
}

DeepSpeedBehaviour deepspeed_release_behaviour(const std::string& release) {
  bool known = false;
  for (const auto& r : known_deepspeed_releases()) known = known || r == release;
  if (!known) {
    std::string list;
    for (const auto& r : known_deepspeed_releases()) list += (list.empty() ? "" : ", ") + r;
    throw std::invalid_argument("unknown DeepSpeed release '" + release + "' (known: " + list + ")");
  }
  DeepSpeedBehaviour b;
  b.release = release;
  // ZeRO-3 as it first shipped (PR 834, "ZeRO 3 Offload", tagged v0.3.12) to v0.5.4, on PyTorch
  // 1.7-1.8's list collectives.
  b.fetch_syncs_device = true;
  b.gather_device_passes = 3;
  b.reduce_device_passes = 2;
  b.prefetch_while_under_live = true;
  // v0.3.14 on: the hook-order bug of commit 7b46d11fa (2021-04-07).
  b.trace_misaligned = release >= "0.3.14";
  // v0.3.15 on: NVMe parameter offload (PR 976, "ZeRO-Infinity"), read ahead in forward only.
  b.backward_nvme_prefetch = release < "0.3.15";
  return b;
}

}  // namespace zinf::core
