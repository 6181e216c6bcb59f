// The simulator's lanes of several slots (aio.tasks_in_flight > 1 on the NVMe lanes) run every
// Program the planner makes to its end, and a Program that cannot finish (a cycle through the
// lanes' in-order starts) is reported as such, naming what each lane waits for, even while the
// profile's background-load actors run beside the lanes. Each simulation runs in a child process
// (one SimGrid engine per process).
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "models/gpt.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "program_edit.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;

namespace {

// This machine's profile, with other processes' load set (whatever it measured), so that the
// background-load actors run beside the lanes.
core::HwProfile local_profile() {
  auto hw = core::load_hwprofile(test::source("hwprofiles/local.yaml"));
  REQUIRE(hw.node.device_shares_host_cores);
  hw.node.background_threads = 0.25;
  return hw;
}

// Every state on NVMe, as the memory-wall benchmark runs it.
core::RunConfig nvme_config(int slots) {
  return core::parse_run_config(
      "zero_stage: 3\noffload: {params: nvme, gradients: nvme, optimizer: nvme}\n"
      "activation_checkpoint: {interval: 1, tier: host}\ntiling_factor: 1\n"
      "aio: {block_size: 8388608, queue_depth: 64, tasks_in_flight: " + std::to_string(slots) + "}\n"
      "optimizer: {type: adamw, grad_clip: 0, sub_group_size: 10000000, timing: overlap-backward, nvme_phases: true, "
      "read_ahead: true}\nprefetch: {nvme_distance: 12}\nreserve_nvme_for_checkpoint: false\n",
      "slot-test-config.yaml");
}

core::ModelSpec gpt(int layers, int hidden, int vocab) {
  return core::parse_model_spec("name: t\nlayers: " + std::to_string(layers) + "\nhidden: " + std::to_string(hidden) +
                                    "\nheads: 8\nseq: 128\nvocab: " + std::to_string(vocab) + "\nmicro_batch: 1\n",
                                "slot-test-model.yaml");
}

// `p` with one more dependency: task `waiter` waits for task `on` as well.
core::Program with_dep(const core::Program& p, int32_t waiter, int32_t on) {
  return test::with_deps(p, [&](const core::Task& t, std::vector<int32_t> deps) {
    if (t.id == waiter) deps.push_back(on);
    return deps;
  });
}

}  // namespace

TEST_CASE("slot lanes run every task of NVMe-offloaded Programs of many shapes to the end", "[slots]") {
  // Shapes where the slots of a lane hand each other their turns while others append to the
  // queue of waiting slots: a stale iterator into that queue once lost a turn and deadlocked the
  // simulation (or, with background load, hung it) on Programs the engine runs.
  const auto hw = local_profile();
  for (int layers : {2, 3, 4, 6})
    for (int hidden : {512, 1024})
      for (int vocab : {1024, 50257})
        for (int slots : {2, 3, 4}) {
          INFO(layers << " layers, hidden " << hidden << ", vocab " << vocab << ", tasks_in_flight " << slots);
          const auto pr = core::make_plan(models::build_gpt(gpt(layers, hidden, vocab)), hw, nvme_config(slots), 1);
          REQUIRE(pr.program.lane_slots(core::Lane::NvmeRead) == slots);
          const auto r = sim::report_from_json(
              sim::run_isolated([&] { return sim::report_to_json(sim::simulate(pr.program, hw)); }));
          CHECK(r.tasks_run == pr.program.tasks().size());
          CHECK(r.step_time > 0);
        }
}

TEST_CASE("a Program with a cycle through the lanes is reported as unfinished, naming what the lanes wait for",
          "[slots]") {
  // The first compute task made to wait for the step's last task: every lane ends up waiting on
  // another. With background threads in the profile, their actors must stop once no lane can move,
  // or SimGrid never sees the deadlock and the simulation never returns.
  const auto hw = local_profile();
  for (int slots : {1, 4}) {
    INFO("tasks_in_flight " << slots);
    const auto pr = core::make_plan(models::build_gpt(gpt(2, 512, 1024)), hw, nvme_config(slots), 1);
    const auto& tasks = pr.program.tasks();
    int32_t first_compute = -1;
    for (const auto& t : tasks)
      if (t.lane == core::Lane::Compute && first_compute < 0) first_compute = t.id;
    REQUIRE(first_compute >= 0);
    const auto last = static_cast<int32_t>(tasks.size()) - 1;
    const auto cyclic = with_dep(pr.program, first_compute, last);
    // In a pool, so that a hang fails the test after a minute instead of stalling the suite.
    sim::IsolatedPool pool;
    pool.start(0, [&] { return sim::report_to_json(sim::simulate(cyclic, hw)); });
    std::vector<sim::IsolatedPool::Finished> ended;
    const auto t0 = std::chrono::steady_clock::now();
    while (ended.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) ended = pool.wait(1000);
    REQUIRE(ended.size() == 1);
    CHECK_FALSE(ended[0].ok);
    const std::string error = ended[0].text;
    CHECK_THAT(error, Catch::Contains("did not finish"));
    CHECK_THAT(error, Catch::Contains("lane compute waits to start task " + std::to_string(first_compute)));
    CHECK_THAT(error, Catch::Contains("task " + std::to_string(last) + " ("));
  }
}
