// The device arena: every device allocation of a backend goes through it against a hard budget,
// and going over it fails the task that asked, with the task's id.
#include <catch2/catch.hpp>

#include <mutex>

#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "engine/exec/executor.hpp"
#include "engine/memory/cpu_device_arena.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using engine::DeviceAllocator;
using engine::CpuDeviceArena;
using engine::DeviceMemoryError;
using engine::DeviceVector;

TEST_CASE("the arena counts live and peak bytes and refuses to go over its budget", "[arena]") {
  CpuDeviceArena arena(1 << 20);
  {
    DeviceVector<float> a(100'000, 1.0f, DeviceAllocator<float>(&arena));
    CHECK(arena.live() == 400'000);
    DeviceVector<float> b(100'000, DeviceAllocator<float>(&arena));
    CHECK(arena.live() == 800'000);
    try {
      DeviceVector<float> c(100'000, DeviceAllocator<float>(&arena));
      FAIL("an allocation over the budget succeeded");
    } catch (const DeviceMemoryError& e) {
      const std::string m = e.what();
      CHECK(m.find("over the device budget of 1048576 bytes") != std::string::npos);
      CHECK(m.find("1200000 bytes live") != std::string::npos);
    }
    CHECK(arena.live() == 800'000);  // the refused allocation left nothing behind
    CHECK(a[99'999] == 1.0f);
  }
  CHECK(arena.live() == 0);
  CHECK(arena.peak() == 800'000);
  arena.reset_peak();
  CHECK(arena.peak() == 0);
  arena.charge(1000, "a home");
  CHECK(arena.live() == 1000);
  CHECK_THROWS_AS(arena.charge(1 << 20, "a big home"), DeviceMemoryError);
  arena.uncharge(1000);
  CHECK(arena.live() == 0);
}

TEST_CASE("a device vector gives its memory back to its own arena after a move", "[arena]") {
  CpuDeviceArena a1(1 << 20), a2(1 << 20);
  DeviceVector<float> x(1000, DeviceAllocator<float>(&a1));
  DeviceVector<float> y(10, DeviceAllocator<float>(&a2));
  y = std::move(x);  // y's old buffer goes back to a2; y now holds a1's buffer
  CHECK(a2.live() == 0);
  CHECK(a1.live() == 4000);
  y = DeviceVector<float>(y.get_allocator());
  CHECK(a1.live() == 0);
  DeviceVector<float> heap(1000);  // no arena: the heap, counted nowhere
  CHECK(heap.get_allocator().arena == nullptr);
}

namespace {
// Allocates `bytes` of device memory from the arena in task `when` and holds it until the step ends.
struct AllocatingBackend final : engine::TaskBackend {
  CpuDeviceArena& arena;
  int32_t when;
  size_t bytes;
  std::vector<DeviceVector<char>> held;
  std::mutex mu;
  AllocatingBackend(CpuDeviceArena& a, int32_t w, size_t b) : arena(a), when(w), bytes(b) {}
  void run(const core::Task& t) override {
    if (t.id != when) return;
    DeviceVector<char> v(bytes, DeviceAllocator<char>(&arena));
    std::lock_guard<std::mutex> lock(mu);
    held.push_back(std::move(v));
  }
};
}  // namespace

TEST_CASE("going over the device budget fails the step naming the task that allocated", "[arena][executor]") {
  const auto graph = models::build_gpt(core::load_model_spec(test::source("models/gpt-tiny.yaml")));
  const auto hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  const auto planned = core::make_plan(graph, hw, core::parse_run_config("zero_stage: 3\n", "test"), 1);
  int32_t compute = -1;
  for (const auto& t : planned.program.tasks())
    if (core::is_compute(t.kind) && compute < 0 && t.id > 3) compute = t.id;
  REQUIRE(compute >= 0);

  CpuDeviceArena arena(1 << 20);
  AllocatingBackend within(arena, compute, 1 << 19);
  engine::Executor(planned.program, 0, within).run_step();  // half the budget: fine

  CpuDeviceArena small(1 << 20);
  AllocatingBackend over(small, compute, 2 << 20);
  engine::Executor exec(planned.program, 0, over);
  try {
    exec.run_step();
    FAIL("the step went over the device budget without an error");
  } catch (const engine::ExecutionError& e) {
    CHECK(e.task() == compute);
    const std::string m = e.what();
    CHECK(m.find("task " + std::to_string(compute)) != std::string::npos);
    CHECK(m.find("device memory over budget") != std::string::npos);
  }
}
