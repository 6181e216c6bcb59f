// The held-out loss (engine/train/evaluation.hpp): the forward-only Program run by the training
// backend on its own homes gives the plain reference's forward loss over the same batches, on every
// tier configuration, and changes nothing: the next training step is bit for bit the step of a run
// that never evaluated.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/reference_trainer.hpp"
#include "engine/train/evaluation.hpp"
#include "models/gpt.hpp"
#include "temp_dir.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using zinf::test::source;

namespace {

engine::TokenCorpus train_corpus() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919 % 1000) + ". ";
  return engine::TokenCorpus::from_text(text, "<train>");
}

engine::TokenCorpus held_out_corpus() {
  std::string text;
  for (int i = 0; i < 60; ++i) text += "a lazy dog sleeps under the brown tree " + std::to_string(i * 104729 % 997) + "; ";
  return engine::TokenCorpus::from_text(text, "<held-out>");
}

constexpr int64_t kBatches = 3;
constexpr uint64_t kSeed = 99;

struct Outcome {
  double held_out = 0;              // the held-out loss after `before` steps (when evaluated)
  std::vector<double> train_losses;  // every training step's loss
  core::PerTier eval_peak{};
};

// Trains `before` steps, evaluates when asked, then trains `after` more steps.
Outcome run(const std::string& config_yaml, int before, bool evaluate, int after) {
  const auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  const auto graph = models::build_gpt(spec);
  const auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  const auto config = core::parse_run_config(config_yaml, "test-config");
  auto planned = core::make_plan(graph, hw, config, 1);
  engine::Gpt2 model(graph);
  engine::LocalCollectives comm;
  zinf::test::TempDir dir("eval");
  engine::GptBackendOptions o;
  o.nvme_dir = dir.path.string();
  o.config = config;
  engine::GptCpuBackend backend(planned.program, planned.plan, model, 0, comm, o);
  backend.initialize(model.init_params(7));
  const auto corpus = train_corpus();
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  engine::Executor exec(planned.program, 0, backend);
  core::PlanResult forward = core::make_forward_plan(graph, hw, core::forward_config(config, planned.plan), 1,
                                                     core::ForwardBeside::TrainingStates);
  engine::Evaluator evaluator(held_out_corpus(), std::move(forward), backend, 0, 1, kBatches, spec.micro_batch, spec.seq,
                              kSeed);
  Outcome out;
  int64_t step = 0;
  auto train = [&](int n) {
    for (int s = 0; s < n; ++s) {
      std::vector<engine::Batch> batches{loader.next()};
      backend.begin_step(++step, std::move(batches));
      const core::Timeline tl = exec.run_step();
      REQUIRE(core::check_timeline(planned.program, tl, 1e-3).ok());
      out.train_losses.push_back(backend.loss());
    }
  };
  train(before);
  if (evaluate) {
    const engine::EvalStats e = evaluator.evaluate(comm, 1, step);
    out.held_out = e.loss;
    out.eval_peak = e.peak;
    CHECK(e.batches == kBatches);
    CHECK(e.tokens == kBatches * spec.micro_batch * spec.seq);
    CHECK(e.perplexity == Approx(std::exp(e.loss)));
  }
  train(after);
  return out;
}

// The plain reference's forward loss over the same held-out batches after `before` steps.
double reference_held_out(int before) {
  const auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  const auto graph = models::build_gpt(spec);
  engine::Gpt2 model(graph);
  engine::ReferenceTrainerConfig rc;
  rc.adam.lr = 3e-4;
  rc.adam.beta2 = 0.95;
  engine::ReferenceTrainer ref(graph, rc, model.init_params(7));
  const auto corpus = train_corpus();
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  for (int s = 0; s < before; ++s) {
    std::vector<engine::Batch> b{loader.next()};
    ref.step(b);
  }
  const auto held = held_out_corpus();
  engine::BatchLoader held_loader(held, spec.micro_batch, spec.seq, 0, 1, kSeed);
  std::vector<engine::Batch> batches;
  for (int64_t k = 0; k < kBatches; ++k) batches.push_back(held_loader.next());
  engine::ReferenceTrainer probe = ref;  // step() returns the loss measured before its update
  return probe.step(batches);
}

}  // namespace

TEST_CASE("the held-out loss equals the plain reference's forward over the same batches, on every tier configuration",
          "[evaluation][equivalence]") {
  const double want = reference_held_out(2);
  const char* variants[] = {
      "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n",
      "zero_stage: 3\noffload: {optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: device}\n",
      "zero_stage: 3\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: host}\n",
      "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: nvme}\n",
      "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\ntiling_factor: 4\nactivation_checkpoint: {interval: 1, tier: host}\n",
  };
  for (const char* v : variants) {
    INFO(v);
    const Outcome got = run(v, 2, true, 0);
    CHECK(got.held_out == Approx(want).epsilon(1e-5));
    CHECK(core::at(got.eval_peak, core::Tier::Device) > 0);
  }
}

TEST_CASE("evaluating between steps changes nothing: the next steps are bit for bit those of a run that never evaluated",
          "[evaluation]") {
  for (const char* v : {"zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n",
                        "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: "
                        "nvme}\n"}) {
    INFO(v);
    const Outcome with = run(v, 2, true, 2), without = run(v, 2, false, 2);
    REQUIRE(with.train_losses.size() == 4);
    CHECK(with.train_losses == without.train_losses);
  }
}

TEST_CASE("an Evaluator refuses held-out data shorter than one window, naming it", "[evaluation]") {
  const auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  const auto graph = models::build_gpt(spec);
  const auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  const auto config = core::parse_run_config("zero_stage: 3\n", "test-config");
  auto planned = core::make_plan(graph, hw, config, 1);
  engine::Gpt2 model(graph);
  engine::LocalCollectives comm;
  engine::GptBackendOptions o;
  o.config = config;
  engine::GptCpuBackend backend(planned.program, planned.plan, model, 0, comm, o);
  core::PlanResult forward = core::make_forward_plan(graph, hw, core::forward_config(config, planned.plan), 1,
                                                     core::ForwardBeside::TrainingStates);
  CHECK_THROWS_WITH(engine::Evaluator(engine::TokenCorpus::from_text("too short", "<tiny held-out>"), std::move(forward),
                                      backend, 0, 1, 2, spec.micro_batch, spec.seq, kSeed),
                    Catch::Contains("<tiny held-out>"));
}
