// Expert parallelism of a mixture of experts: the run config's expert_parallel and capacity_factor,
// the refusals that name them, each rank's share of the routed experts in the memory model and the
// planner (Mixtral-8x7B on one 8-GPU node, the expected bytes worked out by hand), the groups the
// experts' collectives run in, and the all-to-alls each mixture layer adds to the Program.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"
#include "models/gpt.hpp"
#include "tune/tuner.hpp"
#include "test_paths.hpp"

using namespace zinf;
using Catch::Matchers::Contains;
using zinf::test::source;

namespace {

core::ModelSpec mixtral(int64_t seq) {
  auto m = models::find_model(source("tests/data/hf/mixtral-8x7b-v0.1"), ZINF_SOURCE_DIR);
  m.seq = seq;
  return m;
}

core::HwProfile dgx_a100() { return core::load_hwprofile(source("hwprofiles/dgx-a100.yaml")); }

// Mixtral-8x7B's parameters (its model card's 46.7B, transformers' count) and those of its routed
// experts: 32 layers x 8 experts x 3 matrices of 4096 x 14336.
constexpr double kMixtralParams = 46702792704.0;
constexpr double kRoutedExperts = 32.0 * 8 * 3 * 4096 * 14336;  // 45,097,156,608

core::RunConfig ep_config(int64_t ep, int stage) {
  core::RunConfig c;
  c.zero_stage = stage;
  c.expert_parallel = ep;
  return c;
}

double model_states_device(const core::MemoryReport& r) {
  for (const auto& row : r.rows)
    if (row.what == "model states") return row.bytes.device;
  FAIL("no model-states row");
  return 0;
}

double row_device(const core::MemoryReport& r, const std::string& what) {
  for (const auto& row : r.rows)
    if (row.what == what) return row.bytes.device;
  FAIL("no row " << what);
  return 0;
}

}  // namespace

TEST_CASE("expert_parallel and capacity_factor are read, bounded and written back", "[expert-parallel][config]") {
  const auto c = core::parse_run_config("expert_parallel: 4\ncapacity_factor: 1.25\n", "ep.yaml");
  CHECK(c.expert_parallel == 4);
  CHECK(c.capacity_factor == 1.25);
  const auto d = core::parse_run_config("zero_stage: 3\n", "d.yaml");
  CHECK(d.expert_parallel == 1);
  CHECK(d.capacity_factor == 1.0);  // DeepSpeed-MoE's default
  const auto back = core::parse_run_config(core::run_config_to_yaml(c, "round trip"), "rt.yaml");
  CHECK(back.expert_parallel == 4);
  CHECK(back.capacity_factor == 1.25);
  CHECK_THROWS_WITH(core::parse_run_config("expert_parallel: 0\n", "bad.yaml"),
                    Contains("bad.yaml") && Contains("expert_parallel"));
  CHECK_THROWS_WITH(core::parse_run_config("capacity_factor: 0\n", "bad.yaml"),
                    Contains("bad.yaml") && Contains("capacity_factor"));
}

TEST_CASE("a degree that does not divide the ranks or the experts is refused naming expert_parallel",
          "[expert-parallel][plan]") {
  const auto m = mixtral(256);
  const auto hw = dgx_a100();
  CHECK_THROWS_WITH(models::plan_gpt(m, hw, ep_config(3, 3), 8),
                    Contains("expert_parallel 3") && Contains("8 data-parallel ranks"));
  CHECK_THROWS_WITH(models::plan_gpt(m, hw, ep_config(16, 3), 16),
                    Contains("expert_parallel 16") && Contains("8 routed experts"));
  auto llama = models::find_model(source("tests/data/hf/llama-2-7b"), ZINF_SOURCE_DIR);
  llama.seq = 256;
  CHECK_THROWS_WITH(models::plan_gpt(llama, hw, ep_config(2, 3), 8),
                    Contains("expert_parallel 2") && Contains("no routed experts"));
  CHECK_THROWS_WITH(models::plan_gpt(m, hw, ep_config(2, 2), 8), Contains("expert_parallel 2") && Contains("zero_stage 3"));
}

TEST_CASE("Mixtral's model states per GPU drop as expert parallelism grows where ZeRO leaves parameters whole",
          "[expert-parallel][memory]") {
  // ZeRO-2 on one DGX-A100 (8 ranks): a rank keeps its whole bf16 parameters, the dense part and
  // experts / E of the routed experts, and 1/8 of the gradients (2 bytes) and of the optimizer's
  // fp32 master, m and v (12 bytes): 2 (dense + routed / E) + 14 P / 8.
  const double dense = kMixtralParams - kRoutedExperts;  // 1,605,636,096
  double previous = 0;
  for (int64_t E : {1, 2, 4, 8}) {
    INFO("expert_parallel " << E);
    const auto r = core::memory_requirement({mixtral(4096), dgx_a100(), 1, ep_config(E, 2)});
    const double expected = 2.0 * (dense + kRoutedExperts / double(E)) + 14.0 * kMixtralParams / 8.0;
    CHECK(model_states_device(r) == Approx(expected).epsilon(1e-12));
    if (previous > 0) CHECK(model_states_device(r) < previous);
    previous = model_states_device(r);
  }
  // By hand: E = 1 holds 175,135,472,640 bytes, E = 8 96,215,448,576.
  CHECK(model_states_device(core::memory_requirement({mixtral(4096), dgx_a100(), 1, ep_config(1, 2)})) ==
        Approx(175135472640.0).epsilon(1e-12));
  CHECK(model_states_device(core::memory_requirement({mixtral(4096), dgx_a100(), 1, ep_config(8, 2)})) ==
        Approx(96215448576.0).epsilon(1e-12));
  // ZeRO-3 partitions everything: the expert slice's dp / E ranks keep the same 1/8 of it (16 P / 8
  // bytes whatever E), and what drops is the gathered block: the largest unit is experts / E.
  double working = 0;
  for (int64_t E : {1, 2, 4, 8}) {
    INFO("expert_parallel " << E);
    const auto r = core::memory_requirement({mixtral(4096), dgx_a100(), 1, ep_config(E, 3)});
    CHECK(model_states_device(r) == Approx(16.0 * kMixtralParams / 8.0).epsilon(1e-12));
    const double w = row_device(r, "model-state working memory");
    if (working > 0) CHECK(w < working);
    working = w;
  }
}

TEST_CASE("the planner keeps a rank's slice of the experts, sharded over its expert-data-parallel group",
          "[expert-parallel][plan]") {
  const auto m = mixtral(256);
  const auto hw = dgx_a100();
  core::RunConfig c = ep_config(1, 3);
  c.optimizer = {false, core::Tier::Host};
  c.max_live_bytes = 1e9;
  const int64_t layer_experts = 8LL * 3 * 4096 * 14336;
  double gathered_peak = 0;
  for (int64_t E : {1, 2, 4, 8}) {
    INFO("expert_parallel " << E);
    c.expert_parallel = E;
    const auto r = models::plan_gpt(m, hw, c, 8).planned;
    REQUIRE(core::validate_program(r.program).empty());
    CHECK(r.program.expert_parallel() == int(E));
    int experts = 0;
    for (const auto& u : r.program.units()) {
      if (u.name != "layers.0.block_sparse_moe.experts") continue;
      ++experts;
      CHECK(u.expert == (E > 1));
      CHECK(u.numel == layer_experts / E);
      CHECK(u.shard_numel == (layer_experts / E + 8 / E - 1) / (8 / E));
      CHECK(r.program.unit_ranks(u) == int(8 / E));
    }
    CHECK(experts == 1);
    // ZeRO-3's shard space is the same 1/8 of the model on every rank, whatever E.
    CHECK(double(r.plan.shard_numel) == Approx(kMixtralParams / 8).epsilon(1e-3));
    // The experts' gathers and reductions run in groups of 8 / E ranks, E of them at once.
    int gathers = 0;
    for (const auto& t : r.program.tasks()) {
      if (t.unit < 0 || !r.program.units()[size_t(t.unit)].expert) continue;
      if (t.kind != core::TaskKind::AllGather && t.kind != core::TaskKind::ReduceScatter) continue;
      ++gathers;
      const auto g = core::collective_groups(r.program, t);
      CHECK(g.members == int(8 / E));
      CHECK(g.stride == int(E));
      CHECK_FALSE(g.consecutive);
    }
    CHECK((E > 1 ? gathers > 0 : gathers == 0));
    // The device's peak falls with the gathered block it holds.
    if (gathered_peak > 0) CHECK(r.plan.peak_bytes[0] < gathered_peak);
    gathered_peak = r.plan.peak_bytes[0];
  }
}

TEST_CASE("each mixture layer adds a dispatch and a combine all-to-all in forward, recompute and backward",
          "[expert-parallel][plan]") {
  const auto m = mixtral(512);  // 512 tokens a micro-batch, 2 experts each
  core::RunConfig c = ep_config(4, 3);
  c.optimizer = {false, core::Tier::Host};
  c.checkpoint_interval = 1;
  c.capacity_factor = 1.0;
  const auto r = models::plan_gpt(m, dgx_a100(), c, 8).planned;
  REQUIRE(core::validate_program(r.program).empty());
  // Capacity: ceil(1.0 x 512 x 2 / 8) = 128 tokens an expert; 8 x 128 rows of 4096 bf16 values.
  const double bytes = 8.0 * 128 * 4096 * 2;
  int forward = 0, backward = 0;
  for (const auto& t : r.program.tasks()) {
    if (t.kind != core::TaskKind::AllToAll) continue;
    CHECK(t.participants == 4);
    CHECK(t.bytes == bytes);
    CHECK(t.lane == core::Lane::Compute);
    const auto g = core::collective_groups(r.program, t);
    CHECK((g.members == 4 && g.consecutive));
    (t.phase == core::Phase::Backward ? backward : forward) += 1;
  }
  CHECK(forward == 32 * 2);       // dispatch and combine
  CHECK(backward == 32 * 2 * 2);  // again in the recompute, and their gradients
  // A larger capacity factor pads the exchange: ceil(1.5 x 128) = 192 tokens an expert.
  c.capacity_factor = 1.5;
  const auto padded = models::plan_gpt(m, dgx_a100(), c, 8).planned;
  for (const auto& t : padded.program.tasks())
    if (t.kind == core::TaskKind::AllToAll) CHECK(t.bytes == 8.0 * 192 * 4096 * 2);
  // Without expert parallelism there is nothing to exchange.
  c.expert_parallel = 1;
  const auto none = models::plan_gpt(m, dgx_a100(), c, 8);
  for (const auto& t : none.planned.program.tasks()) CHECK(t.kind != core::TaskKind::AllToAll);
}

TEST_CASE("a DeepSpeed config's AutoEP section sets expert_parallel", "[expert-parallel][deepspeed]") {
  std::vector<std::string> warnings;
  const std::string base = R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}, )";
  const auto on = core::parse_deepspeed_config(base + R"("expert_parallel": {"enabled": true, "autoep_size": 4}})",
                                               "ep.json", warnings);
  CHECK(on.expert_parallel == 4);
  const auto off = core::parse_deepspeed_config(base + R"("expert_parallel": {"enabled": false, "autoep_size": 4}})",
                                                "off.json", warnings);
  CHECK(off.expert_parallel == 1);
  // Without the section (DeepSpeed-MoE's ep_size is an argument of its MoE layer, not a JSON key): 1.
  CHECK(core::parse_deepspeed_config(base + R"("steps_per_print": 10})", "none.json", warnings).expert_parallel == 1);
}

TEST_CASE("zinf tune searches the expert-parallel degrees a mixture and the node allow", "[expert-parallel][tune]") {
  tune::TuneRequest req;
  req.model = mixtral(1024);
  req.hw = dgx_a100();
  req.base = ep_config(1, 3);
  CHECK(tune::default_tune_space(req).expert_parallels == std::vector<int64_t>{1, 2, 4, 8});
  // Below ZeRO-3 the planner does not take it; a dense model has no experts to split.
  req.base.zero_stage = 2;
  CHECK(tune::default_tune_space(req).expert_parallels == std::vector<int64_t>{1});
  req.base.zero_stage = 3;
  req.model = models::find_model(source("tests/data/hf/llama-2-7b"), ZINF_SOURCE_DIR);
  CHECK(tune::default_tune_space(req).expert_parallels == std::vector<int64_t>{1});
  // The candidates carry each degree.
  req.model = mixtral(1024);
  req.space.params_tiers = {core::Tier::Device};
  req.space.optimizer_tiers = {core::Tier::Host};
  req.space.checkpoint_intervals = {1};
  req.space.checkpoint_tiers = {core::Tier::Device};
  req.space.micro_batches = {1};
  std::vector<int64_t> seen;
  for (const auto& c : tune::enumerate_candidates(req, tune::default_tune_space(req)))
    if (std::find(seen.begin(), seen.end(), c.config.expert_parallel) == seen.end()) seen.push_back(c.config.expert_parallel);
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int64_t>{1, 2, 4, 8});
}
