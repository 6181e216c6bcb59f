// Readers of learning-rate schedules (core/lr_schedule.hpp) from a run config: zinf's
// `lr_schedule:` section and DeepSpeed's `scheduler` section. The schedule is read beside the
// RunConfig, not into it: a RunConfig is what the planner and the simulator read, and a schedule
// changes no cost (the run config readers pass over both sections). Errors name the file and the
// dotted key. Not thread-safe (as ConfigReader).
#pragma once
#include <string>
#include <vector>

#include "formats/config_reader.hpp"
#include "core/lr_schedule.hpp"

namespace zinf::core {

// zinf's YAML `lr_schedule:` mapping: {warmup_steps, decay: cosine | linear | constant,
// decay_steps (a count or auto: the run's steps), min_lr or min_lr_ratio (the floor, default
// 0.1 x lr)}; or DeepSpeed's form {type, params} read as read_deepspeed_scheduler reads it, where
// anything DeepSpeed would only warn about is an error.
LrSchedule read_lr_schedule(ConfigReader& section);

// DeepSpeed's `scheduler` mapping, {type, params}, as DeepSpeed builds the scheduler from it
// (lr_schedules.<type>(optimizer, **params)): each type's keyword parameters with its
// constructor's defaults; a required one missing (OneCycle's cycle_min_lr and cycle_max_lr,
// total_num_steps of WarmupDecayLR and WarmupCosineLR), an unknown one or a missing `params` is
// an error, as Python's TypeError is there. Hugging Face's "auto" is accepted where its
// integration fills it in: warmup_min_lr (0), warmup_max_lr (the optimizer's lr), warmup_num_steps
// (0: no warmup steps given) and total_num_steps (the run's steps). What DeepSpeed only logs (an
// unknown warmup_type for WarmupLR, which then warms up by log; total_num_steps below the warmup)
// goes to `warnings`. PyTorch's own schedulers, which DeepSpeed also accepts by name, are refused.
LrSchedule read_deepspeed_scheduler(ConfigReader& scheduler, std::vector<std::string>& warnings);

// The schedule of a run config (zinf's YAML or a DeepSpeed JSON, told apart as
// load_any_run_config tells them): its section read as above, or constant when it has none.
LrSchedule parse_lr_schedule(const std::string& text, const std::string& name, std::vector<std::string>& warnings);
LrSchedule load_lr_schedule(const std::string& path, std::vector<std::string>& warnings);

}  // namespace zinf::core
