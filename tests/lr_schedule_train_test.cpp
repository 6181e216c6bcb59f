// A learning-rate schedule in training: the Program's steps under a schedule match the plain
// reference trainer given the same rate each step, on the device and with every state on NVMe; a
// run resumed from a checkpoint continues the schedule bit for bit; the checkpoint records it.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/hwprofile.hpp"
#include "core/lr_schedule.hpp"
#include "formats/lr_schedule_reader.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/exec/executor.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/reference_trainer.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "temp_dir.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using zinf::test::source;
using zinf::test::TempDir;
namespace fs = std::filesystem;

namespace {

core::LrSchedule schedule_of(const std::string& config_yaml) {
  std::vector<std::string> warnings;
  return core::parse_lr_schedule(config_yaml, "test", warnings);
}

engine::TokenCorpus corpus() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919 % 1000) + ". ";
  return engine::TokenCorpus::from_text(text);
}

const char* kSchedule = "optimizer: {lr: 3.0e-3}\nlr_schedule: {warmup_steps: 3, decay: cosine, decay_steps: 8, min_lr: 3.0e-4}\n";

// Steps of the Program with the CPU backend, each at its scheduled rate; and the reference trainer
// at the rates `rate_of` gives (the schedule's, or a constant one).
std::vector<double> program_losses(const std::string& config_yaml, int steps, const fs::path& nvme) {
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  const auto config = core::parse_run_config(config_yaml, "test");
  const auto planned = core::make_plan(graph, core::load_hwprofile(source("hwprofiles/cpu-dev.yaml")), config, 1);
  engine::Gpt2 model(graph);
  engine::LocalCollectives comm;
  engine::GptBackendOptions o;
  o.nvme_dir = nvme.string();
  o.config = config;
  engine::GptCpuBackend backend(planned.program, planned.plan, model, 0, comm, o);
  backend.initialize(model.init_params(7));
  const auto text = corpus();
  engine::BatchLoader loader(text, spec.micro_batch, spec.seq);
  engine::Executor exec(planned.program, 0, backend);
  const core::LrSchedule schedule = core::resolved(schedule_of(config_yaml), steps, config.lr);
  std::vector<double> losses;
  for (int s = 1; s <= steps; ++s) {
    backend.set_step_rates(core::rates_at(schedule, s, config.lr, config.beta1, config.beta2));
    backend.begin_step(s, {loader.next()});
    exec.run_step();
    losses.push_back(backend.loss());
  }
  return losses;
}

std::vector<double> reference_losses(int steps, const std::function<double(int)>& rate_of) {
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  engine::Gpt2 model(graph);
  engine::ReferenceTrainerConfig rc;
  rc.adam.beta2 = 0.95;
  engine::ReferenceTrainer ref(graph, rc, model.init_params(7));
  const auto text = corpus();
  engine::BatchLoader loader(text, spec.micro_batch, spec.seq);
  std::vector<double> losses;
  for (int s = 1; s <= steps; ++s) {
    ref.set_rates(rate_of(s), 0.9, 0.95);
    std::vector<engine::Batch> b{loader.next()};
    losses.push_back(ref.step(b));
  }
  return losses;
}

}  // namespace

TEST_CASE("training under a schedule matches the reference trainer at the same rates, on the device and on NVMe",
          "[lr][equivalence]") {
  const int steps = 8;
  const auto config = core::parse_run_config(kSchedule, "test");
  const auto schedule = core::resolved(schedule_of(kSchedule), steps, config.lr);
  const auto scheduled = reference_losses(steps, [&](int s) { return core::rates_at(schedule, s, 3e-3, 0.9, 0.95).lr; });
  const auto constant = reference_losses(steps, [](int) { return 3e-3; });
  // The schedule changes the run by far more than the tolerance below: it is not ignored.
  CHECK(std::abs(scheduled.back() - constant.back()) > 1e-3);
  TempDir dir("lr-equivalence");
  for (const char* placement : {"zero_stage: 3\n", "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\n"}) {
    INFO(placement);
    const auto got = program_losses(std::string(placement) + kSchedule, steps, dir.path);
    for (int s = 0; s < steps; ++s) CHECK(got[size_t(s)] == Approx(scheduled[size_t(s)]).epsilon(1e-5));
  }
}

TEST_CASE("a run resumed mid-schedule continues it bit for bit, and the checkpoint records the schedule's state",
          "[lr][checkpoint]") {
  TempDir dir("lr-resume");
  const auto options = [&](const std::string& name) {
    engine::TrainerOptions o;
    o.model = core::load_model_spec(source("models/gpt-tiny.yaml"));
    o.hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
    const std::string yaml = "zero_stage: 3\noffload: {params: cpu, optimizer: nvme}\noptimizer: {lr: 2.0e-3}\n"
                             "lr_schedule: {warmup_steps: 2, decay: linear}\n";
    o.config = core::parse_run_config(yaml, "test");
    o.lr_schedule = schedule_of(yaml);
    o.total_steps = 6;
    o.nvme_dir = (dir.path / name / "nvme").string();
    o.checkpoint_dir = (dir.path / name / "ckpt").string();
    fs::create_directories(o.nvme_dir);
    return o;
  };
  engine::LocalCollectives comm;
  std::vector<engine::StepStats> straight;
  {
    engine::Trainer t(options("a"), comm);
    for (int i = 0; i < 6; ++i) straight.push_back(t.step());
  }
  CHECK(straight[0].lr == Approx(1e-3));
  CHECK(straight[1].lr == Approx(2e-3));
  CHECK(straight[5].lr == Approx(2e-4));  // the default floor, 0.1 x lr, at the run's last step
  std::string saved;
  {
    engine::Trainer t(options("b"), comm);
    for (int i = 0; i < 3; ++i) t.step();
    saved = t.save_checkpoint();
  }
  std::ifstream meta_file(fs::path(saved) / "meta.json");
  const auto meta = nlohmann::json::parse(meta_file);
  CHECK(meta["lr_schedule"]["step"] == 3);
  CHECK(meta["lr_schedule"]["schedule"]["decay"] == "linear");
  CHECK(meta["lr_schedule"]["schedule"]["decay_steps"] == 6);
  CHECK(meta["lr_schedule"]["last_lr"].get<double>() == straight[2].lr);
  auto o = options("b");
  o.start = engine::CheckpointStart::Resume;
  engine::Trainer t(o, comm);
  for (int i = 3; i < 6; ++i) {
    const auto s = t.step();
    CHECK(s.lr == straight[size_t(i)].lr);
    CHECK(s.loss == straight[size_t(i)].loss);  // bitwise
    CHECK(s.grad_norm == straight[size_t(i)].grad_norm);
  }
}
