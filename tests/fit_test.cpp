// The one fit decision (core/fit.hpp): the Program's accounting adds up to its peaks, the verdict
// on an accepted plan is "fits", and a plan refused for memory carries the same verdict the
// accounting gives, on the tier and by the amount the Program is over: across tiers, tiling,
// activation offload, tensor parallelism, owner-based partitioning and several ranks. Then one case
// per disagreement plan, sim and train used to have.
#include <catch2/catch.hpp>

#include <cmath>

#include "formats/deepspeed_config.hpp"
#include "core/errors.hpp"
#include "core/fit.hpp"
#include "core/memory_model.hpp"
#include "models/gpt.hpp"
#include "planner_test_util.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;
using zinf::test::source;

namespace {

ModelSpec model(const std::string& name) { return load_model_spec(source("models/" + name + ".yaml")); }
HwProfile profile(const std::string& name) { return load_hwprofile(source("hwprofiles/" + name + ".yaml")); }

// Each tier's items sum to its peak, and the peak is the Plan's.
void require_adds_up(const PlanResult& r) {
  for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
    const TierAccount& a = r.plan.accounting.at(t);
    double sum = 0;
    for (const auto& i : a.items) sum += i.bytes;
    INFO(to_string(t) << ": items " << sum << ", peak " << a.peak);
    CHECK(std::abs(sum - a.peak) <= 1e-9 * std::max(1.0, a.peak) + 1.0);
    CHECK(a.peak == at(r.plan.peak_bytes, t));
    CHECK(a.budget == at(r.plan.budget, t));
  }
}

// The verdict of a plan that failed, or "fits" with the plan's accounting.
Fit decide(const ModelSpec& m, const HwProfile& hw, const RunConfig& c, int ranks) {
  try {
    const PlanResult r = zinf::models::plan_gpt(m, hw, c, ranks).planned;
    return judge_fit(r.plan.accounting, c);
  } catch (const PlanError& e) {
    return fit_of(e);
  }
}

struct Case {
  const char* name;
  const char* yaml;
  int ranks;
};

}  // namespace

TEST_CASE("the Program's accounting adds up, and a budget just under a peak is refused on that tier by the excess",
          "[fit]") {
  const ModelSpec m = zinf::test::tiny_spec(4, 64);
  const Case cases[] = {
      {"resident", "zero_stage: 3\nactivation_checkpoint: {interval: 0}\n", 2},
      {"host states", "zero_stage: 3\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: host}\n", 4},
      {"nvme states", "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {sub_groups_in_flight: 3}\n"
                      "activation_checkpoint: {interval: 2, tier: nvme}\n", 2},
      {"tiling", "zero_stage: 3\noffload: {optimizer: cpu}\ntiling_factor: 4\n", 1},
      {"activation offload", "zero_stage: 3\nactivation_checkpoint: {interval: 0}\n"
                             "activation_offload: {policy: offload_all, tier: host}\n", 2},
      {"tensor parallel", "zero_stage: 3\ntensor_parallel: 2\noffload: {optimizer: cpu}\n", 4},
      {"owner-based", "zero_stage: 3\npartitioning: owner-based\noffload: {params: cpu, optimizer: cpu}\n", 3},
      {"stage 2", "zero_stage: 2\noffload: {gradients: cpu, optimizer: cpu}\n", 4},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    const RunConfig c = parse_run_config(k.yaml, k.name);
    HwProfile hw = zinf::test::roomy_hw();
    const PlanResult r = zinf::models::plan_gpt(m, hw, c, k.ranks).planned;
    require_adds_up(r);
    const Fit ok = judge_fit(r.plan.accounting, c);
    CHECK(ok.fits());
    CHECK(ok.message() == "fits");
    // Every tier that holds anything: a budget 1 % under its peak is refused on it, by that 1 %,
    // and the refusal names the tier's largest item.
    for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
      const TierAccount& a = r.plan.accounting.at(t);
      if (a.peak <= 0) continue;
      INFO("tier " << to_string(t) << " peak " << a.peak);
      HwProfile tight = hw;
      const double excess = 0.01 * a.peak;
      const double budget = a.peak - excess;
      if (t == Tier::Device) tight.node.gpu.memory = budget / (1.0 - hw.reserve.gpu);
      const double per_node = std::min(hw.node.gpus, k.ranks);
      if (t == Tier::Host) tight.node.host_memory = budget * per_node / (1.0 - hw.reserve.host);
      if (t == Tier::Nvme) tight.node.nvme_capacity = budget * per_node / (1.0 - hw.reserve.nvme);
      const Fit f = decide(m, tight, c, k.ranks);
      INFO(f.message());
      REQUIRE(f.verdict == Verdict::Short);
      CHECK(f.tier == t);
      // Refused on the states alone, before any schedule, the shortfall is a lower bound (and says so).
      if (f.accounting.scheduled) CHECK(f.shortfall == Approx(excess).epsilon(1e-6));
      else CHECK((f.shortfall <= excess * (1 + 1e-9) && f.message().find("at least") != std::string::npos));
      CHECK(f.largest.what == a.largest()->what);
      CHECK(!f.knob.empty());
      CHECK_THAT(f.message(), Contains(std::string(to_string(t)) + " is short by") && Contains("per rank") &&
                                  Contains(f.largest.what) && Contains(f.knob));
    }
  }
}

TEST_CASE("the knob: checkpointing first where activations dominate the device", "[fit]") {
  const ModelSpec m = model("gpt2-medium");
  HwProfile hw = profile("dgx2-v100");
  RunConfig c = parse_run_config("zero_stage: 3\nmicro_batch: 48\nactivation_checkpoint: {interval: 0}\n", "c.yaml");
  const Fit none = decide(m, hw, c, 16);
  INFO(none.message());
  REQUIRE(none.verdict == Verdict::Short);
  CHECK(none.tier == Tier::Device);
  CHECK(none.largest.category == MemCategory::ActivationsKept);
  CHECK_THAT(none.knob, Contains("activation_checkpoint.interval: 1"));
  // Checkpointing every 12 blocks: still short, and the knob is a shorter interval.
  c.checkpoint_interval = 12;
  const Fit longer = decide(m, hw, c, 16);
  INFO(longer.message());
  REQUIRE(longer.verdict == Verdict::Short);
  CHECK(longer.largest.category == MemCategory::ActivationsKept);
  CHECK_THAT(longer.knob, Contains("activation_checkpoint.interval (lower"));
  // Every block: it fits.
  c.checkpoint_interval = 1;
  CHECK(decide(m, hw, c, 16).fits());
}

TEST_CASE("a DeepSpeed config's refusal names DeepSpeed's keys", "[fit][deepspeed]") {
  const ModelSpec m = model("gpt2-medium");
  const HwProfile hw = profile("dgx2-v100");
  std::vector<std::string> warnings;
  DeepSpeedContext ctx;
  ctx.ranks = 16;
  ctx.model_micro_batch = 48;
  ctx.hidden = m.hidden;
  ctx.hw_precision = Precision::Fp16;
  // No activation_checkpointing section: DeepSpeed plans none, and the knob is the section.
  RunConfig c = parse_deepspeed_config(R"({"train_micro_batch_size_per_gpu": 48, "fp16": {"enabled": true},
                                           "zero_optimization": {"stage": 3}})",
                                       "ds.json", warnings, ctx);
  const Fit none = decide(m, hw, c, 16);
  INFO(none.message());
  REQUIRE(none.verdict == Verdict::Short);
  CHECK(none.largest.category == MemCategory::ActivationsKept);
  CHECK_THAT(none.knob, Contains("an activation_checkpointing section"));
  CHECK_THAT(none.knob, !Contains("activation_checkpoint.interval"));
  // Stage 1 with the parameters on the device: the stage, in DeepSpeed's key.
  c = parse_deepspeed_config(R"({"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": true},
                                 "zero_optimization": {"stage": 1}, "activation_checkpointing": {}})",
                             "ds.json", warnings, ctx);
  const Fit stage = decide(model("gpt-10b"), hw, c, 16);
  INFO(stage.message());
  REQUIRE(stage.verdict == Verdict::Short);
  CHECK_THAT(stage.knob, Contains("zero_optimization."));
}

TEST_CASE("gpt2-xl at micro-batch 64 on one V100 with lifetime activation offload to NVMe fits, as its Program does",
          "[fit][disagreement]") {
  HwProfile hw = profile("dgx2-v100");
  hw.node.gpus = 1;
  const RunConfig c = parse_run_config(
      "zero_stage: 3\nmicro_batch: 64\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 0}\n"
      "activation_offload: {policy: lifetime, tier: nvme}\n",
      "xl.yaml");
  const ModelSpec m = model("gpt2-xl");
  const PlanResult r = zinf::models::plan_gpt(m, hw, c, 1).planned;
  require_adds_up(r);
  const Fit f = judge_fit(r.plan.accounting, c);
  CHECK(f.fits());
  CHECK(r.plan.accounting.at(Tier::Device).peak <= r.plan.accounting.at(Tier::Device).budget);
  CHECK(r.plan.accounting.at(Tier::Nvme).category_bytes(MemCategory::ActivationsOffloaded) > 0);
  // The closed form, which does not know the activation pass, is the one that says short: it is the
  // second view, never the verdict.
  const MemoryReport closed = memory_requirement({m, hw, 1, c});
  CHECK_FALSE(closed.fits);
}

TEST_CASE("parameters on NVMe at ZeRO stage 2 are refused, with the reason, by the one verdict", "[fit][disagreement]") {
  const RunConfig c = parse_run_config("zero_stage: 2\noffload: {params: nvme, optimizer: nvme}\n", "s2.yaml");
  const Fit f = decide(model("gpt2-small"), profile("dgx2-v100"), c, 16);
  CHECK(f.verdict == Verdict::Refused);
  CHECK_THAT(f.message(), Contains("refused: parameters on nvme need ZeRO stage 3"));
  CHECK(f.accounting.at(Tier::Device).items.empty());
}

TEST_CASE("tensor parallel 2 over 25 heads is refused, with the reason, by the one verdict", "[fit][disagreement]") {
  const RunConfig c = parse_run_config("zero_stage: 3\ntensor_parallel: 2\n", "tp2.yaml");
  const Fit f = decide(model("gpt2-xl"), profile("dgx2-v100"), c, 16);
  CHECK(f.verdict == Verdict::Refused);
  CHECK_THAT(f.reason, Contains("tensor_parallel 2 does not divide the model's heads (25)"));
}

TEST_CASE("a refusal carried by a PlanError is the verdict the accounting gives", "[fit]") {
  Accounting a;
  a.ranks_per_node = 8;
  a.at(Tier::Host) = {10e9, 8e9, 0, {state_item(ItemKind::OptimizerHome, 6e9), live_item(MemUse::OptimizerInFlight, 4e9)}};
  const RunConfig c = parse_run_config("zero_stage: 3\noffload: {optimizer: cpu}\n", "c.yaml");
  const Fit f = judge_fit(a, c);
  REQUIRE(f.verdict == Verdict::Short);
  CHECK(f.tier == Tier::Host);
  CHECK(f.shortfall == 2e9);
  CHECK(f.largest.kind == ItemKind::OptimizerHome);
  CHECK(f.knob == "offload.optimizer: nvme");
  CHECK_THAT(f.message(), Contains("host is short by 2.00 GB per rank (16.0 GB per node)"));
  try {
    throw_fit(f);
  } catch (const PlanError& e) {
    CHECK(std::string(e.what()) == f.message());
    CHECK(fit_of(e).message() == f.message());
  }
  CHECK(fit_of(PlanError("something else")).verdict == Verdict::Refused);
}

TEST_CASE("DeepSpeed's v0.9 host path keeps both gradient partitions on the host, and is ZeRO-3's only", "[fit][host_path]") {
  // stage3.py v0.9.0-v0.10.0 with an offloaded optimizer: the bf16 gradient partition (its pinned
  // flat buffer) and every sub-group's fp32 .grad, 2 + 4 bytes a parameter where zinf keeps 2.
  RunConfig c = parse_run_config("zero_stage: 3\noffload: {params: cpu, gradients: cpu, optimizer: cpu}\n", "c.yaml");
  const auto home = [&](const RunConfig& rc) {
    const PlanResult r = zinf::models::plan_gpt(model("gpt2-small"), profile("dgx-a100"), rc, 8).planned;
    double grads = 0;
    for (const auto& i : r.plan.accounting.at(Tier::Host).items)
      if (i.what == "gradients (home shards)") grads += i.bytes;
    return grads;
  };
  const double fused = home(c);
  REQUIRE(fused > 0);
  c.optimizer_host_path = HostPath::DeepSpeed09;
  CHECK(home(c) == Approx(3.0 * fused));
  c.optimizer_host_path = HostPath::DeepSpeed03;
  CHECK(home(c) == Approx(2.0 * fused));
  c.optimizer_host_path = HostPath::DeepSpeed09;
  c.zero_stage = 2;
  c.params = {false, Tier::Device};
  const Fit f = decide(model("gpt2-small"), profile("dgx-a100"), c, 8);
  CHECK(f.verdict == Verdict::Refused);
  CHECK_THAT(f.reason, Contains("optimizer.host_path deepspeed-0.9") && Contains("ZeRO stage 2"));
}
