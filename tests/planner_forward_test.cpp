// Forward-only Programs (core::make_forward_plan): for every shipped config and both partitionings
// they hold the invariants, keep the training Program's units and shards (so a training backend's
// homes serve them), run exactly the training step's forward compute of one micro-batch with its
// fetches and nothing of a backward, count the training states beside them only when asked, peak no
// higher on the device than the training step, and plan deterministically.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/plan.hpp"
#include "models/gpt.hpp"
#include "planner_test_util.hpp"
#include "test_paths.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using namespace zinf::test;

namespace {

// The forward compute tasks of micro-batch 0, as (operator, tile), in program order.
std::vector<std::pair<int32_t, int32_t>> forward_computes(const Program& p) {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const auto& t : p.tasks())
    if (t.kind == TaskKind::Forward && t.micro_batch == 0) out.push_back({t.op, t.tile});
  return out;
}

std::string dump(const Program& p) {
  std::ostringstream s;
  p.write_json(s);
  return s.str();
}

}  // namespace

TEST_CASE("a forward-only Program keeps the training Program's units and runs its forward alone", "[planner][forward]") {
  const HwProfile hw = roomy_hw();
  for (const char* name : {"zero3", "infinity-cpu", "infinity-nvme", "train-nvme", "demo", "activation-offload",
                           "zero-offload", "paper-tiling"}) {
    for (auto part : {Partitioning::BandwidthCentric, Partitioning::OwnerBased}) {
      INFO(name << (part == Partitioning::OwnerBased ? " owner-based" : " bandwidth-centric"));
      RunConfig c = load_run_config(source(std::string("configs/") + name + ".yaml"));
      c.partitioning = part;
      c.gradient_accumulation = 2;
      const ModelGraph g = zinf::models::build_gpt(tiny_spec(3), c);
      const PlanResult trained = make_plan(g, hw, c, 2);
      const PlanResult fwd = make_forward_plan(g, hw, forward_config(c, trained.plan), 2, ForwardBeside::TrainingStates);
      require_valid(fwd, hw);
      const Program& f = fwd.program;
      CHECK(f.forward_only());
      CHECK_FALSE(trained.program.forward_only());
      CHECK(f.micro_batches() == 1);
      CHECK(f.sub_groups().empty());
      // The same units and shards: what the training backend's homes hold.
      REQUIRE(f.units().size() == trained.program.units().size());
      for (size_t u = 0; u < f.units().size(); ++u) {
        const auto &a = f.units()[u], &b = trained.program.units()[u];
        CHECK((a.name == b.name && a.numel == b.numel && a.shard_numel == b.shard_numel && a.shard_offset == b.shard_offset &&
               a.owner == b.owner && a.owner_offset == b.owner_offset));
      }
      for (int r = 0; r < 2; ++r) CHECK(f.shard_space(r) == trained.program.shard_space(r));
      CHECK(fwd.plan.params == trained.plan.params);
      CHECK(fwd.plan.tiling_factor == trained.plan.tiling_factor);
      // The training step's forward of one micro-batch, and nothing else on the compute lane.
      CHECK(forward_computes(f) == forward_computes(trained.program));
      for (const auto& t : f.tasks()) {
        INFO(f.label(t));
        CHECK(t.phase == Phase::Forward);
        CHECK((t.data == Data::Param || t.data == Data::Activation));
        CHECK(t.kind != TaskKind::Backward);
        CHECK(t.kind != TaskKind::Recompute);
      }
      // Beside the training states: the same static bytes as a step, no higher a device peak.
      for (int r = 0; r < 2; ++r) CHECK(f.static_bytes(r) == trained.program.static_bytes(r));
      CHECK(at(f.peak_bytes(), Tier::Device) <= at(trained.program.peak_bytes(), Tier::Device));
      // Alone: the parameters are all that stays.
      const PlanResult alone = make_forward_plan(g, hw, forward_config(c, trained.plan), 2, ForwardBeside::Nothing);
      require_valid(alone, hw);
      double whole = 0;  // stages below 3 keep every parameter on every rank
      for (const auto& u : f.units()) whole += double(u.numel);
      for (int r = 0; r < 2; ++r) {
        const double params = 2.0 * (c.zero_stage >= 3 ? double(f.shard_space(r)) : whole);
        const PerTier st = alone.program.static_bytes(r);
        CHECK(at(st, fwd.plan.params) == Approx(params));
        CHECK(st[0] + st[1] + st[2] == Approx(params));
      }
      // Deterministic.
      CHECK(dump(f) == dump(make_forward_plan(g, hw, forward_config(c, trained.plan), 2, ForwardBeside::TrainingStates).program));
    }
  }
}

TEST_CASE("a forward-only Program fetches every parameter from its tier before each use", "[planner][forward]") {
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.tiling_factor = 4;
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2), c);
  const PlanResult fwd = make_forward_plan(g, hw, c, 1, ForwardBeside::Nothing);
  require_valid(fwd, hw);
  CHECK(fwd.plan.params == Tier::Nvme);
  // Each unit read from NVMe, copied up and gathered once per use (no reuse distance here).
  std::vector<int> reads(fwd.program.units().size(), 0), uses(fwd.program.units().size(), 0);
  for (const auto& t : fwd.program.tasks()) {
    if (t.kind == TaskKind::NvmeRead && t.data == Data::Param) ++reads[size_t(t.unit)];
    if (t.kind == TaskKind::Forward && t.unit >= 0) ++uses[size_t(t.unit)];
  }
  for (size_t u = 0; u < reads.size(); ++u) {
    INFO(fwd.program.units()[u].name);
    CHECK(reads[u] >= 1);
  }
  CHECK(fwd.plan.param_bytes_fetched > 0);
  CHECK(fwd.plan.grad_bytes_stored == 0);
  CHECK(fwd.plan.optimizer_bytes_read == 0);
  CHECK(fwd.plan.checkpoint_bytes_saved == 0);
}

TEST_CASE("a forward-only Program under tensor parallelism frees a run's buffers with its all-reduce", "[planner][forward]") {
  HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/zero3.yaml"));
  c.tensor_parallel = 2;
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2), c);
  const PlanResult trained = make_plan(g, hw, c, 4);
  const PlanResult fwd = make_forward_plan(g, hw, forward_config(c, trained.plan), 4, ForwardBeside::TrainingStates);
  require_valid(fwd, hw);
  int all_reduces = 0;
  for (const auto& t : fwd.program.tasks())
    if (t.kind == TaskKind::AllReduce) {
      ++all_reduces;
      CHECK(t.participants == 2);
      CHECK(t.lane == Lane::Compute);
    }
  // The training step's forward all-reduces of micro-batch 0, not its recomputes (emitted among the
  // backward's tasks, which also all-reduce in the forward phase).
  int trained_fwd_all_reduces = 0;
  for (const auto& t : trained.program.tasks()) {
    if (t.kind == TaskKind::Backward && t.micro_batch == 0) break;
    if (t.kind == TaskKind::AllReduce && t.data == Data::Activation && t.phase == Phase::Forward && t.micro_batch == 0)
      ++trained_fwd_all_reduces;
  }
  CHECK(trained_fwd_all_reduces > 0);
  CHECK(all_reduces == trained_fwd_all_reduces);
}

TEST_CASE("a forward-only Program that does not fit is refused naming the tier", "[planner][forward]") {
  HwProfile hw = roomy_hw();
  hw.node.gpu.memory = 1e5;  // 100 kB: less than the model's parameters alone
  RunConfig c = load_run_config(source("configs/zero3.yaml"));
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2), c);
  CHECK_THROWS_AS(make_forward_plan(g, hw, c, 1, ForwardBeside::Nothing), PlanError);
}
