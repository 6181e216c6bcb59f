// Learning-rate schedules: DeepSpeed's five, read from a DeepSpeed config and held bit for bit to the
// rates DeepSpeed's own lr_schedules.py gives each step (tests/data/lr_schedules/deepspeed_rates.py
// made the table); zinf's warmup + decay at the steps that define it; the readers' errors.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/lr_schedule.hpp"
#include "formats/lr_schedule_reader.hpp"
#include "core/run_config.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;

namespace {

struct Rate {
  int64_t step;
  double lr, beta1, beta2;
};
struct DeepSpeedCase {
  const char* type;
  const char* params;
  double lr, beta1, beta2;
  std::vector<Rate> rates;
};

const std::vector<DeepSpeedCase> kDeepSpeed = {
#include "data/lr_schedules/deepspeed_rates.inc"
};

std::string deepspeed_json(const std::string& scheduler, double lr = 6e-4) {
  return fmt::format(R"({{"train_micro_batch_size_per_gpu": 1, "optimizer": {{"type": "AdamW", "params": {{"lr": {},
      "betas": [0.9, 0.95]}}}}, "scheduler": {}}})",
                     lr, scheduler);
}

LrSchedule deepspeed(const std::string& scheduler, std::vector<std::string>* warnings = nullptr) {
  std::vector<std::string> w;
  return parse_lr_schedule(deepspeed_json(scheduler), "ds.json", warnings ? *warnings : w);
}

LrSchedule zinf_yaml(const std::string& schedule) {
  std::vector<std::string> w;
  LrSchedule s = parse_lr_schedule("optimizer: {lr: 1.0e-3}\nlr_schedule: " + schedule + "\n", "run.yaml", w);
  CHECK(w.empty());
  return s;
}

}  // namespace

TEST_CASE("DeepSpeed's schedules give the rates DeepSpeed computes, bit for bit, at every chosen step", "[lr]") {
  REQUIRE(kDeepSpeed.size() >= 10);
  for (const auto& c : kDeepSpeed) {
    const std::string scheduler = fmt::format(R"({{"type": "{}", "params": {}}})", c.type, c.params);
    INFO(scheduler);
    std::vector<std::string> warnings;
    const RunConfig config = parse_deepspeed_config(deepspeed_json(scheduler, c.lr), "ds.json", warnings);
    const LrSchedule read = parse_lr_schedule(deepspeed_json(scheduler, c.lr), "ds.json", warnings);
    // Neither reader has anything to say about the section (the DeepSpeed reader's lines on its
    // defaults, such as ZeRO stage 0, are about other keys).
    for (const auto& w : warnings) CHECK_THAT(w, !Contains("scheduler"));
    CHECK(config.lr == c.lr);
    const LrSchedule s = resolved(read, 100, config.lr);
    CHECK(to_string(s.kind) == std::string(c.type));
    for (const Rate& r : c.rates) {
      INFO("step " << r.step);
      const StepRates got = rates_at(s, r.step, config.lr, config.beta1, config.beta2);
      CHECK(got.lr == r.lr);  // exact: the same double operations in the same order
      CHECK(got.beta1 == r.beta1);
      CHECK(got.beta2 == r.beta2);
    }
  }
}

TEST_CASE("DeepSpeed's quirks are kept: WarmupCosineLR's first step at 0, OneCycle's betas (momentum, 0.99)", "[lr]") {
  const LrSchedule cosine = resolved(
      deepspeed(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "warmup_num_steps": 10}})"), 0, 6e-4);
  CHECK(rates_at(cosine, 1, 6e-4, 0.9, 0.95).lr == 0.0);
  CHECK(rates_at(cosine, 11, 6e-4, 0.9, 0.95).lr == Approx(6e-4));
  const LrSchedule cycle = deepspeed(R"({"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3}})");
  const StepRates first = rates_at(cycle, 1, 6e-4, 0.9, 0.95);
  CHECK(first.lr == 1e-4);
  CHECK(first.beta1 == 0.8);
  CHECK(first.beta2 == 0.99);
  // warmup_num_steps below 2 warms up over 2 iterations, as DeepSpeed's max(2, n) does
  const LrSchedule one = deepspeed(R"({"type": "WarmupLR", "params": {"warmup_num_steps": 1, "warmup_max_lr": 1e-3}})");
  CHECK(rates_at(one, 3, 6e-4, 0.9, 0.95).lr == Approx(1e-3));
}

TEST_CASE("Hugging Face's auto in a scheduler takes the optimizer's lr and the run's steps", "[lr]") {
  const LrSchedule s = deepspeed(R"({"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
      "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}})");
  CHECK(!s.warmup_max_lr);
  CHECK(!s.total_num_steps);
  CHECK(to_json(s)["params"]["total_num_steps"] == "auto");
  CHECK_THROWS_WITH(resolved(s, 0, 6e-4), Contains("total_num_steps") && Contains("auto"));
  const LrSchedule r = resolved(s, 50, 6e-4);
  CHECK(*r.warmup_max_lr == 6e-4);
  CHECK(*r.total_num_steps == 50);
  CHECK(r.warmup_num_steps == 0);
  CHECK(rates_at(r, 4, 6e-4, 0.9, 0.95).lr == Approx(6e-4 * 48.0 / 48.0));
  CHECK(rates_at(r, 51, 6e-4, 0.9, 0.95).lr == Approx(6e-4 * 1.0 / 48.0));
}

TEST_CASE("a DeepSpeed scheduler DeepSpeed would refuse is an error naming the key", "[lr]") {
  const auto refused = [](const std::string& scheduler, const std::string& what) {
    INFO(scheduler);
    CHECK_THROWS_WITH(deepspeed(scheduler), Contains("ds.json") && Contains(what));
  };
  refused(R"({"type": "StepLR", "params": {"step_size": 10}})", "scheduler.type");
  refused(R"({"type": "WarmupLR"})", "scheduler.params");
  refused(R"({"type": "WarmupLR", "params": {"warmup_max_lr": 1e-3, "warmup_steps": 10}})", "scheduler.params.warmup_steps");
  refused(R"({"type": "OneCycle", "params": {"cycle_min_lr": 1e-4}})", "cycle_max_lr");
  refused(R"({"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1e-3}})", "total_num_steps");
  refused(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 9, "warmup_type": "exp"}})", "warmup_type");
  refused(R"({"type": "WarmupLR", "params": {"warmup_max_lr": -1}})", "warmup_max_lr");
  refused(R"({"type": "WarmupLR", "params": {"last_batch_iteration": 7}})", "last_batch_iteration");
  CHECK_THROWS_WITH(resolved(deepspeed(R"({"type": "WarmupCosineLR", "params": {"total_num_steps": 10,
      "warmup_num_steps": 10}})"), 0, 1e-3),
                    Contains("divides by zero"));
  // What DeepSpeed only logs is a warning here.
  std::vector<std::string> warnings;
  const LrSchedule s = deepspeed(R"({"type": "WarmupLR", "params": {"warmup_type": "exp"}})", &warnings);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("warmup_type") && Contains("log"));
  CHECK(s.warmup_type == WarmupType::Log);
}

TEST_CASE("zinf's schedule: linear warmup to lr, then cosine or linear decay to the floor, then the floor", "[lr]") {
  const double lr = 1e-3;
  const LrSchedule cosine = resolved(zinf_yaml("{warmup_steps: 10, decay: cosine, min_lr: 1.0e-4}"), 110, lr);
  CHECK(*cosine.decay_steps == 110);
  CHECK(rates_at(cosine, 1, lr, 0.9, 0.95).lr == Approx(1e-4));
  CHECK(rates_at(cosine, 5, lr, 0.9, 0.95).lr == Approx(5e-4));
  CHECK(rates_at(cosine, 10, lr, 0.9, 0.95).lr == Approx(1e-3));
  CHECK(rates_at(cosine, 60, lr, 0.9, 0.95).lr == Approx((1e-3 + 1e-4) / 2));  // halfway down the cosine
  CHECK(rates_at(cosine, 110, lr, 0.9, 0.95).lr == Approx(1e-4));
  CHECK(rates_at(cosine, 500, lr, 0.9, 0.95).lr == Approx(1e-4));
  for (int64_t k = 11; k <= 110; ++k)  // falls monotonically
    CHECK(rates_at(cosine, k, lr, 0.9, 0.95).lr < rates_at(cosine, k - 1, lr, 0.9, 0.95).lr);
  const LrSchedule linear = resolved(zinf_yaml("{warmup_steps: 0, decay: linear, decay_steps: 40}"), 1000, lr);
  CHECK(rates_at(linear, 0, lr, 0.9, 0.95).lr == Approx(lr));
  CHECK(rates_at(linear, 20, lr, 0.9, 0.95).lr == Approx(lr - (lr - 0.1 * lr) / 2));  // default floor 0.1 x lr
  CHECK(rates_at(linear, 40, lr, 0.9, 0.95).lr == Approx(1e-4));
  const LrSchedule warm = resolved(zinf_yaml("{warmup_steps: 4, decay: constant}"), 0, lr);
  CHECK(rates_at(warm, 2, lr, 0.9, 0.95).lr == Approx(5e-4));
  CHECK(rates_at(warm, 400, lr, 0.9, 0.95).lr == lr);
  CHECK(zinf_yaml("{warmup_steps: 0, decay: constant}").kind == LrScheduleKind::Constant);
  CHECK(LrSchedule{}.kind == LrScheduleKind::Constant);
}

TEST_CASE("zinf's schedule refuses what it cannot compute, naming the key", "[lr]") {
  CHECK_THROWS_WITH(zinf_yaml("{warmup_steps: 5, decay: exponential}"), Contains("lr_schedule.decay"));
  CHECK_THROWS_WITH(zinf_yaml("{min_lr: 1.0e-4, min_lr_ratio: 0.1}"), Contains("lr_schedule.min_lr_ratio"));
  CHECK_THROWS_WITH(zinf_yaml("{warmup: 5}"), Contains("lr_schedule.warmup"));
  CHECK_THROWS_WITH(zinf_yaml("{decay: constant, min_lr: 1.0e-4}"), Contains("lr_schedule.decay"));
  CHECK_THROWS_WITH(resolved(zinf_yaml("{warmup_steps: 50, decay_steps: 50}"), 500, 1e-3), Contains("decay_steps"));
  // A run no longer than its warmup with an `auto` decay stays in the warmup.
  const LrSchedule short_run = resolved(zinf_yaml("{warmup_steps: 50}"), 3, 1e-3);
  CHECK(*short_run.decay_steps == 51);
  CHECK(rates_at(short_run, 3, 1e-3, 0.9, 0.95).lr == Approx(3e-3 / 50));
  CHECK_THROWS_WITH(resolved(zinf_yaml("{warmup_steps: 5}"), 0, 1e-3), Contains("decay_steps") && Contains("auto"));
  // DeepSpeed's form is read in zinf's YAML too, where DeepSpeed's warnings are errors.
  CHECK(zinf_yaml("{type: LRRangeTest, params: {lr_range_test_min_lr: 1.0e-5}}").kind == LrScheduleKind::LRRangeTest);
  CHECK_THROWS_WITH(zinf_yaml("{type: WarmupLR, params: {warmup_type: exp}}"), Contains("warmup_type"));
}

TEST_CASE("the run config readers pass over the schedule sections, and a config without one is constant", "[lr]") {
  const RunConfig yaml = parse_run_config("optimizer: {lr: 2.0e-3}\nlr_schedule: {warmup_steps: 10}\n", "a.yaml");
  CHECK(yaml.lr == 2e-3);
  std::vector<std::string> warnings;
  parse_deepspeed_config(deepspeed_json(R"({"type": "WarmupLR", "params": {}})"), "d.json", warnings);
  for (const auto& w : warnings) CHECK_THAT(w, !Contains("scheduler"));
  warnings.clear();
  CHECK(parse_lr_schedule("zero_stage: 3\n", "b.yaml", warnings).kind == LrScheduleKind::Constant);
  CHECK(parse_lr_schedule(R"({"train_batch_size": 8})", "c.json", warnings).kind == LrScheduleKind::Constant);
  CHECK(to_json(zinf_yaml("{warmup_steps: 10}")) ==
        nlohmann::json{{"type", "warmup"}, {"warmup_steps", 10}, {"decay", "cosine"}, {"decay_steps", "auto"},
                       {"min_lr_ratio", 0.1}});
  // DeepSpeed keys beside type and params are not read by DeepSpeed either: a warning.
  deepspeed(R"({"type": "WarmupLR", "params": {}, "typo": 1})", &warnings);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("scheduler.typo"));
}
