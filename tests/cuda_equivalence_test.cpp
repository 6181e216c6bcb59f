// The CUDA backend against the CPU backend: the same Program (gpt-tiny, same data, same init),
// trained for ZINF_EQUIV_STEPS steps (default 10) on each, must give the same losses within bf16
// tolerance: the GPU's linear layers multiply bf16-rounded activations (the CPU multiplies fp32),
// which moves a loss by well under 1%; we allow 1% relative (about 2.5 bf16 ulps). Both columns are
// printed for every configuration. Skipped without a CUDA device (tests/gpu_catch_main.cpp).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/hwprofile.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/train/trainer.hpp"
#include "test_paths.hpp"

using namespace zinf;
namespace fs = std::filesystem;

namespace {

std::vector<double> train(const std::string& backend, const std::string& config, int steps) {
  const fs::path dir = fs::temp_directory_path() / ("zinf_equiv_" + backend + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "nvme");
  engine::TrainerOptions o;
  o.model = core::load_model_spec(test::source("models/gpt-tiny.yaml"));
  o.hw = core::load_hwprofile(test::source("hwprofiles/cpu-dev.yaml"));
  o.config = core::parse_run_config(config, "equivalence");
  o.nvme_dir = (dir / "nvme").string();
  o.backend = backend;
  // Both backends' device arena is the Program's device budget: cpu-dev's 2 GiB less its reserve.
  std::vector<double> losses;
  {
    engine::LocalCollectives comm;
    engine::Trainer trainer(o, comm);
    REQUIRE(std::string(trainer.backend()) == backend);
    for (int s = 0; s < steps; ++s) losses.push_back(trainer.step().loss);
  }
  fs::remove_all(dir);
  return losses;
}

int steps_to_run() {
  const char* env = std::getenv("ZINF_EQUIV_STEPS");
  return env ? std::max(1, std::atoi(env)) : 10;
}

void compare(const std::string& config) {
  const int steps = steps_to_run();
  const auto cpu = train("cpu", config, steps);
  const auto gpu = train("cuda", config, steps);
  std::printf("\nconfig: %s", config.c_str());
  std::printf("%6s %12s %12s %10s\n", "step", "cpu loss", "cuda loss", "rel diff");
  for (int s = 0; s < steps; ++s)
    std::printf("%6d %12.6f %12.6f %10.2e\n", s + 1, cpu[size_t(s)], gpu[size_t(s)],
                std::fabs(gpu[size_t(s)] - cpu[size_t(s)]) / std::fabs(cpu[size_t(s)]));
  std::fflush(stdout);
  INFO(config);
  for (int s = 0; s < steps; ++s) CHECK(gpu[size_t(s)] == Approx(cpu[size_t(s)]).epsilon(1e-2));
}

}  // namespace

TEST_CASE("cuda equivalence: everything on the device (device Adam)", "[cuda][equivalence]") {
  compare("zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n");
}

TEST_CASE("cuda equivalence: parameters and optimizer states on NVMe, checkpoints in host memory, clipping",
          "[cuda][equivalence]") {
  compare("zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: host}\n"
          "optimizer: {lr: 1.0e-3, grad_clip: 1.0, sub_group_size: 20000}\n");
}

TEST_CASE("cuda equivalence: tiled linears, CPU Adam, checkpoints on NVMe, two micro-batches", "[cuda][equivalence]") {
  compare("gradient_accumulation: 2\nzero_stage: 3\noffload: {params: cpu, optimizer: cpu}\ntiling_factor: 4\n"
          "activation_checkpoint: {interval: 1, tier: nvme}\n");
}

TEST_CASE("cuda equivalence: owner-based partitioning", "[cuda][equivalence]") {
  compare("zero_stage: 3\npartitioning: owner-based\noffload: {optimizer: cpu}\n"
          "activation_checkpoint: {interval: 1, tier: device}\n");
}
