// The planner: every Program it makes holds docs/DESIGN.md's invariants; data moved per step matches the
// paper's §4 accounting; tiling keeps FLOPs and bytes and lowers the device peak; plans that cannot
// fit are refused naming the tier; the same inputs give byte-identical JSON; auto choices, alignment,
// tensor parallelism. The order and waits of the tasks it emits: planner_schedule_test.cpp.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <sstream>

#include "core/errors.hpp"
#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "planner_test_util.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using namespace zinf::test;  // tiny_spec, roomy_hw, require_valid, source
using Catch::Matchers::Contains;

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

TEST_CASE("what would explode is refused up front with the figure and the key", "[planner][errors]") {
  // gpt-1t at tiling 65536 and 1024 micro-batches would be billions of tasks per rank; sub-groups of
  // one element would be one per element. Both are refused before anything is built (fast, small).
  const ModelSpec big = load_model_spec(source("models/gpt-1t.yaml"));
  const ModelGraph g = zinf::models::build_gpt(big);
  HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  RunConfig c = load_run_config(source("experiments/paper/configs/infinity-512.yaml"));
  c.micro_batch.reset();
  c.tiling_factor = 65536;
  c.gradient_accumulation = 1024;
  REQUIRE_THROWS_WITH(make_plan(g, hw, c, 512), Contains("tasks per rank, above zinf's bound") && Contains("tiling_factor") &&
                                                    Contains("gradient_accumulation_steps"));
  c.tiling_factor = 64;
  c.gradient_accumulation = 1;
  c.sub_group_size = 1;
  c.sub_groups_whole_units = false;
  REQUIRE_THROWS_WITH(make_plan(g, hw, c, 512), Contains("sub-groups, above zinf's bound") && Contains("raise sub_group_size"));
  // Within the bounds the same model plans.
  c.sub_group_size = 100'000'000;
  CHECK_NOTHROW(make_plan(g, hw, c, 512));
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
  CHECK(parse_deepspeed_config(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 4}, "activation_checkpointing": {"partition_activations": true}})",
                               "ds.json", w).tensor_parallel == 4);
  for (const auto& line : w) CHECK_THAT(line, !Contains("tensor_parallel") && !Contains("partition_activations"));
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

TEST_CASE("auto's search skips only combinations the planner would refuse: it picks the first accepted, fastest first",
          "[planner][placement][auto]") {
  // search_auto_tiers does not plan a combination that puts on a tier all that a refused one put
  // there. Planned one by one in the search's order (fewest states off the device, then host
  // before NVMe), the first combination the planner accepts must be the one auto picks.
  const ModelGraph g = zinf::models::build_gpt(tiny_spec(2, 64));
  RunConfig autos;
  autos.params = autos.gradients = autos.optimizer = autos.checkpoints = {true, Tier::Device};
  autos.checkpoint_interval = 1;
  autos.tiling_factor = 0;
  const std::vector<Tier> tiers{Tier::Device, Tier::Host, Tier::Nvme};
  std::vector<std::array<Tier, 4>> order;  // params, gradients, checkpoints, optimizer
  for (Tier p : tiers)
    for (Tier gr : tiers)
      for (Tier ck : tiers)
        for (Tier o : tiers) order.push_back({p, gr, ck, o});
  const auto cost = [](const std::array<Tier, 4>& c) {
    int off = 0, rank = 0;
    for (Tier t : c) {
      off += t != Tier::Device;
      rank += t == Tier::Nvme ? 2 : t == Tier::Host ? 1 : 0;
    }
    return std::pair{off, rank};
  };
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) { return cost(a) < cost(b); });
  int searched = 0;
  for (double device : {6e5, 1.5e6, 4e6})
    for (double host : {1e5, 3e6, 1e8})
      for (double nvme : {1e5, 1e9}) {
        HwProfile hw = roomy_hw();
        hw.node.gpu.memory = device;
        hw.node.host_memory = host;
        hw.node.nvme_capacity = nvme;
        hw.reserve = {};
        PlanResult r;
        try {
          r = make_plan(g, hw, autos, 2);
        } catch (const PlanError&) {
          continue;  // refused: the exhaustive test above checks no combination fits
        }
        if (r.plan.placements.empty() || r.plan.placements[0].reason.find("greedy choice was refused") == std::string::npos)
          continue;  // the greedy choice decided; no search ran
        ++searched;
        std::string first;
        for (const auto& c : order) {
          RunConfig fixed = autos;
          fixed.params = {false, c[0]};
          fixed.gradients = {false, c[1]};
          fixed.checkpoints = {false, c[2]};
          fixed.optimizer = {false, c[3]};
          try {
            make_plan(g, hw, fixed, 2);
            first = fmt::format("{} {} {} {}", to_string(c[0]), to_string(c[1]), to_string(c[2]), to_string(c[3]));
            break;
          } catch (const PlanError&) {
          }
        }
        INFO("device " << device << ", host " << host << ", nvme " << nvme << "; " << r.plan.placements[0].reason);
        CHECK(fmt::format("{} {} {} {}", to_string(r.plan.params), to_string(r.plan.gradients), to_string(r.plan.checkpoints),
                          to_string(r.plan.optimizer)) == first);
      }
  CHECK(searched > 0);
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
