// What a run config's values mean beside the config itself: the names of its tiers and policies,
// and the bytes per parameter of each model state. Pure functions.
#include <string>

#include "core/run_config.hpp"

namespace zinf::core {

const char* to_string(Tier t) {
  switch (t) {
    case Tier::Device: return "device";
    case Tier::Host: return "host";
    case Tier::Nvme: return "nvme";
  }
  return "?";
}

const char* to_string(ActivationPolicy p) {
  switch (p) {
    case ActivationPolicy::None: return "none";
    case ActivationPolicy::Lifetime: return "lifetime";
    case ActivationPolicy::OffloadAll: return "offload_all";
  }
  return "?";
}

const char* to_string(HostPath p) {
  switch (p) {
    case HostPath::Fused: return "fused";
    case HostPath::DeepSpeed03: return "deepspeed-0.3";
    case HostPath::DeepSpeed09: return "deepspeed-0.9";
  }
  return "?";
}

std::string to_string(const Placement& p) { return p.automatic ? "auto" : to_string(p.tier); }

double param_bytes(const RunConfig& c) { return element_bytes(c.precision.value_or(Precision::Bf16)); }
double grad_bytes(const RunConfig& c) { return element_bytes(c.precision.value_or(Precision::Bf16)); }
double optimizer_state_bytes(const RunConfig& c) {
  // Without ZeRO an fp32 run's optimizer updates the parameters themselves; every other run keeps
  // fp32 master weights (DeepSpeed's ZeRO optimizers clone them even in fp32).
  const bool master = !(c.precision == Precision::Fp32 && c.zero_stage == 0);
  return (master ? 4.0 : 0.0) + 4.0 * double(c.optimizer_states);
}

bool decoupled_weight_decay(const std::string& t) { return t == "adamw" || t == "lamb" || t == "lion" || t == "adafactor"; }

}  // namespace zinf::core
