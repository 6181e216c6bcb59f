// LossScaler is fp16's loss scale between steps, as DeepSpeed's fp16 optimizers keep it
// (runtime/fp16/loss_scaler.py): a static scale (core::LossScaleConfig::static_scale > 0) that never
// changes, or a dynamic one that starts at 2^initial_scale_power, is halved (not below min_scale)
// when an overflowing step finds its hysteresis used up and otherwise spends one unit of it, and is
// doubled after every `window` consecutive steps without an overflow (which also refill the
// hysteresis; with consecutive_hysteresis every such step does). An overflow at the minimum scale
// with no hysteresis left stops the run, as DeepSpeed's default does. Either way an overflowing step
// is skipped and counted. Its state travels in a checkpoint's meta.json. One per Trainer; not
// thread-safe.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/run_config.hpp"

namespace zinf::engine {

// An overflow with the scale at its minimum and no hysteresis left: DeepSpeed's "Current loss scale
// already at minimum - cannot decrease scale anymore".
class LossScaleAtMinimum : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class LossScaler {
public:
  explicit LossScaler(const core::LossScaleConfig& config);

  double scale() const { return scale_; }
  bool dynamic() const { return config_.static_scale <= 0; }
  int64_t skipped() const { return skipped_; }          // overflowing steps so far, across resumes
  int64_t hysteresis_left() const { return hysteresis_; }

  // After a step whose gradients did (`overflow`) or did not overflow: the next scale. Returns, for
  // an overflow, the line the user is told (the step skipped, the scale before and after), else "".
  // Throws LossScaleAtMinimum where DeepSpeed stops.
  std::string update(bool overflow);

  // The state for meta.json, and back: from_json refuses (std::runtime_error naming `file`) a
  // field that is missing, of the wrong type or out of range.
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j, const std::string& file);

private:
  core::LossScaleConfig config_;
  double scale_;
  int64_t iter_ = 0;                 // steps seen (DeepSpeed's cur_iter)
  int64_t last_overflow_iter_ = -1;  // the last overflowing one, -1 for none
  int64_t hysteresis_;               // overflows still absorbed before the scale is halved
  int64_t skipped_ = 0;
};

// A resume: the scaler's state from a checkpoint's meta.json (`loss_scaler`), for an fp16 run
// (`scaler` set). A checkpoint without one was saved by a bf16 or fp32 run (or before loss
// scaling): an fp16 run refuses it rather than restart the scale from its initial value unsaid.
void resume_loss_scaler(std::optional<LossScaler>& scaler, const nlohmann::json& meta, const std::string& file);

}  // namespace zinf::engine
