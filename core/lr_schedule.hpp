// An LrSchedule says the learning rate of every optimizer step of a run (and, for DeepSpeed's
// OneCycle with cycle_momentum, Adam's betas too). Two families:
//  - zinf's own (`lr_schedule:` in a run config): a linear warmup to the optimizer's lr, then a
//    cosine, linear or no decay to a floor, as nanoGPT, llm.c and Megatron schedule it;
//  - DeepSpeed's `scheduler` section (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle,
//    LRRangeTest), with each type's parameters, defaults and step timing as DeepSpeed's
//    runtime/lr_schedules.py computes them. DeepSpeed sets the rate of optimizer step k from
//    iteration k-2 (the scheduler steps after each optimizer step, and its constructor sets the
//    first step's rate from iteration -1): rates_at does the same, so step k here is step k there.
// A schedule changes no cost: the planner and the simulator never read it. Parsing lives in
// formats/lr_schedule_reader.hpp. Plain value type; the functions are pure.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace zinf::core {

enum class LrScheduleKind { Constant, Warmup, WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest };
enum class LrDecay { Constant, Linear, Cosine };
enum class WarmupType { Log, Linear };

const char* to_string(LrScheduleKind k);  // "constant", "warmup", or DeepSpeed's type name
const char* to_string(LrDecay d);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;

  // zinf's (kind Warmup): step k <= warmup_steps runs at lr·k/warmup_steps; then `decay` brings the
  // rate from lr at step warmup_steps to the floor at step decay_steps (nullopt: the run's last
  // step) and holds it there. The floor is min_lr, or min_lr_ratio·lr when min_lr is not given.
  int64_t warmup_steps = 0;
  LrDecay decay = LrDecay::Cosine;
  std::optional<int64_t> decay_steps;
  std::optional<double> min_lr;
  double min_lr_ratio = 0.1;

  // DeepSpeed's, named as its config names them; defaults are its constructors'. nullopt where
  // the config said "auto" (Hugging Face's convention): warmup_max_lr becomes the optimizer's lr,
  // total_num_steps the run's step count.
  double warmup_min_lr = 0.0;
  std::optional<double> warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;
  WarmupType warmup_type = WarmupType::Log;
  std::optional<int64_t> total_num_steps;
  double warmup_min_ratio = 0.0, cos_min_ratio = 0.0001;
  double cycle_min_lr = 0, cycle_max_lr = 0, decay_lr_rate = 0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;  // nullopt: cycle_first_step_size
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9, decay_mom_rate = 0;
  double lr_range_test_min_lr = 1e-3;
  int64_t lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
};

// The optimizer's rates for one step.
struct StepRates {
  double lr = 0, beta1 = 0, beta2 = 0;
};

// `s` with its `auto` lengths and rates decided: the run's `total_steps` (its --steps) and the
// optimizer's `lr`. Throws std::invalid_argument naming the key when a length is needed and not
// known, or when the schedule cannot be computed (a decay that ends before its warmup does;
// WarmupCosineLR with total_num_steps equal to its warmup, where DeepSpeed divides by zero).
LrSchedule resolved(LrSchedule s, int64_t total_steps, double lr);

// The rates of optimizer step `step` (from 1) of a resolved schedule, given the optimizer's own.
StepRates rates_at(const LrSchedule& s, int64_t step, double lr, double beta1, double beta2);

// The schedule as JSON: {"type": ..., then its parameters by their config names}. What
// `zinf plan --json` reports and a checkpoint records.
nlohmann::json to_json(const LrSchedule& s);
// One line for people: "warmup 20 steps, cosine decay to 3e-05 at step 150".
std::string describe(const LrSchedule& s);

}  // namespace zinf::core
