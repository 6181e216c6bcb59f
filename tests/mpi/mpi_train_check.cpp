// ZeRO-3 training over MPI ranks, checked against a single-process run of the same global batch:
// N ranks with 4/N micro-batches each see exactly the micro-batches one rank sees with 4, so the
// losses must agree to floating-point tolerance (only reduction order differs). Also checks that
// a checkpoint written by N ranks resumes bitwise on N ranks and re-shards onto one process, and
// that every rank's device arena peaks within 10 % of the Program's device peak, and that the held-out
// loss, each rank evaluating its share of the batches, is the single process's.
// Usage: mpirun -np N mpi_train_check [--owner-based] [--resume]. Prints "N passed, M failed".
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <vector>
#include <filesystem>

#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "mpi_check.hpp"
#include "engine/train/trainer.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using mpi_check::expect;
namespace fs = std::filesystem;

namespace {

// Gradients are summed in a different order over ranks than over micro-batches, and each sum is
// rounded to bf16 when stored: a last-bit difference in fp32 can move a gradient by one bf16 ulp
// (2^-8 relative), which shows in the loss at about 1e-5..1e-4 relative after a few steps.
constexpr double kTolerance = 2e-4;

engine::TrainerOptions options(int ga, bool owner_based, const fs::path& dir) {
  engine::TrainerOptions o;
  o.model = core::load_model_spec(std::string(ZINF_SOURCE_DIR) + "/models/gpt-tiny.yaml");
  o.hw = core::load_hwprofile(std::string(ZINF_SOURCE_DIR) + "/hwprofiles/cpu-dev.yaml");
  o.config = core::parse_run_config(
      fmt::format("zero_stage: 3\npartitioning: {}\noffload: {{params: nvme, optimizer: nvme}}\n"
                  "activation_checkpoint: {{interval: 1, tier: host}}\ngradient_accumulation: {}\n"
                  "optimizer: {{lr: 1.0e-3, grad_clip: 1.0, sub_group_size: 30000}}\n",
                  owner_based ? "owner-based" : "bandwidth-centric", ga),
      "mpi-test");
  fs::create_directories(dir / "nvme");
  o.nvme_dir = (dir / "nvme").string();
  o.checkpoint_dir = (dir / "ckpt").string();
  o.val_fraction = 0.1;  // a held-out tail, evaluated over the ranks (each its share of the batches)
  o.eval_batches = 4;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  bool owner_based = false, resume = false;
  for (int i = 1; i < argc; ++i) {
    owner_based |= std::string(argv[i]) == "--owner-based";
    resume |= std::string(argv[i]) == "--resume";
  }
  auto comm = engine::make_collectives(std::chrono::seconds(60));
  const int N = comm->size();
  if (4 % N != 0) {
    fmt::print(stderr, "run with 1, 2 or 4 ranks\n");
    return 2;
  }
  // One directory for the whole job, named by rank 0's pid.
  const fs::path dir = mpi_check::job_dir(*comm, "zinf_mpi_train");
  const int steps = 10;
  try {
    std::vector<double> losses;
    double held_out = 0;  // the held-out loss after the last step, over the N ranks
    {
      engine::Trainer t(options(4 / N, owner_based, dir / "mpi"), *comm);
      double arena = 0;
      for (int s = 0; s < steps; ++s) {
        const auto st = t.step();
        losses.push_back(st.loss);
        arena = std::max(arena, double(st.device_arena_peak));
        if (resume && s == 4) t.save_checkpoint();
      }
      held_out = t.evaluate().loss;
      // Every rank's device arena within 10 % of the Program's device peak (the worst rank's).
      const double planned = core::at(t.plan().peak_bytes, core::Tier::Device);
      std::vector<double> peaks(static_cast<size_t>(N));
      comm->all_gather(&arena, sizeof(double), peaks.data(), "arena peaks");
      const double worst = *std::max_element(peaks.begin(), peaks.end());
      expect(arena <= 1.1 * planned, fmt::format("rank {}: device arena peaked at {:.0f} bytes, the Program counts {:.0f}",
                                                 comm->rank(), arena, planned));
      expect(worst >= 0.9 * planned, fmt::format("the largest device arena peak {:.0f} bytes is under 90 % of the "
                                                 "Program's {:.0f}", worst, planned));
    }
    if (resume) {  // the same N resumes bitwise from the checkpoint after step 5
      auto o = options(4 / N, owner_based, dir / "mpi");
      o.start = engine::CheckpointStart::Resume;
      engine::Trainer t(o, *comm);
      expect(t.step_count() == 5, "resumed at step 5");
      for (int s = 5; s < steps; ++s) {
        const double l = t.step().loss;
        expect(l == losses[size_t(s)], fmt::format("step {} after resume on {} ranks: {} vs {}", s + 1, N, l, losses[size_t(s)]));
      }
    }
    comm->barrier("mpi run done");
    if (comm->rank() == 0) {
      engine::LocalCollectives local;
      engine::Trainer t(options(4, owner_based, dir / "local"), local);
      if (resume) {  // re-shard: one process loads what N ranks wrote
        auto o = options(4, owner_based, dir / "reshard");
        o.checkpoint_dir = (dir / "mpi" / "ckpt").string();
        o.start = engine::CheckpointStart::Resume;
        o.allow_changes = true;  // the same global batch as micro-batches of 4 on one rank
        engine::Trainer r(o, local);
        for (int s = 5; s < steps; ++s) {
          const double l = r.step().loss;
          expect(std::fabs(l - losses[size_t(s)]) <= kTolerance * std::fabs(losses[size_t(s)]),
                 fmt::format("step {} re-sharded onto 1 process: {} vs {}", s + 1, l, losses[size_t(s)]));
        }
      }
      for (int s = 0; s < steps; ++s) {
        const double l = t.step().loss;
        expect(std::fabs(l - losses[size_t(s)]) <= kTolerance * std::fabs(l),
               fmt::format("step {}: {} ranks {} vs 1 process {}", s + 1, N, losses[size_t(s)], l));
      }
      const double local_held_out = t.evaluate().loss;
      expect(std::fabs(local_held_out - held_out) <= kTolerance * local_held_out,
             fmt::format("held-out loss: {} ranks {} vs 1 process {}", N, held_out, local_held_out));
      fmt::print("losses on {} ranks ({}): first {:.6f} last {:.6f}\n", N, owner_based ? "owner-based" : "bandwidth-centric",
                 losses.front(), losses.back());
      fmt::print("{} passed, {} failed\n", mpi_check::passed, mpi_check::failed);
    }
    return mpi_check::finish(*comm, dir);
  } catch (const std::exception& e) {
    comm->abort(e.what());
  }
}
