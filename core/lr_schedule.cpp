#include "core/lr_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace zinf::core {

const char* to_string(LrScheduleKind k) {
  switch (k) {
    case LrScheduleKind::Constant: return "constant";
    case LrScheduleKind::Warmup: return "warmup";
    case LrScheduleKind::WarmupLR: return "WarmupLR";
    case LrScheduleKind::WarmupDecayLR: return "WarmupDecayLR";
    case LrScheduleKind::WarmupCosineLR: return "WarmupCosineLR";
    case LrScheduleKind::OneCycle: return "OneCycle";
    case LrScheduleKind::LRRangeTest: return "LRRangeTest";
  }
  return "?";
}

const char* to_string(LrDecay d) {
  switch (d) {
    case LrDecay::Constant: return "constant";
    case LrDecay::Linear: return "linear";
    case LrDecay::Cosine: return "cosine";
  }
  return "?";
}

namespace {

// DeepSpeed's warmup classes warm up over at least 2 iterations (max(2, warmup_num_steps)).
int64_t deepspeed_warmup(const LrSchedule& s) { return std::max<int64_t>(2, s.warmup_num_steps); }

// WarmupLR's and WarmupDecayLR's gamma during warmup at iteration i (i < warmup), in DeepSpeed's
// order of operations so that the doubles agree bit for bit.
double warmup_gamma(const LrSchedule& s, int64_t i) {
  const int64_t w = deepspeed_warmup(s);
  if (s.warmup_type == WarmupType::Log) return (1.0 / std::log(double(w))) * std::log(double(i + 1));
  return double(i) / double(w);
}

double warmup_lr_at(const LrSchedule& s, int64_t i) {
  const double min = s.warmup_min_lr, delta = *s.warmup_max_lr - s.warmup_min_lr;
  if (i < 0) return min;
  double gamma = 1.0;
  if (i < deepspeed_warmup(s)) {
    gamma = warmup_gamma(s, i);
  } else if (s.kind == LrScheduleKind::WarmupDecayLR) {
    const double total = double(*s.total_num_steps);
    gamma = std::max(0.0, (total - double(i)) / std::max(1.0, total - double(deepspeed_warmup(s))));
  }
  return min + delta * gamma;
}

double warmup_cosine_at(const LrSchedule& s, int64_t i, double lr) {
  if (i < 0) return 0.0;  // DeepSpeed's get_lr before the first scheduler step
  const int64_t w = deepspeed_warmup(s);
  double ratio;
  if (i < w) {
    ratio = warmup_gamma(s, i);
    ratio = s.warmup_min_ratio + ratio * (1. - s.warmup_min_ratio);
  } else {
    const double real_last = double(i - w + 1), real_total = double(*s.total_num_steps - w);
    ratio = (1 + std::cos(std::numbers::pi * real_last / real_total)) / 2;
    ratio = std::max(0.0, s.cos_min_ratio + (1. - s.cos_min_ratio) * ratio);
  }
  return lr * ratio;
}

struct OneCycleShape {
  double total, step_ratio;
  explicit OneCycleShape(const LrSchedule& s) {
    const double first = double(s.cycle_first_step_size);
    const double second = s.cycle_second_step_size ? double(*s.cycle_second_step_size) : first;
    total = first + second;
    step_ratio = first / total;
  }
  double scale(int64_t i) const {
    const double b = double(i + 1);
    const double cycle = std::floor(1 + b / total);
    const double x = 1. + b / total - cycle;
    return x <= step_ratio ? x / step_ratio : (x - 1) / (step_ratio - 1);
  }
};

StepRates one_cycle_at(const LrSchedule& s, int64_t i, double beta1, double beta2) {
  StepRates r{s.cycle_min_lr, beta1, beta2};
  if (s.cycle_momentum) r.beta2 = 0.99;  // DeepSpeed sets betas to (momentum, 0.99)
  if (i < 0) {
    if (s.cycle_momentum) r.beta1 = s.cycle_min_mom;
    return r;
  }
  const OneCycleShape shape(s);
  if (double(i) < shape.total) {
    const double f = shape.scale(i);
    r.lr = s.cycle_min_lr + (s.cycle_max_lr - s.cycle_min_lr) * f;
    if (s.cycle_momentum) r.beta1 = s.cycle_max_mom - (s.cycle_max_mom - s.cycle_min_mom) * f;
    return r;
  }
  const double decay_iteration = double(i) - shape.total + 1;
  const bool no_steps = s.decay_step_size == 0;
  if (!(no_steps || s.decay_lr_rate == 0))
    r.lr = s.cycle_min_lr / (1 + s.decay_lr_rate * (decay_iteration / double(s.decay_step_size)));
  if (s.cycle_momentum)
    r.beta1 = no_steps || s.decay_mom_rate == 0
                  ? s.cycle_max_mom
                  : s.cycle_max_mom * (1 + s.decay_mom_rate * (decay_iteration / double(s.decay_step_size)));
  return r;
}

double range_test_at(const LrSchedule& s, int64_t i) {
  if (i < 0) return s.lr_range_test_min_lr;
  const double b = double(i + 1), size = double(s.lr_range_test_step_size);
  const double interval = s.lr_range_test_staircase ? std::floor(b / size) : b / size;
  return s.lr_range_test_min_lr * (1 + s.lr_range_test_step_rate * interval);
}

double zinf_at(const LrSchedule& s, int64_t step, double lr) {
  const int64_t w = s.warmup_steps;
  if (w > 0 && step <= w) return lr * double(step) / double(w);
  if (s.decay == LrDecay::Constant) return lr;
  const double floor = s.min_lr ? *s.min_lr : s.min_lr_ratio * lr;
  const double p = std::clamp(double(step - w) / double(*s.decay_steps - w), 0.0, 1.0);
  if (s.decay == LrDecay::Linear) return lr + (floor - lr) * p;
  return floor + (lr - floor) * 0.5 * (1 + std::cos(std::numbers::pi * p));
}

}  // namespace

LrSchedule resolved(LrSchedule s, int64_t total_steps, double lr) {
  const auto need_total = [&](const char* key) {
    if (total_steps <= 0)
      throw std::invalid_argument(fmt::format("lr schedule {}: {} is auto (the run's steps), but no step count was given",
                                              to_string(s.kind), key));
    return total_steps;
  };
  switch (s.kind) {
    case LrScheduleKind::Constant:
    case LrScheduleKind::OneCycle:
    case LrScheduleKind::LRRangeTest: return s;
    case LrScheduleKind::Warmup:
      if (s.decay == LrDecay::Constant) return s;
      // `auto` is the run's last step; a run no longer than its warmup never reaches the decay.
      if (!s.decay_steps) s.decay_steps = std::max(need_total("decay_steps"), s.warmup_steps + 1);
      else if (*s.decay_steps <= s.warmup_steps)
        throw std::invalid_argument(fmt::format("lr_schedule: the decay ends at step {} (decay_steps), not after the "
                                                "warmup's {} steps: make decay_steps larger than warmup_steps",
                                                *s.decay_steps, s.warmup_steps));
      return s;
    case LrScheduleKind::WarmupLR:
    case LrScheduleKind::WarmupDecayLR:
    case LrScheduleKind::WarmupCosineLR:
      if (!s.warmup_max_lr) s.warmup_max_lr = lr;
      if (s.kind != LrScheduleKind::WarmupLR && !s.total_num_steps) s.total_num_steps = need_total("total_num_steps");
      if (s.kind == LrScheduleKind::WarmupCosineLR && *s.total_num_steps == deepspeed_warmup(s))
        throw std::invalid_argument(fmt::format("scheduler WarmupCosineLR: total_num_steps {} equals the warmup's {} "
                                                "steps: the cosine would last no step (DeepSpeed divides by zero there)",
                                                *s.total_num_steps, deepspeed_warmup(s)));
      return s;
  }
  return s;
}

StepRates rates_at(const LrSchedule& s, int64_t step, double lr, double beta1, double beta2) {
  const int64_t i = step - 2;  // DeepSpeed's last_batch_iteration when step `step` runs
  switch (s.kind) {
    case LrScheduleKind::Constant: return {lr, beta1, beta2};
    case LrScheduleKind::Warmup: return {zinf_at(s, step, lr), beta1, beta2};
    case LrScheduleKind::WarmupLR:
    case LrScheduleKind::WarmupDecayLR: return {warmup_lr_at(s, i), beta1, beta2};
    case LrScheduleKind::WarmupCosineLR: return {warmup_cosine_at(s, i, lr), beta1, beta2};
    case LrScheduleKind::OneCycle: return one_cycle_at(s, i, beta1, beta2);
    case LrScheduleKind::LRRangeTest: return {range_test_at(s, i), beta1, beta2};
  }
  return {lr, beta1, beta2};
}

nlohmann::json to_json(const LrSchedule& s) {
  nlohmann::json j = {{"type", to_string(s.kind)}};
  const auto or_auto = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json("auto"); };
  const char* warmup_type = s.warmup_type == WarmupType::Log ? "log" : "linear";
  switch (s.kind) {
    case LrScheduleKind::Constant: break;
    case LrScheduleKind::Warmup:
      j["warmup_steps"] = s.warmup_steps;
      j["decay"] = to_string(s.decay);
      if (s.decay != LrDecay::Constant) {
        j["decay_steps"] = or_auto(s.decay_steps);
        if (s.min_lr) j["min_lr"] = *s.min_lr;
        else j["min_lr_ratio"] = s.min_lr_ratio;
      }
      break;
    case LrScheduleKind::WarmupLR:
    case LrScheduleKind::WarmupDecayLR:
      j["params"] = {{"warmup_min_lr", s.warmup_min_lr}, {"warmup_max_lr", or_auto(s.warmup_max_lr)},
                     {"warmup_num_steps", s.warmup_num_steps}, {"warmup_type", warmup_type}};
      if (s.kind == LrScheduleKind::WarmupDecayLR) j["params"]["total_num_steps"] = or_auto(s.total_num_steps);
      break;
    case LrScheduleKind::WarmupCosineLR:
      j["params"] = {{"total_num_steps", or_auto(s.total_num_steps)}, {"warmup_min_ratio", s.warmup_min_ratio},
                     {"warmup_num_steps", s.warmup_num_steps}, {"cos_min_ratio", s.cos_min_ratio},
                     {"warmup_type", warmup_type}};
      break;
    case LrScheduleKind::OneCycle:
      j["params"] = {{"cycle_min_lr", s.cycle_min_lr},
                     {"cycle_max_lr", s.cycle_max_lr},
                     {"decay_lr_rate", s.decay_lr_rate},
                     {"cycle_first_step_size", s.cycle_first_step_size},
                     {"cycle_second_step_size", s.cycle_second_step_size.value_or(s.cycle_first_step_size)},
                     {"decay_step_size", s.decay_step_size},
                     {"cycle_momentum", s.cycle_momentum},
                     {"cycle_min_mom", s.cycle_min_mom},
                     {"cycle_max_mom", s.cycle_max_mom},
                     {"decay_mom_rate", s.decay_mom_rate}};
      break;
    case LrScheduleKind::LRRangeTest:
      j["params"] = {{"lr_range_test_min_lr", s.lr_range_test_min_lr},
                     {"lr_range_test_step_size", s.lr_range_test_step_size},
                     {"lr_range_test_step_rate", s.lr_range_test_step_rate},
                     {"lr_range_test_staircase", s.lr_range_test_staircase}};
      break;
  }
  return j;
}

std::string describe(const LrSchedule& s) {
  const auto steps = [](const std::optional<int64_t>& n) { return n ? std::to_string(*n) : std::string("the last"); };
  switch (s.kind) {
    case LrScheduleKind::Constant: return "constant";
    case LrScheduleKind::Warmup: {
      std::string out = s.warmup_steps > 0 ? fmt::format("warmup {} steps", s.warmup_steps) : "no warmup";
      if (s.decay == LrDecay::Constant) return out + ", then constant";
      const std::string floor = s.min_lr ? fmt::format("{:g}", *s.min_lr) : fmt::format("{:g} x lr", s.min_lr_ratio);
      return out + fmt::format(", {} decay to {} at step {}", to_string(s.decay), floor, steps(s.decay_steps));
    }
    default: return fmt::format("DeepSpeed {} {}", to_string(s.kind), to_json(s)["params"].dump());
  }
}

}  // namespace zinf::core
