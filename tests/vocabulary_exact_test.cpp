// Training with the embedding and the LM head tiled along the vocabulary against the untiled step,
// on the CPU backend (one rank; tests/mpi/ runs ranks and tensor parallelism). What is exact and what
// is not: with the reference kernels (plain loops) the forward (embedding, logits, loss) and every
// tile's weight gradient are the untiled arithmetic, so the first step's loss is bitwise equal; the
// head's input gradient is a sum over the vocabulary that the tiles add up in another order (the
// head's tile GEMMs, last tile first), so later losses and the weights agree within a stated
// tolerance: losses to 1e-6 relative, and every weight's distance from the untiled run under 1e-3 of
// that weight's own change over the run. With OpenBLAS (the fast kernels) a tile's GEMM may also
// round differently from the whole one's (it picks kernels by shape): the same tolerances hold.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("zinf_vocab_" + std::to_string(::getpid()) + "_" + std::to_string(rand()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

struct Run {
  std::vector<double> losses;
  engine::Gpt2Params initial, master;
  int64_t vocabulary_tiles = 0;
};

Run train(const std::string& config_yaml, int steps, bool tied = true,
          engine::KernelImpl kernels = engine::KernelImpl::Fast) {
  auto spec = core::load_model_spec(test::source("models/gpt-tiny.yaml"));
  spec.tied_embeddings = tied;
  const auto graph = models::build_gpt(spec);
  const auto hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  const auto config = core::parse_run_config(config_yaml, "test-config");
  const auto planned = core::make_plan(graph, hw, config, 1);
  REQUIRE(core::validate_program(planned.program).empty());
  engine::Gpt2 model(graph, kernels);
  engine::LocalCollectives comm;
  TempDir dir;
  engine::GptBackendOptions o;
  o.nvme_dir = dir.path.string();
  o.config = config;
  engine::GptCpuBackend backend(planned.program, planned.plan, model, 0, comm, o);
  Run run;
  run.initial = model.init_params(7);
  run.vocabulary_tiles = planned.plan.vocabulary_tiles;
  backend.initialize(run.initial);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919 % 1000) + ". ";
  auto corpus = engine::TokenCorpus::from_text(text);
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  engine::Executor exec(planned.program, 0, backend);
  for (int s = 1; s <= steps; ++s) {
    std::vector<engine::Batch> batches;
    for (int mb = 0; mb < planned.program.micro_batches(); ++mb) batches.push_back(loader.next());
    backend.begin_step(s, std::move(batches));
    auto tl = exec.run_step();
    REQUIRE(core::check_timeline(planned.program, tl, 1e-3).ok());
    run.losses.push_back(backend.loss());
  }
  run.master = backend.gather_state().master;
  return run;
}

// Each weight's distance from the untiled run, relative to how far that group moved in the run.
double relative_weight_distance(const Run& got, const Run& want) {
  double worst = 0;
  for (size_t g = 0; g < want.master.size(); ++g) {
    double diff = 0, moved = 0;
    for (size_t i = 0; i < want.master[g].size(); ++i) {
      diff += std::pow(double(got.master[g][i]) - double(want.master[g][i]), 2);
      moved += std::pow(double(want.master[g][i]) - double(want.initial[g][i]), 2);
    }
    if (moved > 0) worst = std::max(worst, std::sqrt(diff / moved));
  }
  return worst;
}

}  // namespace

TEST_CASE("vocabulary tiles train as the untiled step: the first loss bitwise, the rest within the stated tolerance",
          "[vocabulary][equivalence]") {
  const int steps = 6;
  const std::string base = "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n";
  struct Variant {
    std::string where;
    engine::KernelImpl kernels;
  };
  const Variant variants[] = {
      {"", engine::KernelImpl::Reference},
      {"", engine::KernelImpl::Fast},
      {"offload: {params: nvme, optimizer: nvme}\n", engine::KernelImpl::Fast},
      {"offload: {params: cpu, gradients: cpu, optimizer: cpu}\ngradient_accumulation: 2\n", engine::KernelImpl::Fast},
  };
  for (bool tied : {true, false}) {
    for (const auto& [where, kernels] : variants) {
      const bool exact = kernels == engine::KernelImpl::Reference;
      INFO("tied " << tied << "; " << (exact ? "reference" : "fast") << " kernels; " << where);
      const Run whole = train(base + where + "vocabulary_tiles: 1\n", steps, tied, kernels);
      CHECK(whole.vocabulary_tiles == 1);
      for (int tiles : {4, 3}) {  // 64 rows each; 86, 86 and 84
        INFO(tiles << " vocabulary tiles");
        const Run tiled = train(base + where + "vocabulary_tiles: " + std::to_string(tiles) + "\n", steps, tied, kernels);
        CHECK(tiled.vocabulary_tiles == tiles);
        if (exact) CHECK(tiled.losses[0] == whole.losses[0]);  // the forward is the untiled arithmetic
        for (int s = 0; s < steps; ++s) CHECK(tiled.losses[size_t(s)] == Approx(whole.losses[size_t(s)]).epsilon(1e-6));
        const double d = relative_weight_distance(tiled, whole);
        INFO("weights: " << d << " of their change");
        CHECK(d < 1e-3);
      }
    }
  }
}

TEST_CASE("the tied weight's two contributions per micro-batch add up alike on every gradient tier", "[vocabulary][equivalence]") {
  // The head's and the embedding's gradient of wte are reduced apart (the head's first) and added at
  // the home: on the device, in host memory, or read back from NVMe and written again. The
  // Program says which contribution starts the step's gradient and which completes it
  // (Task::grad_first, grad_last); the same arithmetic on every tier gives the same bits.
  const int steps = 3;
  const std::string base = "zero_stage: 3\ngradient_accumulation: 2\nvocabulary_tiles: 2\n";
  const Run device = train(base, steps);
  for (const char* where : {"offload: {params: cpu, gradients: cpu, optimizer: cpu}\n",
                            "offload: {gradients: nvme, params: nvme, optimizer: nvme}\n"}) {
    INFO(where);
    const Run other = train(base + where, steps);
    for (int s = 0; s < steps; ++s) CHECK(other.losses[size_t(s)] == device.losses[size_t(s)]);
    CHECK(other.master == device.master);
  }
}
