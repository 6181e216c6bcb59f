// The planner: every Program it makes holds docs/DESIGN.md's invariants; data moved per step matches the
// paper's §4 accounting; tiling keeps FLOPs and bytes and lowers the device peak; plans that cannot
// fit are refused naming the tier; the same inputs give byte-identical JSON.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "core/errors.hpp"
#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;
using zinf::test::source;

namespace {

ModelSpec tiny_spec(int64_t layers = 2, int64_t hidden = 64, bool tied = true) {
  ModelSpec s = load_model_spec(source("models/gpt-tiny.yaml"));
  s.layers = layers;
  s.hidden = hidden;
  s.heads = 4;
  s.seq = 32;
  s.vocab = 256;
  s.micro_batch = 2;
  s.tied_embeddings = tied;
  return s;
}

HwProfile roomy_hw() {
  HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  return hw;
}

void require_valid(const PlanResult& r, const HwProfile& hw) {
  auto errors = validate_program(r.program);
  INFO((errors.empty() ? std::string() : errors.front()));
  REQUIRE(errors.empty());
  std::vector<int> ranks{0};
  if (r.program.partitioning() == Partitioning::OwnerBased)
    for (int k = 1; k < r.program.ranks(); ++k) ranks.push_back(k);
  Timeline tl = schedule_ideal(r.program, hw, ranks);
  TimelineCheck chk = check_timeline(r.program, tl);
  INFO((chk.errors.empty() ? std::string() : chk.errors.front()));
  REQUIRE(chk.ok());
}

}  // namespace

TEST_CASE("the shipped configs plan a tiny GPT on 4 ranks", "[planner]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec());
  const HwProfile hw = roomy_hw();
  for (const char* name : {"infinity-nvme", "infinity-cpu", "zero3", "zero-offload", "data-parallel", "activation-offload"}) {
    INFO(name);
    RunConfig c = load_run_config(source(std::string("configs/") + name + ".yaml"));
    for (auto part : {Partitioning::BandwidthCentric, Partitioning::OwnerBased}) {
      c.partitioning = part;
      PlanResult r = make_plan(g, hw, c, 4);
      require_valid(r, hw);
      CHECK(estimate_step_time(r.program, hw) > 0);
    }
  }
}

namespace {

Placement random_placement(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0: return {false, Tier::Device};
    case 1: return {false, Tier::Host};
    case 2: return {false, Tier::Nvme};
    default: return {true, Tier::Device};
  }
}

}  // namespace

TEST_CASE("property: every plan holds the invariants or is refused naming the short tier", "[planner][property]") {
  std::mt19937 rng(20261129);
  const HwProfile base = roomy_hw();
  int planned = 0, refused = 0;
  for (int iter = 0; iter < 300; ++iter) {
    ModelSpec s = tiny_spec(1 + rng() % 3, 32 << (rng() % 3), rng() % 2 == 0);
    s.seq = 8 << (rng() % 3);
    s.micro_batch = 1 + rng() % 2;
    const ModelGraph g = zinf::models::build_gpt(s);
    HwProfile hw = base;
    // Budgets from starving to roomy, around what the model needs.
    const double p = double(g.total_params());
    hw.node.gpu.memory = p * (1.0 + double(rng() % 40));
    hw.node.host_memory = p * hw.node.gpus * (2.0 + double(rng() % 40));
    hw.node.nvme_capacity = p * hw.node.gpus * (2.0 + double(rng() % 40));
    RunConfig c;
    c.zero_stage = rng() % 5 == 0 ? int(rng() % 3) : 3;
    c.partitioning = rng() % 3 == 0 ? Partitioning::OwnerBased : Partitioning::BandwidthCentric;
    c.params = random_placement(rng);
    c.gradients = rng() % 2 ? c.params : random_placement(rng);
    c.optimizer = random_placement(rng);
    c.checkpoints = random_placement(rng);
    c.checkpoint_interval = rng() % 3;
    c.tiling_factor = int64_t(rng() % 4 == 0 ? 0 : 1 << (rng() % 3));
    c.nvme_prefetch_distance = rng() % 5;
    c.h2d_prefetch_distance = rng() % 4;
    c.allgather_prefetch_distance = rng() % 3;
    c.max_live_bytes = p * double(rng() % 4);
    c.reuse_distance_bytes = p * double(rng() % 3) / 2.0;
    c.sub_group_size = 1 + int64_t(rng() % 20000);
    c.optimizer_timing = rng() % 2 ? OptimizerTiming::OverlapBackward : OptimizerTiming::AfterBackward;
    c.grad_clip = rng() % 2 ? 1.0 : 0.0;
    c.gradient_accumulation = 1 + rng() % 2;
    const int ranks = 1 + int(rng() % 9);
    INFO("iteration " << iter << " ranks " << ranks << " stage " << c.zero_stage);
    try {
      PlanResult r = make_plan(g, hw, c, ranks);
      require_valid(r, hw);
      // The budget holds at other rates too (an executor is never exactly nominal): every rate of
      // the machine scaled by a random factor in [1/10, 10].
      HwProfile other = hw;
      auto scale = [&] { return std::pow(10.0, double(int(rng() % 21) - 10) / 10.0); };
      for (double* rate : {&other.node.pcie_bandwidth, &other.node.pcie_switch_uplink, &other.node.nvme_read_bandwidth,
                           &other.node.nvme_write_bandwidth, &other.node.nvlink_bandwidth, &other.node.gpu.peak_flops,
                           &other.node.gpu.memory_bandwidth, &other.node.cpu_adam_rate})
        *rate *= scale();
      require_valid(r, other);
      ++planned;
    } catch (const PlanError& e) {
      const std::string m = e.what();
      INFO(m);
      const bool names_tier = m.find("device is short by") != std::string::npos ||
                              m.find("host is short by") != std::string::npos ||
                              m.find("nvme is short by") != std::string::npos ||
                              m.find("need ZeRO stage") != std::string::npos;
      CHECK(names_tier);
      ++refused;
    }
  }
  CHECK(planned > 100);
  CHECK(refused > 10);
}

namespace {

struct Moved {
  double param_read = 0, grad_store = 0, state_read = 0, state_write = 0, grad_read_optim = 0, param_write_optim = 0;
  double ckpt_save = 0, ckpt_load = 0;
};

// Bytes a rank moves into and out of the NVMe and host tiers, by what they are.
Moved moved_by(const Program& p, int rank) {
  Moved m;
  for (const auto& t0 : p.tasks()) {
    const Task t = p.task_for_rank(t0.id, rank);
    if (t.kind == TaskKind::NvmeRead && t.data == Data::Param) m.param_read += t.bytes;
    if (t.kind == TaskKind::NvmeWrite && t.data == Data::Grad) m.grad_store += t.bytes;
    if (t.kind == TaskKind::NvmeRead && t.data == Data::OptimizerState) m.state_read += t.bytes;
    if (t.kind == TaskKind::NvmeWrite && t.data == Data::OptimizerState) m.state_write += t.bytes;
    if (t.kind == TaskKind::NvmeRead && t.data == Data::Grad && t.phase == Phase::Optimizer) m.grad_read_optim += t.bytes;
    if (t.kind == TaskKind::NvmeWrite && t.data == Data::Param && t.phase == Phase::Optimizer) m.param_write_optim += t.bytes;
    if (t.kind == TaskKind::CopyD2H && t.data == Data::Checkpoint) m.ckpt_save += t.bytes;
    if (t.kind == TaskKind::CopyH2D && t.data == Data::Checkpoint) m.ckpt_load += t.bytes;
  }
  return m;
}

}  // namespace

TEST_CASE("data moved per step matches the paper's accounting", "[planner][accounting]") {
  // Untied embeddings so every parameter is used once per pass; no reuse, so every use is a fetch.
  const ModelSpec s = tiny_spec(3, 64, false);
  const ModelGraph g = zinf::models::build_gpt(s);
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.reuse_distance_bytes = 0;
  c.sub_group_size = 5000;
  const int R = 4;
  for (auto part : {Partitioning::BandwidthCentric, Partitioning::OwnerBased}) {
    c.partitioning = part;
    PlanResult r = make_plan(g, hw, c, R);
    require_valid(r, hw);
    const Program& p = r.program;
    // Elements each rank holds: padded shards, or the units it owns.
    std::vector<double> block(R, 0), outside(R, 0), all(R, 0);
    for (const auto& u : p.units()) {
      const bool in_block = g.params[size_t(u.group)].name.rfind("h.", 0) == 0;
      for (int k = 0; k < R; ++k) {
        double n = part == Partitioning::OwnerBased ? (u.owner == k ? double(u.numel) : 0.0) : double(u.shard_numel);
        (in_block ? block : outside)[size_t(k)] += n;
        all[size_t(k)] += n;
      }
    }
    double total_all = 0;
    for (int k = 0; k < R; ++k) {
      INFO("rank " << k);
      const Moved m = moved_by(p, k);
      // Parameters: forward, recompute and backward for blocks; forward and backward outside them.
      CHECK(m.param_read == Approx(2.0 * (3.0 * block[size_t(k)] + 2.0 * outside[size_t(k)])));
      // Gradients stored once, 2 bytes each.
      CHECK(m.grad_store == Approx(2.0 * all[size_t(k)]));
      // Optimizer: each of the 16 bytes of model state per parameter moves once: fp32 master, m and
      // v (12 B) read and written, the bf16 gradient (2 B) read, the bf16 parameter (2 B) written.
      // Sub-groups sweep the whole shard space, whose shards start at aligned offsets: the padding
      // after each shard (less than kShardAlignment elements) moves with it.
      const double space = double(p.shard_space(k));
      CHECK(space >= all[size_t(k)]);
      CHECK(space < all[size_t(k)] + double(p.units().size() * zinf::core::kShardAlignment));
      CHECK(int64_t(space) % zinf::core::kShardAlignment == 0);
      CHECK(m.state_read == Approx(12.0 * space));
      CHECK(m.state_write == Approx(12.0 * space));
      CHECK(m.grad_read_optim == Approx(2.0 * space));
      CHECK(m.param_write_optim == Approx(2.0 * space));
      // Activation checkpoints: saved once, loaded once; 2·bsz·seq·hd·nl/ci bytes.
      const double ckpt = 2.0 * double(s.micro_batch * s.seq * s.hidden) * double(s.layers);
      CHECK(m.ckpt_save == Approx(ckpt));
      CHECK(m.ckpt_load == Approx(ckpt));
      total_all += all[size_t(k)];
      if (k == 0 && part == Partitioning::BandwidthCentric) {  // the Plan reports rank 0's figures
        CHECK(r.plan.param_bytes_fetched == Approx(m.param_read));
        CHECK(r.plan.grad_bytes_stored == Approx(m.grad_store));
        CHECK(r.plan.optimizer_bytes_read == Approx(m.state_read));
        CHECK(r.plan.checkpoint_bytes_saved == Approx(m.ckpt_save));
        CHECK(r.plan.checkpoint_bytes_loaded == Approx(m.ckpt_load));
      }
    }
    if (part == Partitioning::OwnerBased) CHECK(total_all == Approx(double(g.total_params())));
    else CHECK(total_all >= double(g.total_params()));
  }
}

TEST_CASE("tiling keeps FLOPs and parameter bytes and lowers the device peak by about the factor", "[planner][tiling]") {
  // A wide, short model whose MLP weights dominate the device: tiny vocabulary and sequence.
  ModelSpec s = tiny_spec(2, 512, false);
  s.vocab = 64;
  s.seq = 4;
  s.micro_batch = 1;
  const ModelGraph g = zinf::models::build_gpt(s);
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.max_live_bytes = 1;  // no prefetch beyond the unit in use, so the largest unit sets the peak
  c.reuse_distance_bytes = 0;
  double flops1 = 0, params1 = 0, peak1 = 0;
  for (int64_t t : {1, 2, 4, 8}) {
    c.tiling_factor = t;
    PlanResult r = make_plan(g, hw, c, 2);
    require_valid(r, hw);
    double flops = 0, params = 0;
    for (const auto& task : r.program.tasks())
      if (is_compute(task.kind)) flops += task.flops;
    for (const auto& u : r.program.units()) params += double(u.numel);
    const double peak = at(r.plan.peak_bytes, Tier::Device);
    if (t == 1) {
      flops1 = flops;
      params1 = params;
      peak1 = peak;
      continue;
    }
    INFO("tiling " << t << " peak " << peak << " untiled " << peak1);
    CHECK(flops == Approx(flops1).epsilon(1e-12));
    CHECK(params == params1);
    CHECK(params == double(g.total_params()));
    CHECK(peak < peak1 / double(t) * 1.6);
    CHECK(peak > peak1 / double(t) * 0.5);
  }
}

TEST_CASE("planning is deterministic: byte-identical JSON", "[planner][determinism]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.tiling_factor = 0;
  c.optimizer_timing = OptimizerTiming::OverlapBackward;
  c.gradient_accumulation = 2;
  c.sub_group_size = 3000;
  for (auto part : {Partitioning::BandwidthCentric, Partitioning::OwnerBased}) {
    c.partitioning = part;
    std::ostringstream a, b;
    make_plan(g, hw, c, 8).program.write_json(a);
    make_plan(g, hw, c, 8).program.write_json(b);
    CHECK(a.str().size() > 1000);
    CHECK(a.str() == b.str());
    CHECK_NOTHROW(nlohmann::json::parse(a.str()));
  }
}

TEST_CASE("a plan that cannot fit is refused naming the tier and the shortfall", "[planner][errors]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2, 64));
  HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/zero3.yaml"));
  hw.node.gpu.memory = 1e5;  // 100 kB of device memory
  REQUIRE_THROWS_AS(make_plan(g, hw, c, 2), PlanError);
  REQUIRE_THROWS_WITH(make_plan(g, hw, c, 2), Contains("device is short by") && Contains("per rank"));
  hw = roomy_hw();
  hw.node.host_memory = 1e5;
  c = load_run_config(source("configs/infinity-cpu.yaml"));
  REQUIRE_THROWS_WITH(make_plan(g, hw, c, 2), Contains("host is short by"));
  hw = roomy_hw();
  hw.node.nvme_capacity = 1e5;
  c = load_run_config(source("configs/infinity-nvme.yaml"));
  REQUIRE_THROWS_WITH(make_plan(g, hw, c, 2), Contains("nvme is short by"));
}

TEST_CASE("auto placement picks the fastest tier that fits and says why", "[planner][placement]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2, 64));
  HwProfile hw = roomy_hw();
  RunConfig c;
  c.params = c.gradients = c.optimizer = c.checkpoints = {true, Tier::Device};
  PlanResult roomy = make_plan(g, hw, c, 2);
  CHECK(roomy.plan.params == Tier::Device);
  CHECK(roomy.plan.optimizer == Tier::Device);
  for (const auto& d : roomy.plan.placements) {
    CHECK(d.automatic);
    CHECK_THAT(d.reason, Contains("device: needs") && Contains("fits"));
  }
  // A device too small for the optimizer states: they move to the host; params stay.
  const double p = double(g.total_params());
  hw.node.gpu.memory = (2.0 + 2.0) * p / 2 / (1 - hw.reserve.gpu) + 3e6;
  PlanResult tight = make_plan(g, hw, c, 2);
  require_valid(tight, hw);
  CHECK(tight.plan.optimizer != Tier::Device);
  bool said = false;
  for (const auto& d : tight.plan.placements)
    if (d.state == "optimizer") said = d.reason.find("too small") != std::string::npos;
  CHECK(said);
}

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

TEST_CASE("one program serves every rank", "[planner][symmetry]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2, 64));
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  SECTION("bandwidth-centric: every rank moves the same bytes") {
    PlanResult r = make_plan(g, hw, c, 512);
    const auto r0 = r.program.for_rank(0), r511 = r.program.for_rank(511);
    REQUIRE(r0.size() == r.program.tasks().size());
    for (size_t i = 0; i < r0.size(); ++i) CHECK(r0[i].bytes == r511[i].bytes);
    for (const auto& u : r.program.units()) CHECK(u.shard_numel * 512 >= u.numel);
  }
  SECTION("owner-based: each unit is read by its owner only, and collectives name the root") {
    c.partitioning = Partitioning::OwnerBased;
    PlanResult r = make_plan(g, hw, c, 8);
    require_valid(r, hw);
    double total = 0;
    for (int k = 0; k < 8; ++k) total += moved_by(r.program, k).param_read;
    double expected = 0;
    for (const auto& t : r.program.tasks())
      if (t.kind == TaskKind::NvmeRead && t.data == Data::Param) expected += 2.0 * double(r.program.units()[size_t(t.unit)].numel);
    CHECK(total == Approx(expected));
    for (const auto& t : r.program.tasks())
      if (t.kind == TaskKind::Broadcast || t.kind == TaskKind::Reduce) CHECK(t.root == r.program.units()[size_t(t.unit)].owner);
  }
}

TEST_CASE("shards and sub-groups start at aligned offsets and never overlap", "[planner][alignment]") {
  const ModelSpec s = tiny_spec(2, 64, true);
  const ModelGraph g = zinf::models::build_gpt(s);
  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.sub_group_size = 3000;  // not a multiple of the alignment: rounded up
  for (auto part : {Partitioning::BandwidthCentric, Partitioning::OwnerBased}) {
    c.partitioning = part;
    PlanResult r = make_plan(g, hw, c, 3);
    require_valid(r, hw);
    const Program& p = r.program;
    std::map<int32_t, int64_t> end;  // per owner: where the previous shard ended
    for (const auto& u : p.units()) {
      const bool owned = part == Partitioning::OwnerBased;
      const int64_t off = owned ? u.owner_offset : u.shard_offset;
      const int64_t n = owned ? u.numel : u.shard_numel;
      CHECK(off % zinf::core::kShardAlignment == 0);
      CHECK(off >= end[owned ? u.owner : -1]);
      end[owned ? u.owner : -1] = off + n;
      CHECK(off + n <= p.shard_space(owned ? u.owner : 0));
    }
    for (const auto& sg : p.sub_groups()) {
      CHECK(sg.offset % zinf::core::kShardAlignment == 0);
      CHECK(sg.count % zinf::core::kShardAlignment == 0);
      CHECK(sg.count <= zinf::core::shard_aligned(3000));
    }
  }
}

TEST_CASE("synchronous checkpoint copies hold the compute stream; overlapped ones do not", "[planner][checkpoint]") {
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

TEST_CASE("tensor parallelism: the graph is one rank's share, the Program all-reduces where the split ends", "[planner][tensor-parallel]") {
  ModelSpec s = tiny_spec(2, 64);
  const ModelGraph g1 = zinf::models::build_gpt(s), g2 = zinf::models::build_gpt(s, 2);
  auto op = [](const ModelGraph& g, const std::string& name) -> const Operator& {
    for (const auto& o : g.ops)
      if (o.name == name) return o;
    FAIL("no operator " << name);
    return g.ops.front();
  };
  for (const auto& o : g1.ops) CHECK((o.tp_fwd_allreduce_bytes == 0 && o.tp_bwd_allreduce_bytes == 0));
  CHECK(op(g2, "h.0.attn.c_attn").n == 3 * 64 / 2);      // column-parallel: its share of the outputs
  CHECK(op(g2, "h.0.mlp.c_proj").k == 4 * 64 / 2);       // row-parallel: its share of the inputs
  CHECK(op(g2, "h.0.attn.core").fwd_flops == op(g1, "h.0.attn.core").fwd_flops / 2);
  CHECK(op(g2, "h.0.ln_1").fwd_bytes == op(g1, "h.0.ln_1").fwd_bytes);  // layernorms whole
  const double hidden_act = 2.0 * double(g2.tokens) * 64;
  CHECK(op(g2, "h.0.attn.c_proj").tp_fwd_allreduce_bytes == hidden_act);
  CHECK(op(g2, "h.0.mlp.c_proj").tp_fwd_allreduce_bytes == hidden_act);
  CHECK(op(g2, "h.0.attn.c_attn").tp_bwd_allreduce_bytes == hidden_act);
  CHECK(op(g2, "h.0.mlp.c_fc").tp_bwd_allreduce_bytes == hidden_act);
  // Linear weights split in two; about half the parameters per rank.
  CHECK(g2.total_params() < g1.total_params() * 0.6);
  CHECK_THROWS_WITH(zinf::models::build_gpt(s, 3), Contains("heads"));

  const HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/zero3.yaml"));
  c.checkpoints = {false, Tier::Host};
  c.checkpoint_copies_synchronous = true;
  c.checkpoints_partitioned = true;
  c.tensor_parallel = 2;
  PlanResult r = make_plan(g2, hw, c, 4);
  require_valid(r, hw);
  const auto& tasks = r.program.tasks();
  int allreduces = 0, gathers = 0;
  for (const auto& t : tasks) {
    if (t.kind == TaskKind::AllReduce && t.data == Data::Activation) {
      ++allreduces;
      CHECK(t.participants == 2);
      CHECK(t.lane == Lane::Compute);
      // The compute task it follows is its one dependency, and the next compute task waits for it.
      const auto deps = r.program.deps(t);
      REQUIRE(deps.size() == 1);
      CHECK(tasks[static_cast<size_t>(deps.front())].op == t.op);
      bool waited = false;
      for (const auto& u : tasks)
        if (u.id > t.id && u.lane == Lane::Compute) {
          const auto ud = r.program.deps(u);
          waited = std::find(ud.begin(), ud.end(), t.id) != ud.end();
          break;
        }
      CHECK(waited);
    }
    if (t.kind == TaskKind::AllGather && t.data == Data::Checkpoint) {
      ++gathers;
      CHECK(t.participants == 2);
    }
    if (t.data == Data::Checkpoint && (t.kind == TaskKind::CopyD2H || t.kind == TaskKind::CopyH2D))
      CHECK(t.bytes == Approx(2.0 * double(g2.tokens) * 64 / 2));  // each rank moves half of a checkpoint
  }
  // Per block: two in forward, two in recompute, two in backward; plus embedding, loss, LM head.
  CHECK(allreduces == 2 * 6 + 3);
  CHECK(gathers > 0);
  // ZeRO partitions each rank's share over the 2 data-parallel ranks.
  for (const auto& u : r.program.units()) CHECK(u.shard_numel == (u.numel + 1) / 2);

  c.tensor_parallel = 1;
  CHECK_THROWS_WITH(make_plan(g2, hw, c, 4), Contains("tensor_parallel"));
  c.tensor_parallel = 2;
  CHECK_THROWS_WITH(make_plan(g2, hw, c, 3), Contains("does not divide"));
  c.partitioning = Partitioning::OwnerBased;
  CHECK_THROWS_WITH(make_plan(g2, hw, c, 4), Contains("bandwidth-centric"));

  CHECK(parse_run_config("tensor_parallel: 4\n", "c.yaml").tensor_parallel == 4);
  CHECK(parse_run_config("tensor_model_parallel_size: 2\n", "c.yaml").tensor_parallel == 2);
  CHECK_THROWS_WITH(parse_run_config("tensor_parallel: 2\ntensor_model_parallel_size: 2\n", "c.yaml"), Contains("not both"));
  std::vector<std::string> w;
  CHECK(parse_deepspeed_config(R"({"tensor_parallel": {"autotp_size": 4}, "activation_checkpointing": {"partition_activations": true}})",
                               "ds.json", w).tensor_parallel == 4);
  CHECK(w.empty());
}

TEST_CASE("auto finds a fitting combination whenever an exhaustive search of the same choices finds one",
          "[planner][placement][auto]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2, 64));
  RunConfig autos;
  autos.params = autos.gradients = autos.optimizer = autos.checkpoints = {true, Tier::Device};
  autos.checkpoint_interval = 1;
  autos.tiling_factor = 0;
  const std::vector<Tier> tiers{Tier::Device, Tier::Host, Tier::Nvme};
  int grids = 0, fitting = 0;
  // Budgets around what the model needs (a few MB of states and activations): from everything on
  // the device to almost nothing anywhere.
  for (double device : {2e5, 6e5, 1.5e6, 4e6, 1e7})
    for (double host : {1e5, 3e6, 1e8})
      for (double nvme : {1e5, 1e9}) {
        HwProfile hw = roomy_hw();
        hw.node.gpu.memory = device;
        hw.node.host_memory = host;
        hw.node.nvme_capacity = nvme;
        hw.reserve = {};
        std::string found;
        for (Tier p : tiers)
          for (Tier o : tiers)
            for (Tier ck : tiers)
              for (int64_t t : {1, 2, 4, 8}) {
                if (!found.empty()) break;
                RunConfig c = autos;
                c.params = c.gradients = {false, p};
                c.optimizer = {false, o};
                c.checkpoints = {false, ck};
                c.tiling_factor = t;
                try {
                  make_plan(g, hw, c, 2);
                  found = fmt::format("params {}, optimizer {}, checkpoints {}, tiling {}", to_string(p), to_string(o),
                                      to_string(ck), t);
                } catch (const PlanError&) {
                }
              }
        ++grids;
        INFO("device " << device << ", host " << host << ", nvme " << nvme << "; exhaustive search found: " << found);
        if (found.empty()) {
          CHECK_THROWS_AS(make_plan(g, hw, autos, 2), PlanError);
          continue;
        }
        ++fitting;
        PlanResult r = [&] {
          try {
            return make_plan(g, hw, autos, 2);
          } catch (const PlanError& e) {
            FAIL("auto refused what the exhaustive search planned: " << e.what());
            throw;
          }
        }();
        require_valid(r, hw);
        for (const auto& d : r.plan.placements) CHECK(d.automatic);
      }
  CHECK(grids == 30);
  CHECK(fitting > 3);  // the grid has both fitting and refused points
  CHECK(fitting < grids);
}

TEST_CASE("the planner admits ZeRO-Infinity's 20T run: 512 V100, tensor parallel 8, states on NVMe", "[planner][tensor-parallel][paper]") {
  // ZeRO-Infinity Table 1: 20T (88K x 205), batch 1.25 per GPU x 8 = micro-batch 10 per group, seq
  // 1024, params and optimizer on NVMe, partitioned checkpoints in host memory, on 32 DGX-2. A rank
  // holds its share of each block's activations; counting them whole (16 hd + 2 heads seq per
  // token, 29.5 GB here) refused it by 8 GB whatever the tiling.
  ModelSpec s;
  s.name = "gpt-20t";
  s.layers = 205;
  s.hidden = 90112;
  s.heads = 704;
  s.seq = 1024;
  s.vocab = 51200;
  s.micro_batch = 10;
  const HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  RunConfig c = parse_run_config(
      "zero_stage: 3\ntensor_parallel: 8\ntiling_factor: auto\noffload: {params: nvme, optimizer: nvme}\n"
      "activation_checkpoint: {interval: 1, tier: host, copies: synchronous, partitioned: true}\n",
      "20t.yaml");
  const PlanResult r = make_plan(zinf::models::build_gpt(s, 8), hw, c, 512);
  CHECK(r.program.tensor_parallel() == 8);
  const double device_peak = r.plan.peak_bytes[static_cast<size_t>(Tier::Device)];
  CHECK(device_peak <= r.plan.budget[static_cast<size_t>(Tier::Device)]);
  // The memory model counts the same share: its device total is within a fifth of the schedule's peak.
  MemoryModelInput in;
  in.model = s;
  in.hw = hw;
  in.nodes = 32;
  in.config = c;
  in.config.tiling_factor = r.plan.tiling_factor;
  const MemoryReport m = memory_requirement(in);
  CHECK(m.fits);
  CHECK(m.total.device == Approx(device_peak).epsilon(0.2));
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

}  // namespace

TEST_CASE("the NVMe optimizer keeps a host budget's share of sub-groups in flight, in waves of reads then writes",
          "[planner][optimizer]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(3, 64));
  HwProfile hw = roomy_hw();
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
  c.gradients = {false, Tier::Nvme};
  c.sub_group_size = 2000;
  c.optimizer_timing = OptimizerTiming::OverlapBackward;
  c.grad_clip = 1.0;
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
    // Sub-groups in the order they start (their first optimizer-phase task), their reads and writes.
    std::vector<int32_t> order;
    std::map<int32_t, std::vector<int32_t>> reads, writes;
    for (const auto& t : p.tasks()) {
      if (t.phase != Phase::Optimizer || t.sub_group < 0) continue;
      if (std::find(order.begin(), order.end(), t.sub_group) == order.end()) order.push_back(t.sub_group);
      if (t.kind == TaskKind::NvmeRead) reads[t.sub_group].push_back(t.id);
      if (t.kind == TaskKind::NvmeWrite) writes[t.sub_group].push_back(t.id);
    }
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
    std::vector<int32_t> order;
    std::map<int32_t, std::vector<int32_t>> reads, writes;
    for (const auto& t : p.tasks()) {
      if (t.phase != Phase::Optimizer || t.sub_group < 0) continue;
      if (std::find(order.begin(), order.end(), t.sub_group) == order.end()) order.push_back(t.sub_group);
      if (t.kind == TaskKind::NvmeRead) reads[t.sub_group].push_back(t.id);
      if (t.kind == TaskKind::NvmeWrite) writes[t.sub_group].push_back(t.id);
    }
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
