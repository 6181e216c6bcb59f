// The vocabulary-wide operators (the embedding and the LM head) tiled along the vocabulary in core:
// how many tiles the planner picks, every tile stated in the Program forward and backward, each
// tile's gradient reduced right after its backward, the tied weight's two uses reduced apart in a
// stated order, the device peak falling by the head's share, the simulator running the same tiles.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>

#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "planner_test_util.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using namespace zinf::test;

namespace {

// A GPT whose vocabulary (4096 x 64: 262144 elements) outweighs its largest linear (c_fc, 16640)
// 15.75 times: the automatic rule gives 16 vocabulary tiles per tiling factor.
ModelSpec wide_vocabulary(bool tied = true) {
  ModelSpec s = tiny_spec(2, 64, tied);
  s.vocab = 4096;
  return s;
}

const ParamGroup& group_named(const ModelGraph& g, const std::string& name) {
  for (const auto& p : g.params)
    if (p.name == name) return p;
  FAIL("no group " << name);
  return g.params.front();
}

std::vector<const ParamUnit*> units_of(const Program& p, int32_t group) {
  std::vector<const ParamUnit*> out;
  for (const auto& u : p.units())
    if (u.group == group) out.push_back(&u);
  return out;
}

// The tiles of the compute tasks of `op` in `kind` for micro-batch 0, in Program order.
std::vector<int32_t> compute_tiles(const Program& p, int32_t op, TaskKind kind) {
  std::vector<int32_t> tiles;
  for (const auto& t : p.tasks())
    if (t.kind == kind && t.op == op && t.micro_batch == 0) tiles.push_back(t.tile);
  return tiles;
}

int32_t op_named(const ModelGraph& g, const std::string& name) {
  for (const auto& o : g.ops)
    if (o.name == name) return o.id;
  FAIL("no operator " << name);
  return -1;
}

}  // namespace

TEST_CASE("the vocabulary rule: the tiling factor times the power of two that brings it to the largest linear", "[planner][vocabulary]") {
  CHECK(vocabulary_tiles(4096, 262144, 16640, 1, 0) == 16);
  CHECK(vocabulary_tiles(4096, 262144, 16640, 4, 0) == 64);
  CHECK(vocabulary_tiles(256, 16384, 16640, 1, 0) == 1);  // gpt-tiny: the vocabulary is no larger
  CHECK(vocabulary_tiles(256, 16384, 16640, 4, 0) == 4);  // ... and tiled as the linears are
  CHECK(vocabulary_tiles(4096, 262144, 16640, 1, 3) == 3);  // fixed by the run config
  CHECK(vocabulary_tiles(10, 262144, 16640, 8, 0) == 10);   // at most one row per tile
  // gpt2-xl: 50257 x 1600 against c_fc's 6400 x 1600 + 6400: 8 tiles; the 1T model's vocabulary
  // is smaller than its linears: tiled as they are.
  const ParamCounts xl = gpt_param_counts(load_model_spec(source("models/gpt2-xl.yaml")));
  CHECK(vocabulary_tiles(xl.vocabulary_rows, xl.vocabulary, xl.largest_linear_group, 1, 0) == 8);
  const ParamCounts t1 = gpt_param_counts(load_model_spec(source("models/gpt-1t.yaml")));
  CHECK(vocabulary_tiles(t1.vocabulary_rows, t1.vocabulary, t1.largest_linear_group, 2, 0) == 2);
  // The memory model counts the vocabulary's tile where it is the largest, as the planner tiles it.
  MemoryModelInput in{load_model_spec(source("models/gpt-8b-128k.yaml")), roomy_hw(), 1,
                      load_run_config(source("configs/infinity-nvme.yaml"))};
  in.config.tiling_factor = 1;
  in.config.vocabulary_tiles = 1;
  const double untiled = memory_requirement(in).total.device;
  in.config.vocabulary_tiles = 0;
  const double tiled = memory_requirement(in).total.device;
  // 128256 x 4096 parameters and their gradient, at 2 bytes, less the largest linear's (16384 x
  // 4096), now the largest operator again (a vocabulary tile is 16032 rows).
  CHECK(untiled - tiled == Approx(2.0 * 2.0 * (128256.0 * 4096 - 16384.0 * 4096)).epsilon(1e-9));
}

TEST_CASE("the Program states every vocabulary tile of the embedding and the head, forward and backward", "[planner][vocabulary]") {
  const HwProfile hw = roomy_hw();
  for (bool tied : {true, false}) {
    INFO("tied " << tied);
    const ModelGraph g = zinf::models::build_gpt(wide_vocabulary(tied));
    RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
    c.tiling_factor = 1;
    const PlanResult r = make_plan(g, hw, c, 2);
    require_valid(r, hw);
    CHECK(r.plan.vocabulary_tiles == 16);
    CHECK(r.plan.tiling_factor == 1);
    const int32_t embed = op_named(g, "embed"), head = op_named(g, "lm_head"), loss = op_named(g, "loss");
    for (const char* name : {"wte", "lm_head"}) {
      if (!tied || std::string(name) == "wte") {
        const auto us = units_of(r.program, group_named(g, name).id);
        REQUIRE(us.size() == 16);
        for (size_t k = 0; k < us.size(); ++k) {  // contiguous vocabulary rows, 256 each
          CHECK(us[k]->row_begin == int64_t(k) * 256);
          CHECK(us[k]->row_end == int64_t(k + 1) * 256);
        }
      }
    }
    const std::vector<int32_t> up{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const std::vector<int32_t> down(up.rbegin(), up.rend());
    CHECK(compute_tiles(r.program, embed, TaskKind::Forward) == up);
    CHECK(compute_tiles(r.program, head, TaskKind::Forward) == up);
    CHECK(compute_tiles(r.program, head, TaskKind::Backward) == down);
    CHECK(compute_tiles(r.program, embed, TaskKind::Backward) == down);
    // The loss has no backward task: the head's backward computes its gradient, tile by tile.
    CHECK(compute_tiles(r.program, loss, TaskKind::Backward).empty());
    CHECK(compute_tiles(r.program, loss, TaskKind::Forward) == std::vector<int32_t>{-1});
    // The FLOPs are the untiled operators', shared by the tiles.
    c.vocabulary_tiles = 1;
    const PlanResult whole = make_plan(g, hw, c, 2);
    require_valid(whole, hw);
    CHECK(whole.plan.vocabulary_tiles == 1);
    auto flops = [](const Program& p, int32_t op) {
      double f = 0;
      for (const auto& t : p.tasks())
        if (t.op == op && is_compute(t.kind)) f += t.flops;
      return f;
    };
    for (int32_t op : {embed, head}) CHECK(flops(r.program, op) == Approx(flops(whole.program, op)).epsilon(1e-12));
  }
}

TEST_CASE("each vocabulary tile's gradient is reduced after its backward; the tied weight's two uses each once, in order",
          "[planner][vocabulary]") {
  const HwProfile hw = roomy_hw();
  const ModelGraph g = zinf::models::build_gpt(wide_vocabulary(true));
  for (const char* grads : {"nvme", "cpu", "device"}) {
    INFO("gradients on " << grads);
    RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
    c.tiling_factor = 1;
    c.gradient_accumulation = 2;
    c.gradients = std::string(grads) == "nvme" ? Placement{false, Tier::Nvme}
                  : std::string(grads) == "cpu" ? Placement{false, Tier::Host}
                                                : Placement{false, Tier::Device};
    if (c.gradients.tier == Tier::Device) c.params = {false, Tier::Device};
    const PlanResult r = make_plan(g, hw, c, 2);
    require_valid(r, hw);
    const Program& p = r.program;
    const int32_t embed = op_named(g, "embed"), head = op_named(g, "lm_head");
    for (const ParamUnit* u : units_of(p, group_named(g, "wte").id)) {
      std::vector<const Task*> reductions;
      for (const auto& t : p.tasks())
        if (t.data == Data::Grad && t.kind == TaskKind::ReduceScatter && t.unit == u->id) reductions.push_back(&t);
      // Two uses (head, then embedding) in each of two micro-batches.
      REQUIRE(reductions.size() == 4);
      for (size_t k = 0; k < 4; ++k) {
        const Task& red = *reductions[k];
        CHECK(red.micro_batch == int32_t(k / 2));
        CHECK(red.grad_first == (k == 0));
        CHECK(red.grad_last == (k == 3));
        // Right after the backward of its tile: a direct dependency on that compute task.
        const int32_t op = k % 2 == 0 ? head : embed;
        bool after_its_backward = false;
        for (int32_t d : p.deps(red)) {
          const Task& dt = p.task(d);
          after_its_backward |= dt.kind == TaskKind::Backward && dt.op == op && dt.unit == u->id && dt.micro_batch == red.micro_batch;
        }
        CHECK(after_its_backward);
        // The head's tile gradient is freed by its reduction: it does not live through the blocks.
        CHECK(!p.frees(red, 0).empty());
        // A later contribution is read back and added where the home is on NVMe.
        if (c.gradients.tier == Tier::Nvme) {
          const bool reads_partial = std::any_of(p.tasks().begin(), p.tasks().end(), [&](const Task& t) {
            return t.kind == TaskKind::NvmeRead && t.data == Data::Grad && t.unit == u->id && t.micro_batch == red.micro_batch &&
                   t.phase == Phase::Backward && t.grad_first == red.grad_first && t.grad_last == red.grad_last &&
                   t.id > red.id;
          });
          CHECK(reads_partial == !red.grad_first);
        }
      }
    }
  }
}

TEST_CASE("tiling the vocabulary lowers the device peak by about the LM head's share", "[planner][vocabulary]") {
  const HwProfile hw = roomy_hw();
  for (bool tied : {true, false}) {
    INFO("tied " << tied);
    ModelSpec s = wide_vocabulary(tied);
    s.vocab = 16384;  // the head's weight (16384 x 64) four times the whole of the blocks
    s.seq = 8;
    s.micro_batch = 1;
    const ModelGraph g = zinf::models::build_gpt(s);
    RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
    c.tiling_factor = 1;
    c.max_live_bytes = 1;  // no prefetch beyond the unit in use
    c.reuse_distance_bytes = 0;
    c.vocabulary_tiles = 1;
    const PlanResult whole = make_plan(g, hw, c, 2);
    c.vocabulary_tiles = 0;
    const PlanResult tiled = make_plan(g, hw, c, 2);
    require_valid(whole, hw);
    require_valid(tiled, hw);
    // The head's working set on the device: its gathered weight and its gradient (2 bytes each).
    const double head = 2.0 * 2.0 * 16384.0 * 64.0;
    const double fall = at(whole.plan.peak_bytes, Tier::Device) - at(tiled.plan.peak_bytes, Tier::Device);
    INFO("untiled peak " << at(whole.plan.peak_bytes, Tier::Device) << ", tiled " << at(tiled.plan.peak_bytes, Tier::Device));
    CHECK(tiled.plan.vocabulary_tiles == 64);
    CHECK(fall > 0.75 * head);
    CHECK(fall < 1.25 * head);
    // zinf plan's table: per tile, a 64th of the head.
    const auto it = std::find_if(tiled.plan.operator_tiles.begin(), tiled.plan.operator_tiles.end(),
                                 [](const OperatorTiles& o) { return o.name == "lm_head"; });
    REQUIRE(it != tiled.plan.operator_tiles.end());
    CHECK(it->tiles == 64);
    CHECK(it->gathered_bytes == Approx(2.0 * 16384.0 * 64.0 / 64.0));
    CHECK(it->gradient_bytes == Approx(it->gathered_bytes));
  }
}

TEST_CASE("the simulator runs the Program's vocabulary tiles", "[planner][vocabulary][sim]") {
  const HwProfile hw = roomy_hw();
  const ModelGraph g = zinf::models::build_gpt(wide_vocabulary(true));
  RunConfig c = load_run_config(source("configs/infinity-cpu.yaml"));
  c.tiling_factor = 1;
  const PlanResult r = make_plan(g, hw, c, 2);
  require_valid(r, hw);
  const int32_t head = op_named(g, "lm_head");
  // In a child (one SimGrid engine per process): the step and, per tile, the head's compute tasks
  // the simulator ran on rank 0.
  const std::string out = zinf::sim::run_isolated([&] {
    const zinf::sim::SimReport rep = zinf::sim::simulate(r.program, hw);
    std::map<int32_t, int> tiles;
    for (const auto& e : rep.timeline.events) {
      const Task& t = r.program.task(e.task);
      if (t.op == head && is_compute(t.kind) && e.rank == 0) ++tiles[t.tile];
    }
    std::string s = fmt::format("{}", rep.step_time);
    for (const auto& [tile, n] : tiles) s += fmt::format(" {} {}", tile, n);
    return s;
  });
  std::istringstream in(out);
  double step = 0;
  in >> step;
  CHECK(step > 0);
  std::map<int32_t, int> head_tiles;  // tile -> simulated compute tasks of the head on rank 0
  for (int32_t tile = 0, n = 0; in >> tile >> n;) head_tiles[tile] = n;
  REQUIRE(head_tiles.size() == 16);
  for (const auto& [tile, n] : head_tiles) CHECK(n == 2 * int(r.program.micro_batches()));  // forward and backward
}
