// Timelines: the idealized list scheduler, CSV and Chrome trace output, and the checker both
// executors use (dependencies, serial lanes, memory within budget).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "core/validation.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;
using zinf::test::source;

namespace {

ModelGraph tiny_graph() {
  ModelSpec s = load_model_spec(source("models/gpt-tiny.yaml"));
  s.layers = 2;
  s.hidden = 64;
  s.heads = 4;
  s.seq = 32;
  s.vocab = 256;
  s.micro_batch = 2;
  return zinf::models::build_gpt(s);
}

struct Fixture {
  ModelGraph g = tiny_graph();
  HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  RunConfig c = load_run_config(source("configs/infinity-nvme.yaml"));
};

}  // namespace

TEST_CASE_METHOD(Fixture, "the idealized schedule is a valid timeline of its program", "[timeline]") {
  PlanResult r = make_plan(g, hw, c, 4);
  Timeline tl = schedule_ideal(r.program, hw, {0, 3});
  TimelineCheck chk = check_timeline(r.program, tl);
  INFO((chk.errors.empty() ? "" : chk.errors.front()));
  CHECK(chk.ok());
  REQUIRE(chk.peak_bytes.size() == 2);
  // The plan's peak is the worst of the nominal schedule and two with data or compute 100x faster
  // (schedule_peak): the nominal timeline stays within it.
  CHECK(at(chk.peak_bytes[0], Tier::Device) <= at(r.plan.peak_bytes, Tier::Device));
  CHECK(tl.makespan() == Approx(estimate_step_time(r.program, hw)));
  size_t real_tasks = 0;
  for (const auto& t : r.program.tasks()) real_tasks += t.kind != TaskKind::Alloc && t.kind != TaskKind::Free;
  CHECK(tl.events.size() == 2 * real_tasks);
  // With per-hop latencies (no NCCL model) this small program's worst case is the nominal one itself.
  hw.nccl = {};
  const PlanResult plain = make_plan(g, hw, c, 4);
  const TimelineCheck plain_chk = check_timeline(plain.program, schedule_ideal(plain.program, hw, {0, 3}));
  CHECK(plain_chk.ok());
  CHECK(at(plain_chk.peak_bytes[0], Tier::Device) == at(plain.plan.peak_bytes, Tier::Device));
}

TEST_CASE_METHOD(Fixture, "timelines are written as CSV and as Chrome trace JSON", "[timeline]") {
  PlanResult r = make_plan(g, hw, c, 2);
  Timeline tl = schedule_ideal(r.program, hw);
  std::ostringstream csv, trace;
  tl.write_csv(csv);
  tl.write_chrome_trace(trace);
  const std::string text = csv.str();
  CHECK(text.rfind("rank,lane,task,kind,label,start,end,bytes,flops\n", 0) == 0);
  CHECK(size_t(std::count(text.begin(), text.end(), '\n')) == tl.events.size() + 1);
  auto j = nlohmann::json::parse(trace.str());
  size_t complete = 0;
  for (const auto& e : j["traceEvents"]) complete += e["ph"] == "X";
  CHECK(complete == tl.events.size());
}

TEST_CASE_METHOD(Fixture, "the checker finds early starts, overlapping lanes and memory over budget", "[timeline]") {
  PlanResult r = make_plan(g, hw, c, 2);
  const Timeline good = schedule_ideal(r.program, hw);
  SECTION("a task before its dependency") {
    Timeline tl = good;
    for (auto& e : tl.events)
      if (e.kind == TaskKind::AllGather && e.start > 0) {
        e.end -= e.start;
        e.start = 0;
        break;
      }
    CHECK_THAT(check_timeline(r.program, tl).errors.front(), Contains("before its dependencies"));
  }
  SECTION("two tasks on one lane at once") {
    Timeline tl = good;
    int moved = 0;
    for (auto& e : tl.events)
      if (e.lane == Lane::NvmeWrite && moved++ == 1) e.end += 1.0;
    bool found = false;
    for (const auto& m : check_timeline(r.program, tl).errors) found |= m.find("at once") != std::string::npos;
    CHECK(found);
  }
  SECTION("a task missing") {
    Timeline tl = good;
    tl.events.erase(tl.events.begin() + 5);
    CHECK_THAT(check_timeline(r.program, tl).errors.front(), Contains("did not run"));
  }
  SECTION("memory over budget when buffers are held too long") {
    // Replan with a device budget just above the planned peak, then hold every buffer to the end.
    HwProfile tight = hw;
    tight.node.gpu.memory = at(r.plan.peak_bytes, Tier::Device) * 1.02 / (1 - hw.reserve.gpu);
    PlanResult t = make_plan(g, tight, c, 2);
    Timeline tl = schedule_ideal(t.program, tight);
    CHECK(check_timeline(t.program, tl).ok());
    const double end = tl.makespan();
    for (auto& e : tl.events)
      if (e.kind == TaskKind::Forward || e.kind == TaskKind::Backward || e.kind == TaskKind::Recompute) e.end = end + 1;
    bool found = false;
    auto chk = check_timeline(t.program, tl);
    for (const auto& m : chk.errors) found |= m.find("over its budget") != std::string::npos;
    INFO("peak " << at(chk.peak_bytes[0], Tier::Device) << " budget " << at(t.program.budget(), Tier::Device) << " planned " << at(t.plan.peak_bytes, Tier::Device));
    CHECK(found);
  }
}

TEST_CASE_METHOD(Fixture, "nominal durations come from the hwprofile's rates", "[timeline]") {
  PlanResult r = make_plan(g, hw, c, 4);
  const auto& n = hw.node;
  for (const auto& t : r.program.tasks()) {
    const double d = nominal_duration(r.program, t, 0, hw);
    CHECK(d >= 0);
    if (t.kind == TaskKind::NvmeRead) CHECK(d == Approx(n.nvme_latency + t.bytes / (n.nvme_read_bandwidth / n.gpus)));
    if (t.kind == TaskKind::CopyH2D) CHECK(d == Approx(n.pcie_latency + t.bytes / n.pcie_bandwidth_all_active()));
    if (t.kind == TaskKind::Forward && t.gemm_dim > 0)
      CHECK(d >= t.flops / n.gpu.peak_flops);
  }
  // A faster NVMe array makes an NVMe-bound step faster.
  HwProfile fast = hw;
  fast.node.nvme_read_bandwidth *= 10;
  fast.node.nvme_write_bandwidth *= 10;
  CHECK(estimate_step_time(r.program, fast) < estimate_step_time(r.program, hw));
}

TEST_CASE_METHOD(Fixture, "with NVMe lanes of several slots the idealized schedule overlaps their tasks, within the slots",
                 "[timeline][slots]") {
  c.aio_tasks_in_flight = 3;
  PlanResult r = make_plan(g, hw, c, 2);
  REQUIRE(r.program.lane_slots(Lane::NvmeRead) == 3);
  Timeline tl = schedule_ideal(r.program, hw);
  TimelineCheck chk = check_timeline(r.program, tl);
  INFO((chk.errors.empty() ? "" : chk.errors.front()));
  CHECK(chk.ok());
  // Most tasks on the NVMe read lane at once, and the lane's busy time is its intervals' union.
  std::vector<std::pair<double, int>> edges;
  double sum = 0;
  for (const auto& e : tl.events)
    if (e.lane == Lane::NvmeRead && e.end > e.start) {
      edges.push_back({e.start, +1});
      edges.push_back({e.end, -1});
      sum += e.end - e.start;
    }
  std::sort(edges.begin(), edges.end());
  int now = 0, most = 0;
  for (const auto& [t, d] : edges) most = std::max(most, now += d);
  CHECK(most >= 2);
  CHECK(most <= 3);
  CHECK(lane_busy(tl)[static_cast<size_t>(Lane::NvmeRead)] < sum);
  // A fourth task at once is refused.
  Timeline over = tl;
  int moved = 0;
  double first = -1;
  for (auto& e : over.events)
    if (e.lane == Lane::NvmeRead && e.end > e.start && moved++ < 4) {
      if (first < 0) first = e.start;
      e.start = first;
    }
  bool found = false;
  for (const auto& m : check_timeline(r.program, over).errors) found |= m.find("of 3 slots runs tasks") != std::string::npos;
  CHECK(found);
}
