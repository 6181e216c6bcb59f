// Trainer is `zinf train`: it plans the run (core::make_plan), refuses a plan that does not fit
// before touching any data, and then runs steps through the Executor and the GPT CPU backend, one
// rank per process (MPI ranks when launched by mpirun). It saves checkpoints atomically (a new
// directory written, fsynced and renamed, then the `latest` pointer replaced) and resumes from them
// exactly, on the same or a different number of ranks. One Trainer per process; not thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "core/timeline.hpp"
#include "engine/comm/collectives.hpp"

namespace zinf::engine {

struct TrainerOptions {
  core::ModelSpec model;
  core::HwProfile hw;
  core::RunConfig config;
  std::string data;              // text file, directory of text, or .bin token file; empty: fortunes
  std::string nvme_dir;          // required when the plan puts a state on NVMe; rank r uses <dir>/rank<r>
  uint64_t data_seed = 1234;
  uint64_t init_seed = 1;
  std::string init_from;         // safetensors with Hugging Face GPT-2 names; empty: GPT-2 init
  std::string checkpoint_dir;    // where save_checkpoint writes and resume reads
  unsigned adam_threads = 1;
  std::string backend = "cpu";   // cpu, cuda or auto (engine/exec/backend_select.hpp)
  uint64_t device_memory = 0;    // cuda: device arena bytes; 0: the free memory less a reserve
};

struct StepStats {
  int64_t step = 0;              // 1-based, counted across resumes
  double loss = 0;               // mean over all ranks' micro-batches
  double grad_norm = 0;          // before clipping, when clipping is on
  double seconds = 0;            // wall time of the step on this rank
  double tokens_per_s = 0;       // all ranks together
  core::PerTier peak{};          // this rank's peak bytes per tier as the Program accounts them
  int64_t device_arena_peak = -1;  // bytes the backend's device arena held at most (-1: no arena)
  core::Timeline timeline;       // this rank's measured step
};

class Trainer {
public:
  // Plans and sets up; throws core::PlanError (with the plan's figures) if it does not fit, and
  // std::runtime_error naming the file or directory at fault for bad data or checkpoints.
  Trainer(TrainerOptions options, Collectives& comm);
  ~Trainer();

  const core::Plan& plan() const;
  const core::Program& program() const;
  int64_t step_count() const;  // steps done so far (including those before a resume)
  const char* backend() const;  // "cpu" or "cuda": the backend running the steps

  StepStats step();

  // Collective: every rank calls them. The checkpoint holds the full optimizer state (so it loads
  // on any number of ranks), the step count and the data position.
  std::string save_checkpoint();              // returns the directory written
  void resume();                               // from <checkpoint_dir>/latest
  void export_safetensors(const std::string& path);  // rank 0 writes the master weights

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace zinf::engine
