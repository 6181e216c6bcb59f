#include "engine/train/loss_scaler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace zinf::engine {

LossScaler::LossScaler(const core::LossScaleConfig& config)
    : config_(config),
      scale_(config.static_scale > 0 ? config.static_scale : std::ldexp(1.0, int(config.initial_scale_power))),
      hysteresis_(config.hysteresis) {
  if (config.window < 1 || config.hysteresis < 1 || !(config.min_scale > 0) || config.initial_scale_power < 0 ||
      config.initial_scale_power > 64 || !(config.static_scale >= 0))
    throw std::invalid_argument(fmt::format("loss scale: window {}, hysteresis {} and min_scale {} must be positive, "
                                            "initial_scale_power {} within [0, 64], static scale {} not negative",
                                            config.window, config.hysteresis, config.min_scale,
                                            config.initial_scale_power, config.static_scale));
}

std::string LossScaler::update(bool overflow) {
  const int64_t iter = iter_++;
  if (overflow) ++skipped_;
  if (!dynamic())
    return overflow ? fmt::format("fp16 overflow: step skipped (static loss scale {:g})", scale_) : "";
  if (overflow) {
    last_overflow_iter_ = iter;
    if (config_.hysteresis > 1 && hysteresis_ > 1) {
      --hysteresis_;
      return fmt::format("fp16 overflow: step skipped; loss scale {:g} kept, hysteresis {} left", scale_, hysteresis_);
    }
    if (scale_ == config_.min_scale)
      throw LossScaleAtMinimum(fmt::format("fp16 overflow at the minimum loss scale {:g} (min_loss_scale): it cannot "
                                           "be lowered further, so the run stops, as DeepSpeed's does; lower "
                                           "min_loss_scale or train in bf16 or fp32",
                                           scale_));
    const double before = scale_;
    scale_ = std::max(scale_ / 2, config_.min_scale);
    return fmt::format("fp16 overflow: step skipped; loss scale {:g} -> {:g}", before, scale_);
  }
  if (config_.consecutive_hysteresis) hysteresis_ = config_.hysteresis;
  const int64_t stable = iter - last_overflow_iter_ - 1;  // steps without an overflow before this one
  if (stable > 0 && stable % config_.window == 0) {
    if (!config_.consecutive_hysteresis) hysteresis_ = config_.hysteresis;
    scale_ *= 2;
  }
  return "";
}

nlohmann::json LossScaler::to_json() const {
  return {{"scale", scale_}, {"iter", iter_}, {"last_overflow_iter", last_overflow_iter_},
          {"hysteresis_left", hysteresis_}, {"skipped", skipped_}};
}

void LossScaler::from_json(const nlohmann::json& j, const std::string& file) {
  const auto bad = [&](const char* key, const char* want) {
    return std::runtime_error(fmt::format("checkpoint {}: field 'loss_scaler.{}' must be {}", file, key, want));
  };
  if (!j.is_object()) throw std::runtime_error(fmt::format("checkpoint {}: field 'loss_scaler' must be an object", file));
  const auto integer = [&](const char* key, int64_t lowest) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < lowest)
      throw bad(key, lowest < 0 ? "an integer from -1" : "a non-negative integer");
    return j[key].get<int64_t>();
  };
  if (!j.contains("scale") || !j["scale"].is_number() || !std::isfinite(j["scale"].get<double>()) ||
      !(j["scale"].get<double>() > 0))
    throw bad("scale", "a positive finite number");
  const double scale = j["scale"].get<double>();
  const int64_t iter = integer("iter", 0), last = integer("last_overflow_iter", -1), hyst = integer("hysteresis_left", 0),
                skipped = integer("skipped", 0);
  if (last >= iter || skipped > iter) throw bad("last_overflow_iter", "below 'iter', and 'skipped' at most 'iter'");
  if (hyst < 1 || hyst > config_.hysteresis) throw bad("hysteresis_left", "within [1, the run's hysteresis]");
  scale_ = scale;
  iter_ = iter;
  last_overflow_iter_ = last;
  hysteresis_ = hyst;
  skipped_ = skipped;
}

void resume_loss_scaler(std::optional<LossScaler>& scaler, const nlohmann::json& meta, const std::string& file) {
  if (!scaler) return;  // bf16 and fp32 train unscaled: a saved scaler (an fp16 run's) has nothing to set
  if (!meta.contains("loss_scaler"))
    throw std::runtime_error(fmt::format("checkpoint {}: no field 'loss_scaler': it was saved by a bf16 or fp32 run, "
                                         "and this fp16 run needs its loss scale's state to resume exactly",
                                         file));
  scaler->from_json(meta["loss_scaler"], file);
}

}  // namespace zinf::engine
