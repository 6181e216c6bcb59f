// A DeepSpeed release's engine behaviours (core/deepspeed_release.hpp) as the planner states them in
// the Program, each against what the release's code does: the synchronizing fetch (nothing issued
// on the device before a fetching module overlaps it), backward NVMe reads issued with their
// all-gather and waited for before the module before them runs, the list collectives' device
// passes at the HBM rate, DeepSpeed's prefetch rule against zinf's, and the misaligned trace that
// prefetches and reuses nothing. The run config's keys, and a release's switches.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "core/deepspeed_release.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "planner_test_util.hpp"
#include "formats/deepspeed_release.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using namespace zinf::core;
using zinf::test::require_valid;
using zinf::test::roomy_hw;
using zinf::test::tiny_spec;

namespace {

RunConfig zero3(Tier params) {
  RunConfig c;
  c.zero_stage = 3;
  c.params = {false, params};
  c.optimizer = {false, Tier::Host};
  c.checkpoint_interval = 1;
  return c;
}

// The tasks of `p`'s compute lane that run a step fetching a unit: those depending on a parameter
// all-gather (directly) that is not also a dependency of an earlier compute task.
std::vector<int32_t> fetching_computes(const Program& p) {
  std::vector<int32_t> out;
  std::vector<char> consumed(p.tasks().size(), 0);
  for (const auto& t : p.tasks()) {
    if (t.lane != Lane::Compute || !is_compute(t.kind)) continue;
    bool fetches = false;
    for (int32_t d : p.deps(t)) {
      const Task& dt = p.task(d);
      if (dt.kind == TaskKind::AllGather && dt.data == Data::Param && !consumed[static_cast<size_t>(d)]) {
        fetches = true;
        consumed[static_cast<size_t>(d)] = 1;
      }
    }
    if (fetches) out.push_back(t.id);
  }
  return out;
}

}  // namespace

TEST_CASE("a DeepSpeed release names its behaviours; the run config takes a release and switches", "[deepspeed]") {
  const auto b12 = deepspeed_release_behaviour("0.3.12");
  CHECK(b12.fetch_syncs_device);
  CHECK(b12.gather_device_passes == 3);
  CHECK(b12.reduce_device_passes == 2);
  CHECK(b12.prefetch_while_under_live);
  CHECK_FALSE(b12.trace_misaligned);
  CHECK(b12.backward_nvme_prefetch);
  CHECK(deepspeed_release_behaviour("0.3.14").trace_misaligned);
  CHECK(deepspeed_release_behaviour("0.3.14").backward_nvme_prefetch);
  CHECK_FALSE(deepspeed_release_behaviour("0.3.15").backward_nvme_prefetch);
  CHECK_THROWS_WITH(deepspeed_release_behaviour("0.6.0"), Catch::Contains("unknown DeepSpeed release '0.6.0'") &&
                                                              Catch::Contains("0.3.12"));
  // zinf's own engine: none of them.
  const DeepSpeedBehaviour none;
  CHECK_FALSE(none.fetch_syncs_device);
  CHECK(none.gather_device_passes == 0);

  const auto c = parse_run_config(
      "deepspeed_release: 0.3.15\ndeepspeed_behaviour: {trace_misaligned: false, gather_device_passes: 2}\n", "c.yaml");
  CHECK(c.deepspeed.release == "0.3.15");
  CHECK(c.deepspeed.fetch_syncs_device);
  CHECK_FALSE(c.deepspeed.backward_nvme_prefetch);
  CHECK_FALSE(c.deepspeed.trace_misaligned);
  CHECK(c.deepspeed.gather_device_passes == 2);
  // Written out and read back, the switches are the same.
  const auto back = parse_run_config(run_config_to_yaml(c, "round trip"), "back.yaml");
  CHECK(back.deepspeed.release == "0.3.15");
  CHECK_FALSE(back.deepspeed.trace_misaligned);
  CHECK(back.deepspeed.gather_device_passes == 2);
  CHECK(back.deepspeed.reduce_device_passes == 2);
  CHECK_THROWS_WITH(parse_run_config("deepspeed_release: 0.2.0\n", "c.yaml"),
                    Catch::Contains("c.yaml") && Catch::Contains("deepspeed_release"));
  CHECK_THROWS_WITH(parse_run_config("deepspeed_behaviour: {sync: true}\n", "c.yaml"), Catch::Contains("sync"));
}

TEST_CASE("a synchronizing fetch: nothing issued on the device before a fetching module overlaps it", "[deepspeed]") {
  const ModelGraph g = models::build_gpt(tiny_spec(4, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = zero3(Tier::Host);
  c.reuse_distance_bytes = 0;  // backward fetches, with reductions before it
  for (bool sync : {false, true}) {
    INFO((sync ? "synchronizing" : "zinf"));
    c.deepspeed.fetch_syncs_device = sync;
    const PlanResult r = make_plan(g, hw, c, 4);
    require_valid(r, hw);
    const Program& p = r.program;
    const Timeline tl = schedule_ideal(p, hw);
    std::map<int32_t, std::pair<double, double>> when;
    for (const auto& e : tl.events) when[e.task] = {e.start, e.end};
    // For each fetching compute task C: the device tasks issued before its step's fetch stages
    // (those issued after the compute task before C, P) all end before C starts.
    int overlapped = 0, fetching = 0;
    auto last_compute_dep = [&](const Task& t) {
      int32_t m = -1;
      for (int32_t d : p.deps(t))
        if (p.task(d).lane == Lane::Compute) m = std::max(m, d);
      return m;
    };
    for (int32_t id : fetching_computes(p)) {
      int32_t P = -1;
      for (int32_t k = id - 1; k >= 0 && P < 0; --k)
        if (p.task(k).lane == Lane::Compute) P = k;
      int32_t first_stage = id;
      for (int32_t k = P + 1; k < id; ++k) {
        const Task& s = p.task(k);
        const bool stage = (s.data == Data::Param || s.data == Data::Checkpoint) &&
                           (s.lane == Lane::NvmeRead || s.lane == Lane::H2D || s.lane == Lane::Comm);
        if (stage && last_compute_dep(s) == P) first_stage = std::min(first_stage, k);
      }
      ++fetching;
      for (int32_t d = 0; d < first_stage; ++d) {
        const Task& dt = p.task(d);
        if ((dt.lane != Lane::Comm && dt.lane != Lane::H2D && dt.lane != Lane::D2H) || !when.count(d)) continue;
        if (when[d].second > when[id].first + 1e-12) ++overlapped;
      }
    }
    CHECK(fetching > 0);
    if (sync) CHECK(overlapped == 0);
    else CHECK(overlapped > 0);  // zinf lets reductions and copies run beside the next module
  }
}

TEST_CASE("v0.3.15's backward NVMe reads: issued with their all-gather, the module before them waits", "[deepspeed]") {
  const ModelGraph g = models::build_gpt(tiny_spec(4, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = zero3(Tier::Nvme);
  c.optimizer = {false, Tier::Nvme};
  c.reuse_distance_bytes = 0;  // backward gathers again what recompute used
  for (bool prefetch : {true, false}) {
    INFO((prefetch ? "read ahead" : "read with the all-gather"));
    c.deepspeed.backward_nvme_prefetch = prefetch;
    const PlanResult r = make_plan(g, hw, c, 4);
    require_valid(r, hw);
    const Program& p = r.program;
    // Each NVMe read of a parameter fetched for a backward step (read -> copy -> all-gather ->
    // backward compute, followed through the buffers each stage fills), and whether a backward
    // compute task waits on the read itself.
    int reads = 0, waited_by_compute = 0;
    const auto& tasks = p.tasks();
    for (const auto& t : tasks) {
      if (t.kind != TaskKind::NvmeRead || t.data != Data::Param) continue;
      int32_t copy = -1, gather = -1;
      for (const auto& u : tasks)
        if (u.kind == TaskKind::CopyH2D && u.data == Data::Param && u.source == t.buffer) copy = u.id;
      for (const auto& u : tasks)
        if (copy >= 0 && u.kind == TaskKind::AllGather && u.source == tasks[static_cast<size_t>(copy)].buffer) gather = u.id;
      bool for_backward = false, waited = false;
      for (const auto& u : tasks) {
        if (u.lane != Lane::Compute || !is_compute(u.kind)) continue;
        const auto deps = p.deps(u);
        if (u.kind == TaskKind::Backward && std::find(deps.begin(), deps.end(), gather) != deps.end()) for_backward = true;
        if (std::find(deps.begin(), deps.end(), t.id) != deps.end()) waited = true;
      }
      if (!for_backward) continue;
      ++reads;
      if (waited) ++waited_by_compute;
    }
    CHECK(reads > 0);
    // Without the read-ahead every backward read is waited for by the compute of the step it is issued at.
    if (prefetch) CHECK(waited_by_compute == 0);
    else CHECK(waited_by_compute == reads);
  }
}

TEST_CASE("the list collectives' device passes, at the HBM rate", "[deepspeed]") {
  const ModelGraph g = models::build_gpt(tiny_spec(2, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = zero3(Tier::Host);
  c.deepspeed = deepspeed_release_behaviour("0.3.13");
  const PlanResult with = make_plan(g, hw, c, 4);
  c.deepspeed = DeepSpeedBehaviour{};
  const PlanResult without = make_plan(g, hw, c, 4);
  CHECK(with.program.gather_device_passes() == 3);
  CHECK(with.program.reduce_device_passes() == 2);
  CHECK(without.program.gather_device_passes() == 0);
  const double bw = hw.node.gpu.memory_bandwidth * hw.node.gpu.elementwise_efficiency;
  int gathers = 0, reductions = 0;
  for (const auto& t : with.program.tasks()) {
    const double d = collective_device_seconds(with.program, t, hw);
    if (t.kind == TaskKind::AllGather && t.data == Data::Param) {
      ++gathers;
      // bf16 on the device: the buffer is t.bytes; a zero fill and a list copy (read + write).
      CHECK(d == Approx(3 * t.bytes / bw));
      CHECK(nominal_duration(with.program, t, 0, hw) ==
            Approx(d + collective_seconds(hw, t.kind, t.bytes, 4, 4)));
      CHECK(collective_device_seconds(without.program, t, hw) == 0);
    } else if (t.kind == TaskKind::ReduceScatter && t.data == Data::Grad) {
      ++reductions;
      CHECK(d == Approx(2 * t.bytes / bw));
    } else {
      CHECK(d == 0);
    }
  }
  CHECK(gathers > 0);
  CHECK(reductions > 0);
  // Stages 0-2 gather nothing and reduce-scatter nothing: no passes.
  c.deepspeed = deepspeed_release_behaviour("0.3.13");
  c.zero_stage = 1;
  c.params = c.optimizer = {false, Tier::Device};
  CHECK(make_plan(g, hw, c, 4).program.gather_device_passes() == 0);
}

TEST_CASE("DeepSpeed's prefetch rule: while the live parameters are under max_live, whatever comes next", "[deepspeed]") {
  const ModelGraph g = models::build_gpt(tiny_spec(4, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = zero3(Tier::Host);
  // A limit of one byte: zinf's rule never has room for a unit beside what is live, so nothing is
  // gathered ahead; DeepSpeed's prefetches whenever nothing is live, as during a step without
  // parameters (attention, GELU, residual) after the previous unit was released.
  c.max_live_bytes = 1;
  c.reuse_distance_bytes = 0;
  auto gathers_issued_ahead = [&](bool deepspeed_rule) {
    c.deepspeed.prefetch_while_under_live = deepspeed_rule;
    const PlanResult r = make_plan(g, hw, c, 4);
    require_valid(r, hw);
    // An all-gather issued ahead depends on a compute task that does not use it.
    int ahead = 0;
    for (const auto& t : r.program.tasks()) {
      if (t.kind != TaskKind::AllGather || t.data != Data::Param) continue;
      int32_t consumer = -1;
      for (const auto& u : r.program.tasks()) {
        const auto deps = r.program.deps(u);
        if (u.lane == Lane::Compute && std::find(deps.begin(), deps.end(), t.id) != deps.end()) {
          consumer = u.id;
          break;
        }
      }
      int32_t issued_after = -1;
      for (int32_t d : r.program.deps(t))
        if (r.program.task(d).lane == Lane::Compute) issued_after = std::max(issued_after, d);
      // Ahead: some compute task runs between the one it was issued after and its consumer.
      for (const auto& u : r.program.tasks())
        if (u.lane == Lane::Compute && u.id > issued_after && u.id < consumer && is_compute(u.kind)) {
          ++ahead;
          break;
        }
    }
    return ahead;
  };
  CHECK(gathers_issued_ahead(false) == 0);
  CHECK(gathers_issued_ahead(true) > 0);
}

TEST_CASE("a misaligned trace (v0.3.14 to v0.5.10) prefetches nothing and keeps nothing for reuse", "[deepspeed]") {
  const ModelGraph g = models::build_gpt(tiny_spec(4, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = zero3(Tier::Nvme);
  c.optimizer = {false, Tier::Nvme};
  c.reuse_distance_bytes = 1e18;  // zinf would keep every unit from recompute to backward
  auto count = [&](bool misaligned) {
    c.deepspeed.trace_misaligned = misaligned;
    const PlanResult r = make_plan(g, hw, c, 4);
    require_valid(r, hw);
    int gathers = 0, not_ahead = 0;
    for (const auto& t : r.program.tasks()) {
      if (t.kind != TaskKind::AllGather || t.data != Data::Param) continue;
      ++gathers;
      // Not ahead: the next compute task after the one it waits for is its consumer.
      int32_t after = -1;
      for (int32_t d : r.program.deps(t))
        if (r.program.task(d).lane == Lane::Compute) after = std::max(after, d);
      for (const auto& u : r.program.tasks()) {
        if (u.lane != Lane::Compute || u.id <= after || !is_compute(u.kind)) continue;
        const auto deps = r.program.deps(u);
        if (std::find(deps.begin(), deps.end(), t.id) != deps.end()) ++not_ahead;
        break;
      }
    }
    return std::pair{gathers, not_ahead};
  };
  const auto [kept_gathers, kept_not_ahead] = count(false);
  const auto [all_gathers, all_not_ahead] = count(true);
  CHECK(all_gathers > kept_gathers);      // reuse off: recompute and backward each gather
  CHECK(all_not_ahead == all_gathers);    // no gather issued ahead of the module before its consumer
  CHECK(kept_not_ahead < kept_gathers);   // zinf prefetches
}
