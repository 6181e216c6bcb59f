// The backends read only the Program: what a device moves is a task's kind, buffer, source and
// tiers. The optimizer's stages name the buffers they fill and read, and a Program that does not
// state a transfer makes the CPU backend fail loudly instead of moving data no task states.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "models/gpt.hpp"
#include "program_edit.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using core::Data;
using core::Phase;
using core::Task;
using core::TaskKind;
using core::Tier;
using Catch::Matchers::Contains;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("zinf_bp_" + std::to_string(::getpid()) + "_" + std::to_string(rand()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

core::PlanResult plan_tiny(const std::string& yaml) {
  auto graph = models::build_gpt(core::load_model_spec(test::source("models/gpt-tiny.yaml")));
  return core::make_plan(graph, core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml")),
                         core::parse_run_config(yaml, "test-config"), 1);
}

// Two steps of `program` (planned from `yaml`) on the CPU backend; the error of the step that failed,
// or nothing.
std::optional<std::string> run(const std::string& yaml, const core::Program& program) {
  auto spec = core::load_model_spec(test::source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  auto planned = plan_tiny(yaml);
  engine::Gpt2 model(graph);
  engine::LocalCollectives comm;
  TempDir dir;
  engine::GptBackendOptions o;
  o.nvme_dir = dir.path.string();
  o.config = core::parse_run_config(yaml, "test-config");
  engine::GptCpuBackend backend(program, planned.plan, model, 0, comm, o);
  backend.initialize(model.init_params(7));
  std::string text;
  for (int i = 0; i < 100; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + ". ";
  auto corpus = engine::TokenCorpus::from_text(text);
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  engine::Executor exec(program, 0, backend);
  for (int s = 1; s <= 2; ++s) {
    std::vector<engine::Batch> batches;
    for (int mb = 0; mb < program.micro_batches(); ++mb) batches.push_back(loader.next());
    backend.begin_step(s, std::move(batches));
    try {
      exec.run_step();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  }
  return std::nullopt;
}

// The first task `pick` accepts.
int32_t find(const core::Program& p, const std::function<bool(const Task&)>& pick) {
  for (const auto& t : p.tasks())
    if (pick(t)) return t.id;
  FAIL("no such task in the Program");
  return -1;
}

bool optimizer_stage(const Task& t, TaskKind k, Data d) { return t.phase == Phase::Optimizer && t.kind == k && t.data == d; }

const char* kDeviceAdamHostGrads =
    "zero_stage: 3\noffload: {params: cpu, optimizer: none, gradients: cpu}\nactivation_checkpoint: {interval: 1, tier: host}\n";
const char* kDeviceAdamNvmeParams =
    "zero_stage: 3\noffload: {params: nvme, optimizer: none, gradients: nvme}\nactivation_checkpoint: {interval: 1, tier: host}\n";
const char* kHostAdamNvmeGrads = "zero_stage: 3\noffload: {params: none, optimizer: cpu, gradients: nvme}\n";
const char* kOwnerHostParams = "zero_stage: 3\npartitioning: owner-based\noffload: {params: cpu, optimizer: cpu}\n";

}  // namespace

TEST_CASE("each optimizer stage names the buffer it fills and the one it reads, from Adam's inputs to the parameters' home",
          "[program][backend]") {
  for (const char* yaml : {kDeviceAdamHostGrads, kDeviceAdamNvmeParams, kHostAdamNvmeGrads}) {
    INFO(yaml);
    const auto r = plan_tiny(yaml);
    const core::Program& p = r.program;
    REQUIRE(core::validate_program(p).empty());
    for (const auto& adam : p.tasks()) {
      if (adam.kind != TaskKind::OptimizerStep) continue;
      // Adam reads its gradients from the last gradient stage of its sub-group, or (none) their home,
      // and writes the parameters into the buffer the first parameter stage reads, or (none) their home.
      int32_t grad_in = -1, param_out = -1;
      for (const auto& t : p.tasks()) {
        if (t.sub_group != adam.sub_group || t.phase != Phase::Optimizer) continue;
        if (t.data == Data::Grad) grad_in = t.id;
        if (t.data == Data::Param && param_out < 0) param_out = t.id;
      }
      CHECK((adam.source >= 0) == (grad_in >= 0));
      if (grad_in >= 0) CHECK(p.task(grad_in).buffer == adam.source);
      CHECK((adam.buffer >= 0) == (param_out >= 0));
      if (param_out >= 0) CHECK(p.task(param_out).source == adam.buffer);
    }
  }
}

TEST_CASE("the CPU backend runs each placement's Program as stated, and fails loudly where a transfer is not stated",
          "[backend]") {
  SECTION("gradients copied from the host to a device Adam") {
    const auto p = plan_tiny(kDeviceAdamHostGrads).program;
    REQUIRE_FALSE(run(kDeviceAdamHostGrads, p));
    const int32_t copy = find(p, [](const Task& t) { return optimizer_stage(t, TaskKind::CopyH2D, Data::Grad); });
    auto err = run(kDeviceAdamHostGrads, test::without_task(p, copy));
    REQUIRE(err);
    CHECK_THAT(*err, Contains("gradients is not staged"));
    // Adam told to read its gradients at their home: on the host, where a device Adam cannot.
    err = run(kDeviceAdamHostGrads, test::without_task(p, -1, [](Task& t) {
                if (t.kind == TaskKind::OptimizerStep) t.source = -1;
              }));
    REQUIRE(err);
    CHECK_THAT(*err, Contains("states no transfer between them"));
  }
  SECTION("updated parameters copied off the device on their way to NVMe") {
    const auto p = plan_tiny(kDeviceAdamNvmeParams).program;
    REQUIRE_FALSE(run(kDeviceAdamNvmeParams, p));
    const int32_t copy = find(p, [](const Task& t) { return optimizer_stage(t, TaskKind::CopyD2H, Data::Param); });
    auto err = run(kDeviceAdamNvmeParams, test::without_task(p, copy));
    REQUIRE(err);
    CHECK_THAT(*err, Contains("the updated parameters is not staged"));
  }
  SECTION("a reduced gradient copied to the host on its way to NVMe") {
    const auto p = plan_tiny(kHostAdamNvmeGrads).program;
    REQUIRE_FALSE(run(kHostAdamNvmeGrads, p));
    const int32_t copy = find(p, [](const Task& t) {
      return t.phase == Phase::Backward && t.kind == TaskKind::CopyD2H && t.data == Data::Grad;
    });
    auto err = run(kHostAdamNvmeGrads, test::without_task(p, copy));
    REQUIRE(err);
    CHECK_THAT(*err, Contains("states no transfer between them"));
  }
  SECTION("owner-based: what the owner's copy put in the buffer it broadcasts") {
    const auto p = plan_tiny(kOwnerHostParams).program;
    REQUIRE_FALSE(run(kOwnerHostParams, p));
    auto err = run(kOwnerHostParams, test::without_task(p, -1, [](Task& t) {
                     if (t.kind == TaskKind::Broadcast) t.source = -1;
                   }));
    REQUIRE(err);
    CHECK_THAT(*err, Contains("states no transfer between them"));
  }
}
