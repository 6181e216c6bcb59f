// Lifetime-aware activation offload (core/activation_pass.hpp and the planner's use of it): each
// block's activations get a lifetime from the graph; the pass keeps what fits, frees the longest
// idle windows first and recomputes where no path can hide a transfer; the Program carries the
// choices as ordinary transfer tasks hung off the right compute tasks; a GDS profile moves NVMe
// traffic straight to the device; bad keys are named.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "core/activation_pass.hpp"
#include "core/errors.hpp"
#include "core/kernel_activations.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;
using zinf::test::source;

namespace {

ModelSpec spec(int64_t layers = 6) {
  ModelSpec s = load_model_spec(source("models/gpt-tiny.yaml"));
  s.layers = layers;
  s.hidden = 256;
  s.heads = 4;
  s.seq = 128;
  s.vocab = 256;
  s.micro_batch = 4;
  return s;
}

// Operators grouped as the planner cuts runs with one block per run.
std::vector<std::vector<int32_t>> block_runs(const ModelGraph& g) {
  std::vector<std::vector<int32_t>> runs;
  int prev = -2;
  for (const auto& o : g.ops) {
    if (runs.empty() || o.block != prev) runs.emplace_back();
    runs.back().push_back(o.id);
    prev = o.block;
  }
  return runs;
}

RunConfig config(const std::string& extra, const std::string& offload = "offload: {params: cpu, optimizer: cpu}\n") {
  return parse_run_config("zero_stage: 3\n" + offload + extra, "test-config.yaml");
}

// A DGX-2 profile whose device budget lies halfway between keeping every block's activations and
// offloading them all (PCIe at `pcie` B/s, no switch uplink limit), and the keep-everything config.
struct BetweenBudget {
  HwProfile hw;
  RunConfig keep;
};

BetweenBudget budget_between_keep_and_offload(const ModelGraph& g, double pcie) {
  BetweenBudget b{load_hwprofile(source("hwprofiles/dgx2-v100.yaml")), config("activation_checkpoint: {interval: 0}\n", "")};
  b.hw.node.pcie_bandwidth = pcie;
  b.hw.node.pcie_switch_uplink = 0;
  const RunConfig offload = config("activation_offload: {policy: offload_all, tier: host}\n", "");
  const double keep_peak = at(make_plan(g, b.hw, b.keep, 1).plan.peak_bytes, Tier::Device);
  const double off_peak = at(make_plan(g, b.hw, offload, 1).plan.peak_bytes, Tier::Device);
  REQUIRE(off_peak < keep_peak);
  b.hw.node.gpu.memory = 0.5 * (keep_peak + off_peak) / (1.0 - b.hw.reserve.gpu);
  return b;
}

void require_valid(const PlanResult& r, const HwProfile& hw) {
  auto errors = validate_program(r.program);
  INFO((errors.empty() ? std::string() : errors.front()));
  REQUIRE(errors.empty());
  TimelineCheck chk = check_timeline(r.program, schedule_ideal(r.program, hw));
  INFO((chk.errors.empty() ? std::string() : chk.errors.front()));
  REQUIRE(chk.ok());
}

ActivationLifetime lifetime(int32_t seg, double bytes, double idle, double fwd) {
  ActivationLifetime l;
  l.segment = l.run = seg;
  l.first_block = l.last_block = seg;
  l.bytes = bytes;
  l.idle_seconds = idle;
  l.forward_seconds = fwd;
  l.later_backward_seconds = {idle / 2};  // one run after it, whose backward is half the window
  return l;
}

}  // namespace

TEST_CASE("activation lifetimes: one segment per block, produced in order, idle windows shrink toward the head") {
  const ModelGraph g = zinf::models::build_gpt(spec());
  const HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  const auto ls = activation_lifetimes(g, hw.node.gpu, block_runs(g));
  REQUIRE(ls.size() == 6);
  const double per_block = double(g.tokens) * (16.0 * 256 + 2.0 * 4 * 128);
  for (size_t i = 0; i < ls.size(); ++i) {
    CHECK(ls[i].first_block == int(i));
    CHECK(ls[i].bytes == per_block);
    CHECK(ls[i].produced <= ls[i].last_forward_use);
    CHECK(ls[i].last_forward_use < ls[i].first_backward_use);
    CHECK(ls[i].forward_seconds > 0);
    if (i > 0) {
      CHECK(ls[i].produced > ls[i - 1].last_forward_use);
      CHECK(ls[i].first_backward_use < ls[i - 1].first_backward_use);  // backward runs in reverse
      CHECK(ls[i].idle_seconds < ls[i - 1].idle_seconds);
    }
  }
  CHECK(ls.back().idle_seconds > 0);  // the head's forward and backward still come between
}

TEST_CASE("the activation pass keeps what fits and frees the longest idle windows first") {
  std::vector<ActivationLifetime> ls{lifetime(0, 100, 10.0, 1.0), lifetime(1, 100, 6.0, 1.0), lifetime(2, 100, 2.0, 1.0),
                                     lifetime(3, 100, 0.1, 1.0)};
  ActivationPassInput in;
  in.host_seconds_per_byte = 0.01;  // 1 s each way per segment
  in.pcie_free_seconds = 100;
  in.host_bytes_free = 1e9;
  in.nvme_bytes_free = 1e9;
  in.device_bytes_for_activations = 400;
  for (const auto& c : choose_activation_actions(ls, in)) CHECK(c.action == ActivationAction::Keep);

  in.device_bytes_for_activations = 200;  // two must go: the two longest windows hide their transfers
  auto cs = choose_activation_actions(ls, in);
  CHECK(cs[0].action == ActivationAction::Offload);
  CHECK(cs[0].tier == Tier::Host);
  CHECK(cs[0].predicted_cost == 0);
  CHECK(cs[1].action == ActivationAction::Offload);
  CHECK(cs[2].action == ActivationAction::Keep);
  CHECK(cs[3].action == ActivationAction::Keep);
  CHECK_THAT(cs[0].reason, Contains("idle window"));

  in.device_bytes_for_activations = 0;  // all must go: a 2 s round trip cannot hide in a 0.1 s window
  cs = choose_activation_actions(ls, in);
  CHECK(cs[2].action == ActivationAction::Offload);  // 2 s window: exactly hidden
  CHECK(cs[3].action == ActivationAction::Recompute);
  CHECK_THAT(cs[3].reason, Contains("recompute"));

  // The load goes as many runs ahead as its transfer needs (at least min_prefetch_runs).
  for (const auto& c : cs) CHECK((c.action != ActivationAction::Offload || c.prefetch_runs == 1));
  std::vector<ActivationLifetime> deep{lifetime(0, 100, 10.0, 1.0)};
  deep[0].later_backward_seconds = {0.3, 0.3, 0.3, 0.3, 0.3, 0.3};
  in.device_bytes_for_activations = 0;
  CHECK(choose_activation_actions(deep, in)[0].prefetch_runs == 4);  // 1 s: four runs of 0.3 s
  in.min_prefetch_runs = 5;
  CHECK(choose_activation_actions(deep, in)[0].prefetch_runs == 5);
  in.min_prefetch_runs = 1;

  in.policy = ActivationPolicy::OffloadAll;  // offloads even where it fits, and never recomputes
  in.device_bytes_for_activations = 1e9;
  for (const auto& c : choose_activation_actions(ls, in)) CHECK(c.action == ActivationAction::Offload);
}

TEST_CASE("saves slower than forward throttle it: the pass predicts the wait and spreads its offloads") {
  // Ten blocks of 0.025 s forward each; a save takes 0.086 s (2.15 GB at 25 GB/s, as on an H200 node).
  std::vector<ActivationLifetime> ls;
  for (int i = 0; i < 10; ++i) ls.push_back(lifetime(i, 2.15, 10.0 - i, 0.025));
  // Closed form, three consecutive offloads: block 2 may start once block 0's save is done
  // (kActivationSavesInFlight = 2): that save ends at 0.025 + 0.086 = 0.111 s, block 2 would start
  // at 0.05: 0.061 s of waiting. Blocks 0, 3 and 6: block 6 starts at 0.15, after every save it waits for.
  REQUIRE(kActivationSavesInFlight == 2);
  std::vector<double> saves(10, 0.0);
  saves[0] = saves[1] = saves[2] = 0.086;
  CHECK(forward_throttle_seconds(ls, saves) == Approx(0.061));
  saves.assign(10, 0.0);
  saves[0] = saves[3] = saves[6] = 0.086;
  CHECK(forward_throttle_seconds(ls, saves) == 0.0);
  saves.assign(10, 0.086);  // all ten: each block from the third on waits 0.086 - 0.025 s for the save two before it
  CHECK(forward_throttle_seconds(ls, saves) == Approx(8 * (0.086 - 0.025)));

  ActivationPassInput in;
  in.host_seconds_per_byte = 0.086 / 2.15;
  in.pcie_free_seconds = 100;
  in.host_bytes_free = 1e9;
  in.nvme_bytes_free = 1e9;
  in.device_bytes_for_activations = 7 * 2.15;  // three must go
  const auto cs = choose_activation_actions(ls, in);
  std::vector<int> offloaded;
  double predicted = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    predicted += cs[i].predicted_cost;
    if (cs[i].action == ActivationAction::Offload) offloaded.push_back(int(i));
  }
  REQUIRE(offloaded.size() == 3);
  // Not the three longest windows (blocks 0, 1, 2, which would wait 0.061 s): a spread set whose
  // forward never waits, and the prediction says so.
  saves.assign(10, 0.0);
  for (int i : offloaded) saves[size_t(i)] = 0.086;
  CHECK(offloaded != std::vector<int>{0, 1, 2});
  CHECK(forward_throttle_seconds(ls, saves) == 0.0);
  CHECK(predicted == 0.0);
  // Where only consecutive blocks are left to offload, the wait is in the prediction and the reason.
  in.device_bytes_for_activations = 0;
  in.can_recompute = false;
  const auto all = choose_activation_actions(ls, in);
  double all_predicted = 0;
  bool named = false;
  for (const auto& c : all) {
    CHECK(c.action == ActivationAction::Offload);
    all_predicted += c.predicted_cost;
    named = named || c.reason.find("the forward waiting for saves") != std::string::npos;
  }
  saves.assign(10, 0.086);
  CHECK(all_predicted == Approx(forward_throttle_seconds(ls, saves)));
  CHECK(named);
}

TEST_CASE("the activation pass recomputes when the path is too slow, and uses GDS for NVMe when there is one") {
  std::vector<ActivationLifetime> ls{lifetime(0, 100, 1.0, 0.2)};
  ActivationPassInput in;
  in.tier = {false, Tier::Nvme};
  in.nvme_seconds_per_byte = 0.05;  // 5 s each way: far beyond the window
  in.nvme_free_seconds = in.pcie_free_seconds = 100;
  in.nvme_bytes_free = 1e9;
  CHECK(choose_activation_actions(ls, in)[0].action == ActivationAction::Recompute);
  in.gds_seconds_per_byte = 0.001;  // 0.1 s each way: hidden
  const auto c = choose_activation_actions(ls, in)[0];
  CHECK(c.action == ActivationAction::Offload);
  CHECK(c.path == ActivationPath::Gds);
  CHECK(c.tier == Tier::Nvme);
  in.nvme_bytes_free = 50;  // no room on the tier: recompute instead
  CHECK(choose_activation_actions(ls, in)[0].action == ActivationAction::Recompute);
  // offload_all offloads anyway: the Program's peak on the tier decides whether the run fits
  // (core/fit.hpp), not the pass's estimate of the room.
  in.policy = ActivationPolicy::OffloadAll;
  CHECK(choose_activation_actions(ls, in)[0].action == ActivationAction::Offload);
}

TEST_CASE("a device too small to keep every block's activations: the lifetime pass fits it with ordinary tasks") {
  const ModelGraph g = zinf::models::build_gpt(spec());
  // Parameters stay on the device, and PCIe is fast enough for a tiny block's transfer to hide
  // behind its idle window (at the profile's own rate, recomputing a tiny block is cheaper).
  auto [hw, keep] = budget_between_keep_and_offload(g, 1e13);
  const RunConfig lifetime = config("activation_offload: {policy: lifetime, granularity: block}\n", "");
  CHECK_THROWS_AS(make_plan(g, hw, keep, 1), PlanError);
  const PlanResult r = make_plan(g, hw, lifetime, 1);
  require_valid(r, hw);
  CHECK(at(r.plan.peak_bytes, Tier::Device) <= at(r.plan.budget, Tier::Device));
  REQUIRE(r.plan.activations.size() == 6);
  int moved = 0;
  for (const auto& d : r.plan.activations) moved += d.choice.action != ActivationAction::Keep;
  CHECK(moved > 0);
  CHECK(moved < 6);
  // What goes first is an early block (long idle window); the last block (shortest window) stays.
  CHECK(r.plan.activations.front().choice.action != ActivationAction::Keep);
  CHECK(r.plan.activations.back().choice.action == ActivationAction::Keep);

  // Each offloaded segment: a save right after its block's last forward, a load before its first backward.
  const Program& p = r.program;
  for (const auto& seg : p.activations()) {
    const Task* save = nullptr;
    const Task* load = nullptr;
    for (const auto& t : p.tasks()) {
      if (t.activation != seg.id || t.data != Data::Activation) continue;
      if (t.phase == Phase::Forward && t.from == Tier::Device) save = &t;
      if (t.phase == Phase::Backward && t.to == Tier::Device) load = &t;
    }
    REQUIRE(save);  // checked for every offloaded segment; that there are some is checked below
    REQUIRE(load);
    CHECK(save->kind == TaskKind::CopyD2H);
    CHECK(load->kind == TaskKind::CopyH2D);
    const Task& fwd = p.task(p.deps(*save).front());
    CHECK(fwd.kind == TaskKind::Forward);
    CHECK(g.ops[size_t(fwd.op)].block == seg.last_block);
    CHECK(g.ops[size_t(fwd.op + 1)].block != seg.last_block);  // its block's last forward
    const Task* first_bwd = nullptr;
    for (const auto& t : p.tasks())
      if (t.kind == TaskKind::Backward && g.ops[size_t(t.op)].block == seg.last_block) {
        first_bwd = &t;
        break;
      }
    REQUIRE(first_bwd);
    const auto deps = p.deps(*first_bwd);
    CHECK(std::find(deps.begin(), deps.end(), load->id) != deps.end());
  }
  CHECK(!p.activations().empty());
  CHECK(r.plan.activation_bytes_offloaded > 0);
  CHECK(r.plan.activation_bytes_restored == r.plan.activation_bytes_offloaded);
}

TEST_CASE("per-tensor lifetimes: each block's saved tensors, their shares summing to the block, chained by their producers") {
  const ModelGraph g = zinf::models::build_gpt(spec(3));
  const HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  const auto whole = activation_lifetimes(g, hw.node.gpu, block_runs(g));
  const auto ls = activation_lifetimes(g, hw.node.gpu, block_runs(g), true);
  const auto tensors = block_tensors(g.spec, true);
  REQUIRE(ls.size() == whole.size() * tensors.size());
  for (size_t b = 0; b < whole.size(); ++b) {
    double bytes = 0, share = 0;
    for (size_t k = 0; k < tensors.size(); ++k) {
      const auto& l = ls[b * tensors.size() + k];
      CHECK(l.run == whole[b].run);
      CHECK(l.first_block == whole[b].first_block);
      CHECK(l.name == tensors[k].name);
      CHECK(l.idle_seconds == whole[b].idle_seconds);
      CHECK(l.run_forward_seconds == whole[b].forward_seconds);
      CHECK(l.pinned == (l.name == "out"));
      CHECK(l.forward_seconds > 0);  // its producer's forward: what recomputing it costs
      CHECK(l.forward_seconds < whole[b].forward_seconds);
      // Each tensor's producer reads the tensor before it (ln1 reads the block's input).
      CHECK(l.input == (k == 0 ? -1 : int32_t(b * tensors.size() + k - 1)));
      bytes += l.bytes;
      share += l.share;
    }
    CHECK(share == Approx(1.0));
    CHECK(bytes == Approx(whole[b].bytes));
  }
  // The attention probabilities (heads x seq per token) and the MLP's inner activations are the
  // large ones; a layernorm is cheap to recompute, the attention and the GEMMs are not.
  auto item = [&](const char* name) {
    return *std::find_if(ls.begin(), ls.end(), [&](const ActivationLifetime& l) { return l.name == name; });
  };
  CHECK(item("attn").bytes > item("qkv").bytes);
  CHECK(item("gelu").bytes > item("ln2").bytes);
  // At a size where kernels are not launch-bound (this tiny model's are), a layernorm or GELU
  // costs a fraction of the GEMM that reads its output.
  ModelSpec big = spec(2);
  big.hidden = 4096;
  big.heads = 32;
  big.seq = 2048;
  const ModelGraph bg = zinf::models::build_gpt(big);
  const auto bl = activation_lifetimes(bg, load_hwprofile(source("hwprofiles/h200-node.yaml")).node.gpu, block_runs(bg), true);
  auto big_item = [&](const char* name) {
    return *std::find_if(bl.begin(), bl.end(), [&](const ActivationLifetime& l) { return l.name == name; });
  };
  CHECK(big_item("ln1").forward_seconds < 0.2 * big_item("qkv").forward_seconds);
  CHECK(big_item("gelu").forward_seconds < 0.2 * big_item("fch").forward_seconds);
  // The fp32 kernels' shares are their tensors' sizes.
  const auto fp32 = block_tensors(g.spec, false);
  double sum = 0;
  for (const auto& t : fp32) sum += t.share;
  CHECK(sum == Approx(1.0));
  CHECK(fp32[6].share * block_forward_elements(g.spec) == Approx(double(g.spec.ffn_hidden())));  // fch
}

TEST_CASE("the per-tensor pass recomputes cheap tensors by their own operator, never a tensor and its input, and offloads one segment per run on one path") {
  const ModelGraph g = zinf::models::build_gpt(spec(4));
  const HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  auto ls = activation_lifetimes(g, hw.node.gpu, block_runs(g), true);
  double total = 0;
  for (const auto& l : ls) total += l.bytes;
  ActivationPassInput in;
  in.tier = {true, Tier::Host};  // auto: host or NVMe
  in.host_seconds_per_byte = 1.0 / 10e9;
  in.nvme_seconds_per_byte = 1.0 / 3e9;
  in.pcie_free_seconds = in.nvme_free_seconds = 100;
  in.host_bytes_free = in.nvme_bytes_free = 1e12;
  for (double keep_frac : {0.8, 0.5, 0.2}) {
    INFO("keep " << keep_frac);
    in.device_bytes_for_activations = keep_frac * total;
    const auto cs = choose_activation_actions(ls, in);
    REQUIRE(activation_choices_fit(ls, cs, in));
    std::map<int32_t, ActivationPath> path;
    for (size_t i = 0; i < ls.size(); ++i) {
      if (ls[i].pinned) CHECK(cs[i].action == ActivationAction::Keep);
      if (cs[i].action == ActivationAction::Recompute) {
        CHECK(ls[i].tensor >= 0);
        if (ls[i].input >= 0) CHECK(cs[size_t(ls[i].input)].action != ActivationAction::Recompute);
        CHECK_THAT(cs[i].reason, Contains("its operator again"));
      }
      if (cs[i].action == ActivationAction::Offload) {
        auto [it, fresh] = path.emplace(ls[i].run, cs[i].path);
        CHECK(it->second == cs[i].path);
      }
    }
  }
  // With a path too slow to hide anything, what goes first is what costs least per byte to
  // recompute: at this size (kernels not launch-bound) an elementwise tensor, not a GEMM's output.
  ModelSpec big = spec(2);
  big.hidden = 4096;
  big.heads = 32;
  big.seq = 2048;
  const ModelGraph bg = zinf::models::build_gpt(big);
  const auto bl = activation_lifetimes(bg, load_hwprofile(source("hwprofiles/h200-node.yaml")).node.gpu, block_runs(bg), true);
  double big_total = 0;
  for (const auto& l : bl) big_total += l.bytes;
  in.host_seconds_per_byte = in.nvme_seconds_per_byte = 1.0;
  in.device_bytes_for_activations = big_total - 1;  // one item must go
  const auto cs = choose_activation_actions(bl, in);
  int freed = 0;
  for (size_t i = 0; i < bl.size(); ++i) {
    if (cs[i].action == ActivationAction::Keep) continue;
    ++freed;
    CHECK(cs[i].action == ActivationAction::Recompute);
    // The attention's output with its probabilities: heads x seq per token for one attention
    // forward, the least recompute per byte here (Megatron's selective recompute, chosen by cost).
    CHECK(bl[i].name == "attn");
  }
  CHECK(freed == 1);
}

TEST_CASE("per-tensor choices in the Program: the kept, offloaded and recomputed tensors of a block, and a fallback to blocks") {
  const ModelGraph g = zinf::models::build_gpt(spec());
  auto [hw, keep] = budget_between_keep_and_offload(g, 1e12);
  const RunConfig lifetime = config("activation_offload: {policy: lifetime}\n", "");
  const PlanResult r = make_plan(g, hw, lifetime, 1);
  require_valid(r, hw);
  CHECK(at(r.plan.peak_bytes, Tier::Device) <= at(r.plan.budget, Tier::Device));
  const auto tensors = block_tensors(g.spec, true);
  REQUIRE(r.plan.activations.size() == 6 * tensors.size());
  std::map<std::string, int> recomputed;
  int offloaded = 0;
  for (const auto& d : r.plan.activations) {
    if (d.choice.action == ActivationAction::Recompute) ++recomputed[d.lifetime.name];
    offloaded += d.choice.action == ActivationAction::Offload;
  }
  CHECK(offloaded + int(recomputed.size()) > 0);
  const Program& p = r.program;
  // Each tensor recomputed per tensor is one Recompute task of its producer, outside any
  // checkpoint, before its block's first backward.
  int partial = 0;
  for (const auto& t : p.tasks()) {
    if (t.kind != TaskKind::Recompute) continue;
    CHECK(t.checkpoint < 0);
    ++partial;
  }
  int expected = 0;
  for (const auto& [name, n] : recomputed) expected += n;
  CHECK(partial == expected * int(p.micro_batches()));
  // An offloaded segment lists its tensors and carries their bytes.
  double seg_bytes = 0;
  for (const auto& seg : p.activations()) {
    CHECK_FALSE(seg.tensors.empty());
    seg_bytes += seg.bytes;
  }
  double off_bytes = 0;
  for (const auto& d : r.plan.activations)
    if (d.choice.action == ActivationAction::Offload) off_bytes += d.lifetime.bytes;
  CHECK(seg_bytes == Approx(off_bytes));

  // A budget only whole-segment recompute can meet (activations dominate, no path has room):
  // per-tensor recompute never reaches it, so the pass chooses per block and says so.
  ModelSpec wide = spec();
  wide.micro_batch = 32;
  const ModelGraph wg = zinf::models::build_gpt(wide);
  HwProfile slow = hw;
  slow.node.nvme_capacity = 1e6;  // the only path allowed has no room
  slow.node.gpu.memory = 1e12;
  const double ckpt_peak =
      at(make_plan(wg, slow, config("activation_checkpoint: {interval: 1, tier: device}\n", ""), 1).plan.peak_bytes, Tier::Device);
  slow.node.gpu.memory = 1.05 * ckpt_peak / (1.0 - slow.reserve.gpu);
  const PlanResult tight = make_plan(wg, slow, config("activation_offload: {policy: lifetime, tier: nvme}\n", ""), 1);
  require_valid(tight, slow);
  CHECK_THAT(tight.plan.activation_note, Contains("chosen per block"));
  CHECK(tight.plan.activations.front().lifetime.tensor < 0);
}

TEST_CASE("offloading activations over a fast path costs little step time, and recomputing them costs a forward") {
  const ModelGraph g = zinf::models::build_gpt(spec());
  const HwProfile hw = load_hwprofile(source("hwprofiles/h200-node.yaml"));
  const double keep = estimate_step_time(make_plan(g, hw, config("activation_checkpoint: {interval: 0}\n"), 1).program, hw);
  const double offload =
      estimate_step_time(make_plan(g, hw, config("activation_offload: {policy: offload_all, tier: host}\n"), 1).program, hw);
  const double recompute =
      estimate_step_time(make_plan(g, hw, config("activation_checkpoint: {interval: 1, tier: device}\n"), 1).program, hw);
  CHECK(keep > 0);
  CHECK(offload >= keep * 0.999);
  CHECK(recompute > keep);
}

TEST_CASE("with node.gds, NVMe-bound activations move straight between NVMe and the device") {
  const ModelGraph g = zinf::models::build_gpt(spec());
  HwProfile hw = load_hwprofile(source("hwprofiles/h200-node.yaml"));
  const RunConfig c = config("activation_offload: {policy: offload_all, tier: nvme}\n");
  auto kinds = [&](const Program& p) {
    std::vector<std::string> out;
    for (const auto& t : p.tasks())
      if (t.data == Data::Activation && t.activation == 0 && t.micro_batch == 0)
        out.push_back(std::string(to_string(t.kind)) + ":" + to_string(t.from) + ">" + to_string(t.to));
    return out;
  };
  const PlanResult via_host = make_plan(g, hw, c, 1);
  require_valid(via_host, hw);
  CHECK(kinds(via_host.program) ==
        std::vector<std::string>{"copy_d2h:device>host", "nvme_write:host>nvme", "nvme_read:nvme>host", "copy_h2d:host>device"});
  CHECK_FALSE(via_host.program.activations().front().gds);
  hw.node.gds_bandwidth = 50e9;
  const PlanResult gds = make_plan(g, hw, c, 1);
  require_valid(gds, hw);
  CHECK(kinds(gds.program) == std::vector<std::string>{"nvme_write:device>nvme", "nvme_read:nvme>device"});
  CHECK(gds.program.activations().front().gds);
  CHECK(gds.plan.nvme_bytes_written == via_host.plan.nvme_bytes_written);
  // The host tier holds none of it on the GDS path.
  CHECK(at(gds.plan.peak_bytes, Tier::Host) < at(via_host.plan.peak_bytes, Tier::Host));
}

TEST_CASE("activation_offload and node.gds: bad values are named") {
  CHECK_THROWS_WITH(parse_run_config("activation_offload: {policy: sometimes}\n", "c.yaml"), Contains("policy"));
  CHECK_THROWS_WITH(parse_run_config("activation_offload: {tier: device}\n", "c.yaml"), Contains("tier"));
  CHECK_THROWS_WITH(parse_run_config("activation_offload: {prefetch_blocks: 0}\n", "c.yaml"), Contains("prefetch_blocks"));
  CHECK_THROWS_WITH(parse_run_config("activation_offload: {polcy: lifetime}\n", "c.yaml"), Contains("polcy"));
  const RunConfig c = parse_run_config("activation_offload: {policy: lifetime, tier: nvme, prefetch_blocks: 3}\n", "c.yaml");
  CHECK(c.activation_policy == ActivationPolicy::Lifetime);
  CHECK_FALSE(c.activation_tier.automatic);
  CHECK(c.activation_tier.tier == Tier::Nvme);
  CHECK(c.activation_prefetch_blocks == 3);
  // The writer round-trips it.
  const RunConfig back = parse_run_config(run_config_to_yaml(c, "round trip"), "back.yaml");
  CHECK(back.activation_policy == ActivationPolicy::Lifetime);
  CHECK(back.activation_tier.tier == Tier::Nvme);
  CHECK(back.activation_prefetch_blocks == 3);

  std::string yaml = "name: t\nnode:\n  gpus: 1\n  gpu: {name: g, memory: 1 GB, peak_flops: 1 TFLOP/s, memory_bandwidth: 1 TB/s}\n"
                     "  host: {memory: 1 TB, memory_bandwidth: 100 GB/s, cores: 8, adam_params_per_s: 1e9}\n"
                     "  nvme: {capacity: 1 TB, read_bandwidth: 1 GB/s, write_bandwidth: 1 GB/s}\n"
                     "  pcie: {bandwidth_per_gpu: 10 GB/s}\n  nvlink: {bandwidth_per_gpu: 10 GB/s}\n"
                     "  nic: {count: 1, bandwidth: 1 GB/s}\n";
  CHECK_FALSE(parse_hwprofile(yaml, "t.yaml").node.has_gds());
  CHECK(parse_hwprofile(yaml + "  gds: {bandwidth_per_switch: 20 GB/s}\n", "t.yaml").node.gds_bandwidth == 20e9);
  CHECK_THROWS_WITH(parse_hwprofile(yaml + "  gds: {bandwidth: 20 GB/s}\n", "t.yaml"), Contains("bandwidth_per_switch"));
}

TEST_CASE("a per-tensor plan whose schedule does not fit is planned per block, and says so") {
  // gpt-tiny deepened, paths at 1 GB/s, a device 1 % short of keeping everything: per tensor, the
  // early loads of a few offloaded tensors raise the backward peak past the budget; per block fits.
  ModelSpec s = load_model_spec(source("models/gpt-tiny.yaml"));
  s.layers = 4;
  const ModelGraph g = zinf::models::build_gpt(s);
  HwProfile hw = load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  hw.node.pcie_bandwidth = 1e9;
  hw.node.nvme_read_bandwidth = hw.node.nvme_write_bandwidth = 1e9;
  const double keep_peak = at(make_plan(g, hw, config("activation_checkpoint: {interval: 0}\n", ""), 1).plan.peak_bytes, Tier::Device);
  hw.node.gpu.memory = 0.99 * keep_peak / (1.0 - hw.reserve.gpu);
  const RunConfig per_tensor = config("activation_offload: {policy: lifetime, tier: host}\n", "");
  const PlanResult r = make_plan(g, hw, per_tensor, 1);
  require_valid(r, hw);
  CHECK(at(r.plan.peak_bytes, Tier::Device) <= at(r.plan.budget, Tier::Device));
  CHECK_THAT(r.plan.activation_note, Contains("chosen per block: per tensor, device is short"));
  for (const auto& d : r.plan.activations) CHECK(d.lifetime.tensor < 0);
}
