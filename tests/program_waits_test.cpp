// What the Program states so that backends infer nothing: every wait a backend makes is a Program
// dependency (core::unstated_waits, enforced by the Executor), the buffer each gather stage fills
// (Task::buffer) and the tile a compute task runs (Task::tile).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/plan.hpp"
#include "core/plan_state.hpp"  // ProgramBuilder, to make a Program that lacks a dependency
#include "engine/comm/collectives.hpp"
#include "engine/exec/executor.hpp"
#include "engine/exec/gpt_backend.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"

using namespace zinf;
using namespace zinf::core;
using Catch::Matchers::Contains;
using zinf::test::source;

namespace {

ModelGraph tiny_graph() { return models::build_gpt(load_model_spec(source("models/gpt-tiny.yaml"))); }

PlanResult plan_tiny(const std::string& yaml, int ranks = 1) {
  return make_plan(tiny_graph(), load_hwprofile(source("hwprofiles/cpu-dev.yaml")), parse_run_config(yaml, "test-config"),
                   ranks);
}

const char* kHostCheckpoints =
    "zero_stage: 3\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: host}\n"
    "gradient_accumulation: 2\n";

// The same Program with task `waiter`'s dependencies on the tasks in `drop` removed (one rank).
Program without_deps(const Program& p, int32_t waiter, const std::set<int32_t>& drop) {
  REQUIRE(p.ranks() == 1);
  Program out;
  ProgramBuilder b(out);
  for (const Task& t : p.tasks()) {
    std::vector<int32_t> deps;
    for (int32_t d : p.deps(t))
      if (t.id != waiter || !drop.count(d)) deps.push_back(d);
    auto al = p.allocs(t, 0), fr = p.frees(t, 0);
    b.add(t, deps, std::vector<MemEvent>(al.begin(), al.end()), std::vector<MemEvent>(fr.begin(), fr.end()));
  }
  b.ranks() = p.ranks();
  b.gpus_per_node() = p.gpus_per_node();
  b.partitioning() = p.partitioning();
  b.micro_batches() = p.micro_batches();
  b.units() = p.units();
  b.sub_groups() = p.sub_groups();
  b.ops() = p.ops();
  b.activations() = p.activations();
  b.op_order() = p.op_order();
  b.shard_space() = {p.shard_space(0)};
  b.static_bytes() = {p.static_bytes(0)};
  b.budget() = p.budget();
  b.peak() = p.peak_bytes();
  return out;
}

struct NoopBackend : engine::TaskBackend {
  std::vector<TaskWait> declared;
  void run(const Task&) override {}
  std::vector<TaskWait> waits() const override { return declared; }
};

}  // namespace

TEST_CASE("the planner states the wait before backward: each micro-batch's first backward depends on its checkpoint "
          "copies",
          "[program][waits]") {
  const PlanResult r = plan_tiny(kHostCheckpoints);
  const Program& p = r.program;
  const auto waits = checkpoint_copy_waits(p);
  // Every checkpoint of both micro-batches is copied to the host once.
  REQUIRE(r.plan.checkpoints_per_micro_batch > 0);
  REQUIRE(waits.size() == size_t(2 * r.plan.checkpoints_per_micro_batch));
  for (const auto& w : waits) {
    const auto deps = p.deps(p.task(w.waiter));
    CHECK(std::find(deps.begin(), deps.end(), w.awaited) != deps.end());  // stated directly
    CHECK(p.task(w.waiter).kind == TaskKind::Backward);
    CHECK(p.task(w.awaited).micro_batch == p.task(w.waiter).micro_batch);
  }
  CHECK(unstated_waits(p, waits).empty());
  CHECK(validate_program(p).empty());
  // Checkpoints kept on the device are never copied: nothing to wait for.
  CHECK(checkpoint_copy_waits(
            plan_tiny("zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n").program)
            .empty());
}

TEST_CASE("unstated_waits names a wait that the Program does not order, and accepts transitive dependencies",
          "[program][waits]") {
  const Program p = plan_tiny(kHostCheckpoints).program;
  const auto waits = checkpoint_copy_waits(p);
  REQUIRE(!waits.empty());
  const int32_t waiter = waits.front().waiter;
  std::set<int32_t> copies;
  for (const auto& w : waits)
    if (w.waiter == waiter) copies.insert(w.awaited);
  const Program wrong = without_deps(p, waiter, copies);
  REQUIRE(wrong.tasks().size() == p.tasks().size());
  const auto errors = unstated_waits(wrong, waits);
  // The micro-batch's last copy runs beside its last forward steps, on no path to the backward once
  // the dependency is gone; copies issued earlier are still ordered through the compute lane.
  REQUIRE(!errors.empty());
  CHECK_THAT(errors.front(), Contains("waits for task") && Contains("checkpoint"));
  CHECK_THAT(errors.front(), Contains(fmt::format("task {} (", waiter)));
  // Ordered through other tasks is stated too: the last task depends on the first one's successors.
  const int32_t last = static_cast<int32_t>(p.tasks().size()) - 1;
  CHECK(unstated_waits(p, {{last, 0, "transitively"}}).empty());
  // A wait on a later task, or outside the Program, can never be stated.
  CHECK(unstated_waits(p, {{0, last, "backwards"}}).size() == 1);
  CHECK(unstated_waits(p, {{0, last + 1, "outside"}}).size() == 1);
}

TEST_CASE("the Executor refuses a backend whose waits the Program does not state", "[program][waits][executor]") {
  const PlanResult r = plan_tiny(kHostCheckpoints);
  const auto waits = checkpoint_copy_waits(r.program);
  std::set<int32_t> copies;
  for (const auto& w : waits)
    if (w.waiter == waits.front().waiter) copies.insert(w.awaited);
  const Program wrong = without_deps(r.program, waits.front().waiter, copies);

  NoopBackend noop;
  noop.declared = waits;
  CHECK_NOTHROW(engine::Executor(r.program, 0, noop));
  CHECK_THROWS_WITH(engine::Executor(wrong, 0, noop), Contains("the backend waits where the Program states no dependency"));
  noop.declared.clear();
  CHECK_NOTHROW(engine::Executor(wrong, 0, noop));  // a backend that waits for nothing takes it

  // The GPT CPU backend declares its wait before backward.
  const ModelGraph g = tiny_graph();
  engine::Gpt2 model(g);
  engine::LocalCollectives comm;
  engine::GptBackendOptions o;
  o.config = parse_run_config(kHostCheckpoints, "test-config");
  engine::GptCpuBackend backend(r.program, r.plan, model, 0, comm, o);
  CHECK(backend.waits().size() == waits.size());
  CHECK_NOTHROW(engine::Executor(r.program, 0, backend));
  CHECK_THROWS_WITH(engine::Executor(wrong, 0, backend), Contains("first backward"));
}

TEST_CASE("gather stages name the buffer they fill, and compute tasks the tile they run", "[program]") {
  for (const char* partitioning : {"bandwidth-centric", "owner-based"}) {
    DYNAMIC_SECTION(partitioning) {
      const PlanResult r = plan_tiny(fmt::format("zero_stage: 3\npartitioning: {}\noffload: {{params: cpu, optimizer: cpu}}\n"
                                                 "activation_checkpoint: {{interval: 1, tier: host}}\ntiling_factor: 4\n"
                                                 "prefetch: {{reuse_distance_bytes: 0}}\n",
                                                 partitioning),
                                     2);
      const Program& p = r.program;
      const bool owner = p.partitioning() == Partitioning::OwnerBased;
      std::map<int64_t, int32_t> allocated_by;  // gathered buffer -> the task that allocates it
      int gathers = 0, tiles = 0;
      for (const Task& t : p.tasks()) {
        const int rank = std::max(0, t.owner);
        if (t.data == Data::Param && t.phase != Phase::Optimizer) {
          const bool fills = t.kind == TaskKind::AllGather || t.kind == TaskKind::Broadcast ||
                             (owner && (t.kind == TaskKind::Alloc || t.kind == TaskKind::CopyH2D));
          INFO(p.label(t));
          if (!fills) {
            CHECK(t.buffer == -1);
            continue;
          }
          REQUIRE(t.buffer >= 0);
          const auto al = p.allocs(t, rank);
          if (t.kind == TaskKind::AllGather || t.kind == TaskKind::Alloc) {
            REQUIRE(al.size() == 1);
            CHECK(al[0].buffer == t.buffer);  // the one it allocates
            allocated_by[t.buffer] = t.id;
          } else {
            // The owner's copy and the broadcast fill the buffer an earlier Alloc of the unit made.
            REQUIRE(allocated_by.count(t.buffer));
            CHECK(p.task(allocated_by[t.buffer]).unit == t.unit);
          }
          ++gathers;
        }
        if (t.kind == TaskKind::Forward || t.kind == TaskKind::Backward || t.kind == TaskKind::Recompute) {
          const bool tiled = t.unit >= 0 && p.units()[size_t(t.unit)].tiles > 1;
          INFO(p.label(t));
          CHECK((t.tile >= 0) == tiled);
          if (t.tile >= 0) {
            CHECK(p.units()[size_t(t.unit)].tile == t.tile);
            ++tiles;
          }
        }
      }
      CHECK(gathers > 0);
      CHECK(tiles > 0);
    }
  }
}
