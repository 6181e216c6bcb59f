// What the Program states so that backends infer nothing: every wait a backend makes is a Program
// dependency (core::unstated_waits, enforced by the Executor), the buffer each gather stage fills
// (Task::buffer), the tile a compute task runs (Task::tile), and where each micro-batch's backward
// starts with the checkpoint copies before it (Program::backward_starts).
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/plan.hpp"
#include "core/plan_state.hpp"  // ProgramBuilder, to make a Program that lacks a dependency
#include "program_edit.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/exec/executor.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

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
  return zinf::test::with_deps(p, [&](const Task& t, std::vector<int32_t> deps) {
    if (t.id == waiter) std::erase_if(deps, [&](int32_t d) { return drop.count(d) > 0; });
    return deps;
  });
}

struct NoopBackend : engine::TaskBackend {
  std::vector<TaskWait> declared;
  void run(const Task&) override {}
  std::vector<TaskWait> waits(const Program&) const override { return declared; }
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
  CHECK(backend.waits(r.program).size() == waits.size());
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
          const bool fills_gathered = t.kind == TaskKind::AllGather || t.kind == TaskKind::Broadcast ||
                                      (owner && (t.kind == TaskKind::Alloc || t.kind == TaskKind::CopyH2D));
          INFO(p.label(t));
          REQUIRE(t.buffer >= 0);  // every fetch stage names the buffer it fills
          const auto al = p.allocs(t, rank);
          if (!fills_gathered) {  // a staging buffer of its own: the host-to-device copy's shard
            REQUIRE(al.size() == 1);
            CHECK(al[0].buffer == t.buffer);
            continue;
          }
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

TEST_CASE("fetch stages name the buffer they read, and checkpointed runs their blocks and forward ends", "[program]") {
  for (const char* partitioning : {"bandwidth-centric", "owner-based"}) {
    DYNAMIC_SECTION(partitioning) {
      const PlanResult r = plan_tiny(fmt::format("zero_stage: 3\npartitioning: {}\n"
                                                 "offload: {{params: nvme, optimizer: nvme}}\n"
                                                 "activation_checkpoint: {{interval: 1, tier: nvme}}\n"
                                                 "gradient_accumulation: 2\ntiling_factor: 2\n",
                                                 partitioning),
                                     1);
      const Program& p = r.program;
      CHECK(validate_program(p).empty());
      const bool owner = p.partitioning() == Partitioning::OwnerBased;
      // Each stage that reads what an earlier stage filled names it, and depends on that stage.
      int sourced = 0;
      for (const Task& t : p.tasks()) {
        if (t.data != Data::Param || t.phase == Phase::Optimizer) continue;
        INFO(p.label(t));
        // Owner-based, the owner broadcasts what its copy put in the gathered buffer (parameters on NVMe).
        const bool reads_staged = t.kind == TaskKind::CopyH2D || (!owner && t.kind == TaskKind::AllGather) ||
                                  (owner && t.kind == TaskKind::Broadcast);
        CHECK((t.source >= 0) == reads_staged);
        if (t.source < 0) continue;
        const Task* from = nullptr;
        for (int32_t d : p.deps(t))
          if (p.task(d).buffer == t.source) from = &p.task(d);
        REQUIRE(from != nullptr);
        CHECK(from->unit == t.unit);
        CHECK(from->kind == (t.kind == TaskKind::CopyH2D ? TaskKind::NvmeRead : TaskKind::CopyH2D));
        ++sourced;
      }
      CHECK(sourced > 0);
      // The runs the Program states are those its forward tasks name: the blocks they run, and the
      // last of them in each micro-batch.
      std::map<int32_t, std::set<int32_t>> blocks;
      std::map<std::pair<int32_t, int32_t>, int32_t> last;
      for (const Task& t : p.tasks())
        if (t.kind == TaskKind::Forward && t.checkpoint >= 0) {
          blocks[t.checkpoint].insert(p.ops()[size_t(t.op)].block);
          last[{t.checkpoint, t.micro_batch}] = t.id;
        }
      REQUIRE(p.checkpoint_runs().size() == blocks.size());
      REQUIRE(p.checkpoint_runs().size() >= 2);
      for (const auto& c : p.checkpoint_runs()) {
        CHECK(*blocks[c.id].begin() == c.first_block);
        CHECK(*blocks[c.id].rbegin() == c.last_block);
        CHECK(blocks[c.id].size() == size_t(c.last_block - c.first_block + 1));
        REQUIRE(c.forward_end.size() == 2);
        for (int32_t mb = 0; mb < 2; ++mb) CHECK(c.forward_end[size_t(mb)] == last.at({c.id, mb}));
      }
    }
  }
}

TEST_CASE("validate_program fails a source no dependency fills and a misstated checkpointed run", "[program]") {
  const PlanResult r = plan_tiny("zero_stage: 3\noffload: {params: nvme, optimizer: cpu}\n"
                                 "activation_checkpoint: {interval: 1, tier: host}\n");
  const Program& p = r.program;
  REQUIRE(validate_program(p).empty());
  const Task* copy = nullptr;
  for (const Task& t : p.tasks())
    if (t.kind == TaskKind::CopyH2D && t.data == Data::Param && t.source >= 0) copy = &t;
  REQUIRE(copy != nullptr);
  std::set<int32_t> readers;
  for (int32_t d : p.deps(*copy))
    if (p.task(d).buffer == copy->source) readers.insert(d);
  const auto unsourced = validate_program(without_deps(p, copy->id, readers));
  CHECK_THAT(fmt::format("{}", fmt::join(unsourced, "\n")), Contains("which no task of its unit or sub-group it depends on fills"));

  Program misstated = without_deps(p, -1, {});
  REQUIRE(validate_program(misstated).empty());
  ProgramBuilder b(misstated);
  REQUIRE(!b.checkpoint_runs().empty());
  b.checkpoint_runs()[0].forward_end[0] -= 1;
  b.checkpoint_runs().back().last_block = b.checkpoint_runs().back().first_block - 1;
  const auto errors = fmt::format("{}", fmt::join(validate_program(misstated), "\n"));
  CHECK_THAT(errors, Contains("as its forward's end in micro-batch 0"));
  CHECK_THAT(errors, Contains("covers blocks"));
}

TEST_CASE("each block's and operator's last compute task per micro-batch is stated, and checked", "[program]") {
  const PlanResult r = plan_tiny(kHostCheckpoints);
  const Program& p = r.program;
  REQUIRE(validate_program(p).empty());
  REQUIRE(p.compute_ends().size() == 2);
  // What the ends must be, found by scanning the tasks: the last backward (and forward) of each block,
  // the last backward of each operator outside the blocks.
  std::map<std::tuple<int32_t, int32_t, bool>, int32_t> last;  // (micro-batch, block or -1 - op, forward)
  for (const Task& t : p.tasks()) {
    if (t.kind != TaskKind::Backward && t.kind != TaskKind::Forward) continue;
    const int32_t block = p.ops()[size_t(t.op)].block;
    if (t.kind == TaskKind::Forward && block < 0) continue;
    last[{t.micro_batch, block >= 0 ? block : -1 - t.op, t.kind == TaskKind::Forward}] = t.id;
  }
  size_t stated = 0;
  for (int32_t mb = 0; mb < 2; ++mb) {
    const ComputeEnds& e = p.compute_ends()[size_t(mb)];
    for (size_t b = 0; b < e.block_backward.size(); ++b) {
      CHECK(e.block_backward[b] == last.at({mb, int32_t(b), false}));
      CHECK(e.block_forward[b] == last.at({mb, int32_t(b), true}));
      stated += 2;
    }
    for (size_t op = 0; op < e.op_backward.size(); ++op)
      if (e.op_backward[op] >= 0) {
        CHECK(e.op_backward[op] == last.at({mb, -1 - int32_t(op), false}));
        ++stated;
      }
  }
  CHECK(stated == last.size());
  Program misstated = without_deps(p, -1, {});
  ProgramBuilder(misstated).compute_ends()[1].block_backward[0] -= 1;
  CHECK_THAT(fmt::format("{}", fmt::join(validate_program(misstated), "\n")),
             Contains("micro-batch 1 states compute ends that are not its blocks' and operators' last compute tasks"));
}

TEST_CASE("each micro-batch's backward start is stated with the checkpoint copies before it, and checked",
          "[program][waits]") {
  const PlanResult r = plan_tiny(kHostCheckpoints);
  const Program& p = r.program;
  // What the start must be, found by scanning the tasks: the micro-batch's first backward, and
  // every device-to-host copy of its checkpoints.
  std::map<int32_t, int32_t> first;
  std::map<int32_t, std::vector<int32_t>> copies;
  for (const Task& t : p.tasks()) {
    if (t.kind == TaskKind::Backward && !first.count(t.micro_batch)) first[t.micro_batch] = t.id;
    if (t.kind == TaskKind::CopyD2H && t.data == Data::Checkpoint) copies[t.micro_batch].push_back(t.id);
  }
  REQUIRE(p.backward_starts().size() == 2);
  for (int32_t mb = 0; mb < 2; ++mb) {
    const BackwardStart& b = p.backward_starts()[size_t(mb)];
    CHECK(b.task == first.at(mb));
    CHECK(b.checkpoint_copies == copies.at(mb));
    CHECK(int64_t(b.checkpoint_copies.size()) == r.plan.checkpoints_per_micro_batch);
  }
  std::ostringstream json;
  p.write_json(json);
  CHECK_THAT(json.str(), Contains(fmt::format("{{\"micro_batch\":0,\"task\":{},\"checkpoint_copies\":[{}]}}", first.at(0),
                                              fmt::join(copies.at(0), ","))));
  // Checkpoints kept on the device: a start, no copies.
  const Program device = plan_tiny("zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n").program;
  REQUIRE(device.backward_starts().size() == 1);
  CHECK(device.backward_starts()[0].task >= 0);
  CHECK(device.backward_starts()[0].checkpoint_copies.empty());

  auto errors_of = [](const Program& q) { return fmt::format("{}", fmt::join(validate_program(q), "\n")); };
  {
    Program late = without_deps(p, -1, {});
    ProgramBuilder(late).backward_starts()[1].task += 1;
    CHECK_THAT(errors_of(late), Contains(fmt::format("micro-batch 1 states task {} as its backward's start", first.at(1) + 1)));
  }
  {
    Program short_of_one = without_deps(p, -1, {});
    ProgramBuilder(short_of_one).backward_starts()[0].checkpoint_copies.pop_back();
    CHECK_THAT(errors_of(short_of_one), Contains("micro-batch 0 states checkpoint copies"));
  }
  const int32_t last_copy = copies.at(0).back();
  CHECK_THAT(errors_of(without_deps(p, first.at(0), {last_copy})),
             Contains(fmt::format("micro-batch 0's backward without depending on its checkpoint copy {}", last_copy)));
}
