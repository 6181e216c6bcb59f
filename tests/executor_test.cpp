// The Executor with several tasks in flight on the NVMe lanes (Program::lane_slots), driven by a
// backend that only sleeps and counts: tasks of a lane start in id order, never more than the
// lane's slots at once and never before their dependencies; the memory accounting stays within
// budget; a task that fails ends the step with an error naming it, whatever else is in flight.
#include <catch2/catch.hpp>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "engine/exec/executor.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using core::Lane;

namespace {

core::PlanResult nvme_plan(int slots) {
  auto spec = core::load_model_spec(test::source("models/gpt-tiny.yaml"));
  const auto hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  const auto config = core::parse_run_config(
      "zero_stage: 3\ngradient_accumulation: 2\noffload: {params: nvme, gradients: nvme, optimizer: nvme}\n"
      "optimizer: {timing: overlap-backward, sub_group_size: 5000}\nactivation_checkpoint: {interval: 1, tier: nvme}\n"
      "prefetch: {nvme_distance: 6}\naio: {tasks_in_flight: " + std::to_string(slots) + "}\n",
      "test-config");
  return core::make_plan(models::build_gpt(spec), hw, config, 1);
}

// Sleeps in every NVMe task (so that a lane's tasks overlap where the Program lets them) and
// counts the NVMe tasks running at once per lane; throws in task `fail_at`.
struct SleepingBackend final : engine::TaskBackend {
  int32_t fail_at = -1;
  std::mutex mu;
  std::map<Lane, int> running, most;
  void run(const core::Task& t) override {
    if (t.id == fail_at) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      throw std::runtime_error("injected failure");
    }
    if (t.lane != Lane::NvmeRead && t.lane != Lane::NvmeWrite) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      most[t.lane] = std::max(most[t.lane], ++running[t.lane]);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mu);
    --running[t.lane];
  }
};

}  // namespace

TEST_CASE("the planner gives the NVMe lanes aio.tasks_in_flight slots and every other lane one", "[executor][slots]") {
  const auto r = nvme_plan(3);
  CHECK(r.program.lane_slots(Lane::NvmeRead) == 3);
  CHECK(r.program.lane_slots(Lane::NvmeWrite) == 3);
  for (Lane l : {Lane::Compute, Lane::H2D, Lane::D2H, Lane::Comm, Lane::CpuOptim}) CHECK(r.program.lane_slots(l) == 1);
  CHECK(core::validate_program(r.program).empty());
  CHECK(nvme_plan(1).program.lane_slots(Lane::NvmeRead) == 1);
  CHECK_THROWS_WITH(core::parse_run_config("aio: {tasks_in_flight: 0}\n", "bad.yaml"), Catch::Contains("aio.tasks_in_flight"));
}

TEST_CASE("an NVMe lane of K slots starts its tasks in id order, at most K at once, after their dependencies",
          "[executor][slots]") {
  for (int slots : {1, 3}) {
    INFO("slots " << slots);
    const auto planned = nvme_plan(slots);
    SleepingBackend backend;
    engine::Executor exec(planned.program, 0, backend);
    for (int step = 0; step < 2; ++step) {
      const auto tl = exec.run_step();
      // Dependencies, at most K tasks per lane at once, memory within budget.
      const auto check = core::check_timeline(planned.program, tl, 1e-4);
      INFO((check.errors.empty() ? std::string() : check.errors.front()));
      CHECK(check.ok());
      for (Lane lane : {Lane::NvmeRead, Lane::NvmeWrite}) {
        std::vector<const core::TimelineEvent*> evs;
        for (const auto& e : tl.events)
          if (e.lane == lane) evs.push_back(&e);
        REQUIRE(evs.size() > 4);
        std::sort(evs.begin(), evs.end(), [](auto* a, auto* b) { return a->task < b->task; });
        for (size_t i = 1; i < evs.size(); ++i) CHECK(evs[i]->start >= evs[i - 1]->start);
      }
      const auto& peak = exec.peak_bytes();
      for (core::Tier t : {core::Tier::Device, core::Tier::Host})
        CHECK(core::at(peak, t) <= core::at(planned.program.budget(), t) * (1 + 1e-9));
      CHECK(core::at(peak, core::Tier::Host) >= core::at(planned.program.static_bytes(0), core::Tier::Host));
    }
    CHECK(backend.most[Lane::NvmeRead] <= slots);
    CHECK(backend.most[Lane::NvmeWrite] <= slots);
    // The Program lets reads overlap (prefetch distance 6, three optimizer states per sub-group).
    if (slots > 1) CHECK(backend.most[Lane::NvmeRead] >= 2);
    else CHECK(backend.most[Lane::NvmeRead] == 1);
  }
}

TEST_CASE("a task failing while others of its lane are in flight fails the step, naming it", "[executor][slots]") {
  const auto planned = nvme_plan(4);
  int32_t third_read = -1, reads = 0;
  for (const auto& t : planned.program.tasks())
    if (t.lane == Lane::NvmeRead && ++reads == 3) third_read = t.id;
  REQUIRE(third_read >= 0);
  SleepingBackend backend;
  backend.fail_at = third_read;
  engine::Executor exec(planned.program, 0, backend);
  try {
    exec.run_step();
    FAIL("the step finished although a task failed");
  } catch (const engine::ExecutionError& e) {
    CHECK(e.task() == third_read);
    CHECK_THAT(std::string(e.what()), Catch::Contains("injected failure") && Catch::Contains("nvme_read"));
  }
  // The Executor is usable again: the next step runs every task.
  backend.fail_at = -1;
  const auto tl = exec.run_step();
  CHECK(core::check_timeline(planned.program, tl, 1e-4).ok());
}

// Records the name of the thread that runs each lane's tasks (what top -H and thread_cpu.py show).
struct NamingBackend final : engine::TaskBackend {
  std::mutex mu;
  std::map<Lane, std::set<std::string>> names;
  void run(const core::Task& t) override {
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    std::lock_guard<std::mutex> lock(mu);
    names[t.lane].insert(name);
  }
};

TEST_CASE("each lane's tasks run on threads named after the lane", "[executor]") {
  const auto planned = nvme_plan(3);
  NamingBackend backend;
  engine::Executor exec(planned.program, 0, backend);
  exec.run_step();
  REQUIRE(backend.names.size() >= 4);
  for (const auto& [lane, names] : backend.names) {
    INFO(core::to_string(lane));
    CHECK(names == std::set<std::string>{("zinf " + std::string(core::to_string(lane))).substr(0, 15)});
  }
}
