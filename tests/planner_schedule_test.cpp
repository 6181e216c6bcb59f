// The order and waits of the tasks the planner emits: the optimizer after or overlapping backward
// (and after the global norm when clipping), a recorded operator order, checkpoint copies held on
// or overlapped with the compute stream, and the NVMe optimizer's sub-groups in flight and waves.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "core/errors.hpp"
#include "core/plan.hpp"
#include "models/gpt.hpp"
#include "planner_test_util.hpp"
#include "test_paths.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using namespace zinf::test;  // tiny_spec, roomy_hw, require_valid, source
using Catch::Matchers::Contains;

TEST_CASE("the optimizer overlaps backward, and waits for the global norm when clipping", "[planner][optimizer]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(3, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.sub_group_size = 2000;
  auto last_backward = [](const Program& p) {
    int32_t last = -1;
    for (const auto& t : p.tasks())
      if (t.kind == TaskKind::Backward) last = t.id;
    return last;
  };
  auto first_of = [](const Program& p, TaskKind k, Data d) {
    for (const auto& t : p.tasks())
      if (t.kind == k && (d == Data::None || t.data == d)) return t.id;
    return -1;
  };
  SECTION("after backward") {
    PlanResult r = make_plan(g, hw, c, 4);
    require_valid(r, hw);
    CHECK(first_of(r.program, TaskKind::OptimizerStep, Data::None) > last_backward(r.program));
    CHECK(first_of(r.program, TaskKind::NvmeRead, Data::OptimizerState) > last_backward(r.program));
  }
  SECTION("overlapping backward") {
    c.optimizer_timing = OptimizerTiming::OverlapBackward;
    PlanResult r = make_plan(g, hw, c, 4);
    require_valid(r, hw);
    CHECK(r.plan.sub_groups > 3);
    CHECK(first_of(r.program, TaskKind::OptimizerStep, Data::None) < last_backward(r.program));
  }
  SECTION("overlapping backward with clipping") {
    c.optimizer_timing = OptimizerTiming::OverlapBackward;
    c.grad_clip = 1.0;
    PlanResult r = make_plan(g, hw, c, 4);
    require_valid(r, hw);  // includes: every optimizer step depends on the all-reduced norm
    const Program& p = r.program;
    const int32_t norm = first_of(p, TaskKind::AllReduce, Data::Scalar);
    REQUIRE(norm > last_backward(p));
    CHECK(first_of(p, TaskKind::GradNorm, Data::None) > last_backward(p));
    CHECK(first_of(p, TaskKind::OptimizerStep, Data::None) > norm);
    // ... while the reads of optimizer states still overlap backward.
    CHECK(first_of(p, TaskKind::NvmeRead, Data::OptimizerState) < last_backward(p));
    CHECK_THAT(r.plan.optimizer_timing_note, Contains("global gradient norm"));
  }
}

TEST_CASE("a recorded operator order that differs from the graph's gives a valid program", "[planner][trace]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(3, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.checkpoint_interval = 2;
  std::mt19937 rng(7);
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<int32_t> order(g.ops.size());
    std::iota(order.begin(), order.end(), 0);
    // Local swaps (as a recorded trace would show) and, sometimes, a whole shuffle.
    if (iter % 5 == 4) {
      std::shuffle(order.begin(), order.end(), rng);
    } else {
      for (int k = 0; k < 4; ++k) {
        size_t i = rng() % (order.size() - 1);
        std::swap(order[i], order[i + 1]);
      }
    }
    c.partitioning = iter % 2 ? Partitioning::OwnerBased : Partitioning::BandwidthCentric;
    PlanResult r = make_plan(g, hw, c, 4, order);
    require_valid(r, hw);
    CHECK(r.program.op_order() == order);
    // Forward compute follows the recorded order.
    std::vector<int32_t> seen;
    for (const auto& t : r.program.tasks())
      if (t.kind == TaskKind::Forward && t.micro_batch == 0 && (seen.empty() || seen.back() != t.op)) seen.push_back(t.op);
    CHECK(seen == order);
  }
  std::vector<int32_t> bad(g.ops.size(), 0);
  CHECK_THROWS_WITH(make_plan(g, hw, c, 4, bad), Contains("not a permutation"));
}

TEST_CASE("synchronous checkpoint copies hold the compute stream, overlapped ones do not", "[planner][checkpoint]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(4, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-cpu.yaml"));
  c.checkpoint_interval = 1;
  auto is_compute = [](const Task& t) { return t.lane == Lane::Compute && t.kind != TaskKind::OptimizerStep; };
  for (Tier tier : {Tier::Host, Tier::Nvme}) {
    INFO(to_string(tier));
    c.checkpoints = {false, tier};
    double step[2] = {0, 0};
    for (bool sync : {false, true}) {
      INFO((sync ? "synchronous" : "overlapped"));
      c.checkpoint_copies_synchronous = sync;
      PlanResult r = make_plan(g, hw, c, 4);
      require_valid(r, hw);
      const auto& tasks = r.program.tasks();
      // Compute tasks in program order, and for each task the compute tasks that wait on it.
      std::vector<int32_t> order;
      std::vector<std::vector<int32_t>> waiters(tasks.size());
      for (const auto& t : tasks) {
        if (!is_compute(t)) continue;
        order.push_back(t.id);
        for (int32_t d : r.program.deps(t)) waiters[static_cast<size_t>(d)].push_back(t.id);
      }
      int saves = 0, loads = 0;
      for (const auto& t : tasks) {
        if (t.data != Data::Checkpoint) continue;
        if (t.kind == TaskKind::CopyD2H) {
          ++saves;
          // Synchronous: the compute task after the one that produced the checkpoint waits for the copy;
          // overlapped, it runs on (only a later one may wait, to bound the saves in flight).
          int32_t producer = -1;
          for (int32_t d : r.program.deps(t))
            if (is_compute(tasks[static_cast<size_t>(d)])) producer = d;
          const auto pos = std::find(order.begin(), order.end(), producer) - order.begin();
          REQUIRE(pos + 1 < static_cast<std::ptrdiff_t>(order.size()));
          const auto& w = waiters[static_cast<size_t>(t.id)];
          CHECK((std::find(w.begin(), w.end(), order[static_cast<size_t>(pos + 1)]) != w.end()) == sync);
        }
        if (t.kind == TaskKind::CopyH2D) {
          ++loads;
          REQUIRE(waiters[static_cast<size_t>(t.id)].size() == 1);
          const int32_t recompute = waiters[static_cast<size_t>(t.id)].front();
          CHECK(tasks[static_cast<size_t>(recompute)].kind == TaskKind::Recompute);
          // Synchronous: issued right after the compute task before the recompute, not a run ahead.
          const auto pos = std::find(order.begin(), order.end(), recompute) - order.begin();
          REQUIRE(pos > 0);
          const auto deps = r.program.deps(t);
          const bool after_previous = std::find(deps.begin(), deps.end(), order[static_cast<size_t>(pos - 1)]) != deps.end();
          if (sync) CHECK(after_previous);
        }
      }
      CHECK(saves > 0);
      CHECK(loads == saves);
      step[sync] = estimate_step_time(r.program, hw);
    }
    CHECK(step[1] > step[0]);
  }
  CHECK(parse_run_config("activation_checkpoint: {interval: 1, tier: host, copies: synchronous}\n", "c.yaml")
            .checkpoint_copies_synchronous);
  CHECK_FALSE(parse_run_config("activation_checkpoint: {interval: 1, tier: host}\n", "c.yaml").checkpoint_copies_synchronous);
  CHECK_THROWS_WITH(parse_run_config("activation_checkpoint: {interval: 1, tier: host, copies: sometimes}\n", "c.yaml"),
                    Contains("copies"));
}

namespace {

// Whether task `to` depends on task `from`, directly or through other tasks.
bool depends_on(const Program& p, int32_t to, int32_t from) {
  std::vector<char> seen(p.tasks().size(), 0);
  std::vector<int32_t> stack{to};
  while (!stack.empty()) {
    const int32_t t = stack.back();
    stack.pop_back();
    if (t == from) return true;
    if (t < from || seen[size_t(t)]) continue;
    seen[size_t(t)] = 1;
    for (int32_t d : p.deps(p.tasks()[size_t(t)])) stack.push_back(d);
  }
  return false;
}

// The optimizer phase's sub-groups in the order they start (their first task), and each one's NVMe
// reads and writes.
struct OptimizerIo {
  std::vector<int32_t> order;
  std::map<int32_t, std::vector<int32_t>> reads, writes;
};

OptimizerIo optimizer_io(const Program& p) {
  OptimizerIo io;
  for (const auto& t : p.tasks()) {
    if (t.phase != Phase::Optimizer || t.sub_group < 0) continue;
    if (std::find(io.order.begin(), io.order.end(), t.sub_group) == io.order.end()) io.order.push_back(t.sub_group);
    if (t.kind == TaskKind::NvmeRead) io.reads[t.sub_group].push_back(t.id);
    if (t.kind == TaskKind::NvmeWrite) io.writes[t.sub_group].push_back(t.id);
  }
  return io;
}

// Every state on NVMe, small sub-groups, the update overlapping backward with clipping.
RunConfig nvme_optimizer_config() {
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.gradients = {false, Tier::Nvme};
  c.sub_group_size = 2000;
  c.optimizer_timing = OptimizerTiming::OverlapBackward;
  c.grad_clip = 1.0;
  return c;
}

}  // namespace

TEST_CASE("the NVMe optimizer keeps a host budget's share of sub-groups in flight, in waves of reads then writes",
          "[planner][optimizer]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(3, 64));
  HwProfile hw = roomy_hw();
  RunConfig c = nvme_optimizer_config();
  SECTION("auto: a quarter of the host budget the states leave, in sub-groups, at least 3") {
    // From a roomy host down to one that holds a few sub-groups: every depth follows the formula,
    // and some lie strictly between the floor of 3 and every sub-group.
    bool between = false, all = false;
    for (double host = hw.node.host_memory; host > 1e5; host /= 2) {
      HwProfile small = hw;
      small.node.host_memory = host;
      PlanResult r;
      try {
        r = make_plan(g, small, c, 1);
      } catch (const PlanError&) {
        break;  // too small for the rest of the step
      }
      INFO("host memory " << host);
      require_valid(r, small);
      int64_t largest = 0;
      for (const auto& sg : r.program.sub_groups()) largest = std::max(largest, sg.count);
      // states (12 B), gradients (2 B) and updated parameters (2 B) per element staged in host memory
      const double per = 16.0 * double(largest);
      const double free = at(r.plan.budget, Tier::Host) - at(r.plan.static_bytes, Tier::Host);
      const auto fit = static_cast<int64_t>(0.25 * free / per);
      const int64_t formula = std::max<int64_t>(3, std::min(fit, r.plan.sub_groups));
      if (r.plan.optimizer_timing_note.find("halved") == std::string::npos) {
        CHECK(r.plan.sub_groups_in_flight == formula);
      } else {  // the formula's depth put the host over budget at the step's peak
        CHECK(r.plan.sub_groups_in_flight < formula);
        CHECK(r.plan.sub_groups_in_flight >= 3);
        CHECK(at(r.plan.peak_bytes, Tier::Host) <= at(r.plan.budget, Tier::Host));
      }
      CHECK(r.plan.optimizer_nvme_phases);
      CHECK_THAT(r.plan.optimizer_timing_note, Contains("sub-groups in flight"));
      between |= r.plan.sub_groups_in_flight > 3 && r.plan.sub_groups_in_flight < r.plan.sub_groups;
      all |= r.plan.sub_groups_in_flight == r.plan.sub_groups;
    }
    CHECK(between);
    CHECK(all);
  }
  SECTION("waves: a wave's reads wait for every write of the wave before, its writes for every read of it") {
    c.optimizer_sub_groups_in_flight = 4;
    PlanResult r = make_plan(g, hw, c, 1);
    require_valid(r, hw);
    const Program& p = r.program;
    REQUIRE(r.plan.sub_groups > 8);
    auto [order, reads, writes] = optimizer_io(p);
    REQUIRE(int64_t(order.size()) == r.plan.sub_groups);
    for (size_t i = 0; i < order.size(); ++i)
      for (size_t j = 0; j < order.size(); ++j) {
        INFO("sub-groups " << i << " and " << j << " in start order");
        const size_t wi = i / 4, wj = j / 4;
        REQUIRE(reads[order[i]].size() == 2);   // states and gradients
        REQUIRE(writes[order[i]].size() == 2);  // states and parameters
        for (int32_t w : writes[order[i]])
          for (int32_t rd : reads[order[j]]) {
            // writes of wave k after every read of wave k; reads of wave k + 1 after every write of wave k
            if (wj == wi) CHECK(depends_on(p, w, rd));
            if (wj == wi + 1) CHECK(depends_on(p, rd, w));
            // ... and no read of a later wave before a write of an earlier one is possible, nor the other way
            if (wj > wi) CHECK_FALSE(depends_on(p, w, rd));
          }
      }
  }
  SECTION("interleaved: a sub-group's reads wait for the writes of the one `depth` before it only") {
    c.optimizer_sub_groups_in_flight = 4;
    c.optimizer_nvme_phases = false;
    PlanResult r = make_plan(g, hw, c, 1);
    require_valid(r, hw);
    const Program& p = r.program;
    auto [order, reads, writes] = optimizer_io(p);
    CHECK_FALSE(r.plan.optimizer_nvme_phases);
    for (size_t i = 4; i < order.size(); ++i)
      for (int32_t rd : reads[order[i]]) {
        for (int32_t w : writes[order[i - 4]]) CHECK(depends_on(p, rd, w));
        for (int32_t w : writes[order[i - 3]]) CHECK_FALSE(depends_on(p, rd, w));
      }
  }
  SECTION("a deeper pipeline holds more host memory at its peak") {
    c.optimizer_sub_groups_in_flight = 3;
    const double three = at(make_plan(g, hw, c, 1).plan.peak_bytes, Tier::Host);
    c.optimizer_sub_groups_in_flight = 8;
    const double eight = at(make_plan(g, hw, c, 1).plan.peak_bytes, Tier::Host);
    CHECK(eight > three);
  }
}

TEST_CASE("reads ahead: the NVMe optimizer's states are read from the last micro-batch's forward on, before their gradients are stored",
          "[planner][optimizer]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(3, 64));
  HwProfile hw = roomy_hw();
  RunConfig c = nvme_optimizer_config();
  c.optimizer_sub_groups_in_flight = 4;
  for (const bool phases : {true, false})
    for (const int64_t mbs : {1, 2})
      for (const bool ahead : {true, false}) {
        INFO("nvme_phases " << phases << ", micro-batches " << mbs << ", read_ahead " << ahead);
        c.optimizer_nvme_phases = phases;
        c.gradient_accumulation = mbs;
        c.optimizer_read_ahead = ahead;
        PlanResult r = make_plan(g, hw, c, 1);
        require_valid(r, hw);
        const Program& p = r.program;
        REQUIRE(r.plan.micro_batches == mbs);
        int32_t last_fwd_begin = -1, last_bwd_begin = -1;  // the last micro-batch's first forward and backward
        for (const auto& t : p.tasks()) {
          if (t.micro_batch != mbs - 1) continue;
          if (t.kind == TaskKind::Forward && last_fwd_begin < 0) last_fwd_begin = t.id;
          if (t.kind == TaskKind::Backward && last_bwd_begin < 0) last_bwd_begin = t.id;
        }
        REQUIRE(last_fwd_begin >= 0);
        REQUIRE(last_bwd_begin > last_fwd_begin);
        auto [order, reads, writes] = optimizer_io(p);
        REQUIRE(int64_t(order.size()) == r.plan.sub_groups);
        int read_in_forward = 0;
        std::map<int32_t, int32_t> made_ready;  // sub-group -> the last gradient store its gradient read waits for
        for (size_t i = 0; i < order.size(); ++i) {
          REQUIRE(reads[order[i]].size() == 2);
          const int32_t states = reads[order[i]][0], grads = reads[order[i]][1];
          REQUIRE(p.tasks()[size_t(states)].data == Data::OptimizerState);
          REQUIRE(p.tasks()[size_t(grads)].data == Data::Grad);
          CHECK(states > last_fwd_begin);  // never during an earlier micro-batch
          read_in_forward += states < last_bwd_begin;
          // The gradient stores the sub-group's gradient read waits for.
          for (int32_t d : p.deps(p.tasks()[size_t(grads)])) {
            const Task& store = p.tasks()[size_t(d)];
            if (store.kind != TaskKind::NvmeWrite || store.data != Data::Grad) continue;
            // Ahead: the states' read is in the Program before the store, so the lane can start it
            // before the gradient exists; without: right after it, and just before the gradients' read.
            if (ahead && i < 4) CHECK(states < d);
            if (!ahead) CHECK(states > d);
            made_ready[order[i]] = std::max(made_ready[order[i]], d);
          }
          if (!ahead) CHECK(grads == states + 1);
        }
        // Ahead: of the sub-groups one store makes ready, every state read comes before any gradient
        // read (a gradient read waiting for its store holds back the lane's later tasks), unless it
        // waits for a task emitted after that gradient read (its place in the pipeline was not free).
        int together = 0, reordered = 0;
        for (size_t i = 0; i < order.size(); ++i)
          for (size_t j = i + 1; j < order.size(); ++j) {
            const int32_t a = order[i], b = order[j];
            if (made_ready[a] != made_ready[b]) continue;
            ++together;
            if (reads[b][0] < reads[a][1]) {
              ++reordered;
              continue;
            }
            bool waits_later = false;
            for (int32_t d : p.deps(p.tasks()[size_t(reads[b][0])])) waits_later |= d > reads[a][1];
            if (ahead) CHECK(waits_later);
          }
        CHECK(together > 0);
        CHECK((reordered > 0) == ahead);
        // Ahead: the first pipeline's worth is read while the last micro-batch runs forward.
        CHECK(read_in_forward == (ahead ? 4 : 0));
      }
  // After backward every gradient is stored, so nothing is read ahead: the same Program either way.
  c.optimizer_timing = OptimizerTiming::AfterBackward;
  c.gradient_accumulation = 1;
  c.optimizer_read_ahead = true;
  const PlanResult with = make_plan(g, hw, c, 1);
  c.optimizer_read_ahead = false;
  const PlanResult without = make_plan(g, hw, c, 1);
  REQUIRE(with.program.tasks().size() == without.program.tasks().size());
  for (size_t i = 0; i < with.program.tasks().size(); ++i) {
    const Task &a = with.program.tasks()[i], &b = without.program.tasks()[i];
    CHECK((a.kind == b.kind && a.data == b.data && a.sub_group == b.sub_group));
  }
}

TEST_CASE("gradient_stores_in_flight trades gradient buffers on the device for backward stalls on slow stores",
          "[planner][backpressure]") {
  // Gradients go to NVMe, whose writes are slow here: with more stores in flight the backward runs
  // further ahead of them, holding more gradient buffers on the device.
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(4, 64));
  HwProfile hw = roomy_hw();
  hw.node.nvme_write_bandwidth = 2e7;
  RunConfig c = parse_run_config("zero_stage: 3\noffload: {params: cpu, gradients: nvme, optimizer: cpu}\n", "c.yaml");
  CHECK(c.gradient_stores_in_flight == 4);
  std::vector<double> step, peak;
  for (int64_t k : {1, 4, 64}) {
    c.gradient_stores_in_flight = k;
    const PlanResult r = make_plan(g, hw, c, 1);
    require_valid(r, hw);
    step.push_back(estimate_step_time(r.program, hw));
    peak.push_back(r.plan.peak_bytes[static_cast<size_t>(Tier::Device)]);
  }
  // The idealized schedule is never slower with more in flight (here the writes bound it either way).
  CHECK(step[0] >= step[1] * (1 - 1e-9));
  CHECK(step[1] >= step[2] * (1 - 1e-9));
  CHECK(peak[0] <= peak[1]);
  CHECK(peak[1] <= peak[2]);
  CHECK(peak[0] < peak[2]);
  CHECK(parse_run_config(run_config_to_yaml(c, "round trip"), "rt.yaml").gradient_stores_in_flight == 64);
  CHECK_THROWS_WITH(parse_run_config("gradient_stores_in_flight: 0\n", "c.yaml"),
                    Contains("c.yaml") && Contains("gradient_stores_in_flight"));
}
