// The embedding and the LM head tiled along the vocabulary, over MPI ranks: each configuration trains
// twice on the same ranks, untiled (vocabulary_tiles: 1) and in vocabulary tiles, and the two must
// agree: every loss within 1e-6 relative and the exported weights within 1e-3 of each group's
// change over the run (the head's input gradient sums the vocabulary in tiles, another order, and
// OpenBLAS rounds a tile's GEMM as its shape has it; tests/vocabulary_exact_test.cpp holds the
// first loss bitwise with the reference kernels). Each tile's gradient is reduce-scattered over the
// data-parallel ranks before the next tile's, the tied weight's two uses each once.
// Data parallel over every rank; tensor parallel 2 (each rank's share of the vocabulary in tiles,
// the loss's statistics all-reduced over the group); an untied head; NVMe states with accumulation.
// Usage: mpirun -np N mpi_vocabulary_check (N = 2 or 4). Prints "N passed, M failed".
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/model/safetensors.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "mpi_check.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using mpi_check::expect;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 5;

struct Case {
  const char* name;
  const char* config;  // run config body; tensor_parallel and vocabulary_tiles are added
  int tensor_parallel = 1;
  int tiles = 4;
  bool untied = false;
};

const Case kCases[] = {
    {"data parallel, resident", "zero_stage: 3\noptimizer: {lr: 1.0e-3}\n", 1, 4},
    {"data parallel, NVMe states, accumulation, untied head",
     "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\ngradient_accumulation: 2\noptimizer: {lr: 1.0e-3}\n", 1, 3, true},
    {"tensor parallel 2, gradients and optimizer on the host",
     "zero_stage: 3\noffload: {gradients: cpu, optimizer: cpu}\noptimizer: {lr: 1.0e-3}\n", 2, 3},
    {"tensor parallel 2, untied head", "zero_stage: 3\noptimizer: {lr: 1.0e-3}\n", 2, 4, true},
};

engine::TrainerOptions options(const Case& c, int tiles, const fs::path& dir) {
  engine::TrainerOptions o;
  o.model = core::load_model_spec(std::string(ZINF_SOURCE_DIR) + "/models/gpt-tiny.yaml");
  if (c.untied) o.model.tied_embeddings = false;
  o.hw = core::load_hwprofile(std::string(ZINF_SOURCE_DIR) + "/hwprofiles/cpu-dev.yaml");
  o.config = core::parse_run_config(
      fmt::format("{}tensor_parallel: {}\nvocabulary_tiles: {}\n", c.config, c.tensor_parallel, tiles), "vocabulary-test");
  fs::create_directories(dir / "nvme");
  o.nvme_dir = (dir / "nvme").string();
  return o;
}

struct Trained {
  std::vector<double> losses;
  fs::path weights;
};

Trained train(const Case& c, int tiles, engine::Collectives& comm, const fs::path& dir) {
  const fs::path mine = dir / fmt::format("{}_tiles{}_rank{}", &c - kCases, tiles, comm.rank());
  Trained out;
  out.weights = dir / fmt::format("{}_tiles{}.safetensors", &c - kCases, tiles);
  engine::Trainer t(options(c, tiles, mine), comm);
  for (int s = 0; s < kSteps; ++s) out.losses.push_back(t.step().loss);
  t.export_safetensors(out.weights.string());
  return out;
}

}  // namespace

int main() {
  auto comm = engine::make_collectives(std::chrono::seconds(60));
  const int N = comm->size();
  if (N != 2 && N != 4) {
    fmt::print(stderr, "run with 2 or 4 ranks\n");
    return 2;
  }
  const fs::path dir = mpi_check::job_dir(*comm, "zinf_mpi_vocabulary");
  try {
    for (const Case& c : kCases) {
      const Trained whole = train(c, 1, *comm, dir);
      const Trained tiled = train(c, c.tiles, *comm, dir);
      comm->barrier("both runs done");
      if (comm->rank() == 0) {
        for (int s = 0; s < kSteps; ++s)
          expect(std::fabs(tiled.losses[size_t(s)] - whole.losses[size_t(s)]) <= 1e-6 * std::fabs(whole.losses[size_t(s)]),
                 fmt::format("{} on {} ranks: step {}: loss {:.9f} in tiles, {:.9f} untiled", c.name, N, s + 1,
                             tiled.losses[size_t(s)], whole.losses[size_t(s)]));
        const core::ModelGraph graph = models::build_gpt(options(c, 1, dir / "graph").model, 1);
        const auto a = engine::load_gpt2_safetensors(tiled.weights.string(), graph);
        const auto b = engine::load_gpt2_safetensors(whole.weights.string(), graph);
        const auto init = engine::Gpt2(graph).init_params(1);
        double worst = 0;
        for (size_t g = 0; g < b.size(); ++g) {
          double d2 = 0, moved = 0;
          for (size_t i = 0; i < b[g].size(); ++i) {
            d2 += std::pow(double(a[g][i]) - double(b[g][i]), 2);
            moved += std::pow(double(b[g][i]) - double(init[g][i]), 2);
          }
          if (moved > 0) worst = std::max(worst, std::sqrt(d2 / moved));
        }
        expect(worst < 1e-3, fmt::format("{} on {} ranks: weights in tiles differ by {:.2e} of their change", c.name, N, worst));
        fmt::print("{} on {} ranks: losses {:.7f} .. {:.7f}, {} vocabulary tiles against untiled: first loss {:.1e} "
                   "apart, weights {:.2e} of their change\n",
                   c.name, N, whole.losses.front(), whole.losses.back(), c.tiles,
                   std::fabs(tiled.losses[0] - whole.losses[0]) / whole.losses[0], worst);
      }
      comm->barrier("case done");
    }
    if (comm->rank() == 0) fmt::print("{} passed, {} failed\n", mpi_check::passed, mpi_check::failed);
    return mpi_check::finish(*comm, dir);
  } catch (const std::exception& e) {
    comm->abort(e.what());
  }
}
