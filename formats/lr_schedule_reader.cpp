#include "formats/lr_schedule_reader.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "formats/bounded_input.hpp"
#include "formats/hjson.hpp"
#include "core/run_config.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::core {

namespace {

constexpr int64_t kMaxSteps = int64_t(1) << 53;
constexpr double kMaxRate = 1e6;

bool is_auto(ConfigReader& r, const std::string& key) { return r.has(key) && r.str(key) == "auto"; }

double rate(ConfigReader& r, const std::string& key, double fallback) {
  return r.number_in(key, UnitKind::Count, 0, kMaxRate, fallback);
}

int64_t steps(ConfigReader& r, const std::string& key, int64_t fallback) { return r.int_in(key, 0, kMaxSteps, fallback); }

WarmupType warmup_type(ConfigReader& p, const std::string& type, std::vector<std::string>& warnings) {
  const std::string t = p.str("warmup_type", "log");
  if (t == "log") return WarmupType::Log;
  if (t == "linear") return WarmupType::Linear;
  // WarmupLR and WarmupDecayLR log it and warm up by log; WarmupCosineLR keeps it and fails at its
  // first step (no ratio is computed for it).
  if (type == "WarmupCosineLR")
    p.fail("warmup_type", fmt::format("'{}' is not log or linear (DeepSpeed's WarmupCosineLR fails on it)", t));
  warnings.push_back(fmt::format("{}: {}: '{}' is not log or linear; DeepSpeed then warms up by log, and so does zinf",
                                 p.file(), p.path("warmup_type"), t));
  return WarmupType::Log;
}

void read_warmup(ConfigReader& p, const std::string& type, LrSchedule& s, std::vector<std::string>& warnings) {
  if (type == "WarmupCosineLR") {
    s.warmup_min_ratio = p.number_in("warmup_min_ratio", UnitKind::Count, 0, 1, s.warmup_min_ratio);
    s.cos_min_ratio = p.number_in("cos_min_ratio", UnitKind::Count, 0, 1, s.cos_min_ratio);
  } else {
    s.warmup_min_lr = is_auto(p, "warmup_min_lr") ? 0.0 : rate(p, "warmup_min_lr", s.warmup_min_lr);
    s.warmup_max_lr = is_auto(p, "warmup_max_lr") ? std::nullopt : std::optional(rate(p, "warmup_max_lr", 0.001));
  }
  s.warmup_num_steps = is_auto(p, "warmup_num_steps") ? 0 : steps(p, "warmup_num_steps", s.warmup_num_steps);
  s.warmup_type = warmup_type(p, type, warnings);
  if (type == "WarmupLR") return;
  if (!p.has("total_num_steps")) p.fail("total_num_steps", fmt::format("missing; {} requires it", type));
  if (!is_auto(p, "total_num_steps")) {
    s.total_num_steps = p.int_in("total_num_steps", 1, kMaxSteps);
    if (*s.total_num_steps < s.warmup_num_steps)
      warnings.push_back(fmt::format("{}: {}: total_num_steps {} is less than warmup_num_steps {} (DeepSpeed warns too)",
                                     p.file(), p.path("total_num_steps"), *s.total_num_steps, s.warmup_num_steps));
  }
}

void read_one_cycle(ConfigReader& p, LrSchedule& s) {
  for (const char* key : {"cycle_min_lr", "cycle_max_lr"})
    if (!p.has(key)) p.fail(key, "missing; OneCycle requires it");
  s.cycle_min_lr = p.number_in("cycle_min_lr", UnitKind::Count, 0, kMaxRate);
  s.cycle_max_lr = p.number_in("cycle_max_lr", UnitKind::Count, 0, kMaxRate);
  s.decay_lr_rate = rate(p, "decay_lr_rate", 0.0);
  s.cycle_first_step_size = p.int_in("cycle_first_step_size", 1, kMaxSteps, s.cycle_first_step_size);
  if (p.has("cycle_second_step_size")) s.cycle_second_step_size = p.int_in("cycle_second_step_size", 1, kMaxSteps);
  else p.ignore("cycle_second_step_size");
  // DeepSpeed stores the stair counts but never uses them in the rates it computes.
  p.int_in("cycle_first_stair_count", 0, kMaxSteps, 0);
  p.int_in("cycle_second_stair_count", 0, kMaxSteps, 0);
  s.decay_step_size = steps(p, "decay_step_size", 0);
  s.cycle_momentum = p.boolean("cycle_momentum", true);
  s.cycle_min_mom = p.fraction_below_one("cycle_min_mom", s.cycle_min_mom);
  s.cycle_max_mom = p.fraction_below_one("cycle_max_mom", s.cycle_max_mom);
  s.decay_mom_rate = rate(p, "decay_mom_rate", 0.0);
}

void read_range_test(ConfigReader& p, LrSchedule& s) {
  s.lr_range_test_min_lr = rate(p, "lr_range_test_min_lr", s.lr_range_test_min_lr);
  s.lr_range_test_step_size = p.int_in("lr_range_test_step_size", 1, kMaxSteps, s.lr_range_test_step_size);
  s.lr_range_test_step_rate = rate(p, "lr_range_test_step_rate", s.lr_range_test_step_rate);
  s.lr_range_test_staircase = p.boolean("lr_range_test_staircase", false);
}

}  // namespace

LrSchedule read_deepspeed_scheduler(ConfigReader& r, std::vector<std::string>& warnings) {
  const std::string type = r.str("type");
  LrSchedule s;
  if (type == "WarmupLR") s.kind = LrScheduleKind::WarmupLR;
  else if (type == "WarmupDecayLR") s.kind = LrScheduleKind::WarmupDecayLR;
  else if (type == "WarmupCosineLR") s.kind = LrScheduleKind::WarmupCosineLR;
  else if (type == "OneCycle") s.kind = LrScheduleKind::OneCycle;
  else if (type == "LRRangeTest") s.kind = LrScheduleKind::LRRangeTest;
  else
    r.fail("type", fmt::format("'{}' is not one of DeepSpeed's schedules zinf reads: WarmupLR, WarmupDecayLR, "
                               "WarmupCosineLR, OneCycle, LRRangeTest (PyTorch's schedulers are not read)",
                               ConfigReader::shown(type)));
  if (!r.has("params")) r.fail("params", "missing; DeepSpeed passes it to the scheduler as its keyword arguments");
  ConfigReader p = r.child("params");
  if (s.kind == LrScheduleKind::OneCycle) read_one_cycle(p, s);
  else if (s.kind == LrScheduleKind::LRRangeTest) read_range_test(p, s);
  else read_warmup(p, type, s, warnings);
  // Resuming is the checkpoint's business: a schedule that starts elsewhere is not read.
  if (p.has("last_batch_iteration") && p.int_in("last_batch_iteration", -1, kMaxSteps) != -1)
    p.fail("last_batch_iteration", "only -1 (start at the beginning) is read; a resumed run takes its step from the checkpoint");
  p.ignore("last_batch_iteration");
  for (const auto& key : p.unread_keys())
    throw ConfigError(p.file(), key, fmt::format("is not a parameter of DeepSpeed's {} (it would fail with a TypeError)", type));
  for (const auto& key : r.unread_keys())
    warnings.push_back(fmt::format("{}: key '{}' is not read by DeepSpeed's scheduler and has no effect", r.file(), key));
  return s;
}

LrSchedule read_lr_schedule(ConfigReader& r) {
  if (r.has("type")) {
    std::vector<std::string> warnings;
    LrSchedule s = read_deepspeed_scheduler(r, warnings);
    if (!warnings.empty()) throw ConfigError(r.file(), r.path("params"), warnings.front());
    r.reject_unread();
    return s;
  }
  LrSchedule s;
  s.kind = LrScheduleKind::Warmup;
  s.warmup_steps = steps(r, "warmup_steps", 0);
  const std::string decay = r.choice("decay", {"cosine", "linear", "constant"}, "cosine");
  s.decay = decay == "cosine" ? LrDecay::Cosine : decay == "linear" ? LrDecay::Linear : LrDecay::Constant;
  if (is_auto(r, "decay_steps") || !r.has("decay_steps")) r.ignore("decay_steps");
  else s.decay_steps = r.int_in("decay_steps", 1, kMaxSteps);
  if (r.has("min_lr") && r.has("min_lr_ratio")) r.fail("min_lr_ratio", "give min_lr or min_lr_ratio, not both");
  if (r.has("min_lr")) s.min_lr = rate(r, "min_lr", 0.0);
  else r.ignore("min_lr");
  s.min_lr_ratio = r.number_in("min_lr_ratio", UnitKind::Count, 0, 1, s.min_lr_ratio);
  if (s.decay == LrDecay::Constant && (s.min_lr || r.has("decay_steps")))
    r.fail("decay", "constant has no floor or decay length: drop min_lr and decay_steps, or choose cosine or linear");
  if (s.warmup_steps == 0 && s.decay == LrDecay::Constant) s.kind = LrScheduleKind::Constant;
  r.reject_unread();
  return s;
}

LrSchedule parse_lr_schedule(const std::string& text, const std::string& name, std::vector<std::string>& warnings) {
  if (is_deepspeed_json(text)) {
    // DeepSpeed loads its configs as Hjson; JSON text of the same tree reads as YAML.
    ConfigReader r = ConfigReader::from_string(parse_hjson(text, name).dump(), name);
    if (!r.has("scheduler")) return {};
    ConfigReader s = r.child("scheduler");
    return read_deepspeed_scheduler(s, warnings);
  }
  ConfigReader r = ConfigReader::from_string(text, name);
  if (!r.has("lr_schedule")) return {};
  ConfigReader s = r.child("lr_schedule");
  return read_lr_schedule(s);
}

LrSchedule load_lr_schedule(const std::string& path, std::vector<std::string>& warnings) {
  return parse_lr_schedule(read_bounded_file(path, kMaxConfigBytes, "run config"), path, warnings);
}

}  // namespace zinf::core
