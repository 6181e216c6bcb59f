// Trainer is `zinf train`: it plans the run (core::make_plan), refuses a plan that does not fit
// before touching any data, and then runs steps through the Executor and the GPT CPU backend, one
// rank per process (MPI ranks when launched by mpirun). It saves checkpoints through a
// CheckpointDir (engine/train/checkpoint_dir.hpp: never replaced before the new one is durable,
// checksummed, the directory locked for the run) and resumes from them exactly, on the same or a
// different number of ranks. A fresh run refuses a checkpoint directory that already holds a run's
// checkpoints unless told to resume or to overwrite. Every step holds the loss, the global
// gradient norm and the updated master weights to the divergence rule (engine/train/divergence.hpp:
// not finite, or orders of magnitude above their recent medians): a step that breaks it stops the
// run with TrainingDiverged. A state's soundness shows only in the loss of the step after it, so a
// checkpoint saved during the run becomes `latest` only once the next step has passed the rule; one
// that a diverging step condemns is set aside (<step>.diverged-K), and `latest` keeps naming the
// last state a step confirmed, which the first step of a resume recomputes exactly. A step is
// skipped only where DeepSpeed skips one: in fp16, when the scaled gradients overflow (the loss
// scale then falls: engine/train/loss_scaler.hpp); a skipped step is no divergence, and any other
// non-finite figure stops the run. A resume verifies the checkpoint whole and compares what it
// recorded (data seed, data, micro-batch, run config) with this run, refusing each difference
// unless told to allow changes. One Trainer per process; not thread-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/hwprofile.hpp"
#include "core/lr_schedule.hpp"
#include "core/model_spec.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "core/timeline.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/io/io_env.hpp"
#include "engine/model/hf_weights.hpp"
#include "engine/train/evaluation.hpp"

namespace zinf::engine {

// What to do with a checkpoint directory that already holds checkpoints.
enum class CheckpointStart {
  Fresh,      // refuse it (the default: an earlier run's checkpoints are never overwritten silently)
  Resume,     // continue from its `latest`
  Overwrite,  // start over; step directories it replaces that `latest` does not name are kept aside
};

// NaN or infinity in the loss, the gradient norm or the weights; the message names the step and
// the figures, and says that nothing was saved from it.
class TrainingDiverged : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct TrainerOptions {
  core::ModelSpec model;
  core::HwProfile hw;
  core::RunConfig config;
  core::LrSchedule lr_schedule;  // the config file's (formats/lr_schedule_reader.hpp); constant by default
  std::string config_source = "run config";  // where `config` came from (its file), for messages
  std::string data;              // text file, directory of text, or .bin token file; empty: fortunes
  std::string tokenizer;         // GPT-2 BPE files for text data (engine/data/bpe_tokenizer.hpp); empty: bytes
  // The held-out split that evaluate() measures: a file or directory of its own (as `data`), else the
  // last val_fraction of `data`'s tokens, which training then leaves out; neither: no evaluation.
  std::string val_data;
  double val_fraction = 0;
  int64_t eval_batches = 10;     // held-out micro-batches per evaluation, over all data-parallel ranks
  // Forward passes only (next_token_logits, as `zinf sample` runs them): no training data is read,
  // and step(), evaluate() and save_checkpoint() are refused.
  bool sampling = false;
  std::string nvme_dir;          // required when the plan puts a state on NVMe; rank r uses <dir>/rank<r>
  uint64_t data_seed = 1234;
  int64_t total_steps = 0;       // the run's length (--steps): what an `auto` length of the lr schedule means
  uint64_t init_seed = 1;
  std::string init_from;         // safetensors with Hugging Face names (GPT-2, Llama); empty: fresh init
  std::string checkpoint_dir;    // where save_checkpoint writes and resume reads; locked while the Trainer lives
  CheckpointStart start = CheckpointStart::Fresh;
  bool accept_unverified = false;  // resume from a checkpoint without checksums (--accept-unverified)
  bool allow_changes = false;      // resume with another seed, data, micro-batch or config (--allow-changes)
  // What every rank must share besides the model, config, seeds, plan and data the Trainer itself
  // compares (engine/comm/agreement.hpp): the command line's own (steps, zinf's version, ...).
  std::map<std::string, std::string> must_agree;
  unsigned adam_threads = 1;
  std::string backend = "cpu";   // cpu, cuda or auto (engine/backend/backend_select.hpp)
  IoEnv* env = nullptr;          // the checkpoint files' door to the OS; null: default_io_env()
  std::function<void(const std::string&)> note;  // messages for the user (rank 0); null: stderr
  // Decides the config's `auto` knobs before planning, given the model, the hwprofile as this
  // backend plans with it and the rank count; null: the planner's own `auto`. `zinf train` passes
  // tune/auto_config.hpp's closed form, so that it trains what `zinf plan` and `sim` plan.
  std::function<core::RunConfig(const core::ModelSpec&, const core::HwProfile&, int ranks, const core::RunConfig&)>
      resolve_auto;
};

struct StepStats {
  int64_t step = 0;              // 1-based, counted across resumes
  double loss = 0;               // mean over all ranks' micro-batches
  double grad_norm = 0;          // global, before clipping
  double lr = 0;                 // the learning rate this step's update used (the schedule's)
  double seconds = 0;            // wall time of the step on this rank
  double tokens_per_s = 0;       // all ranks together
  bool skipped = false;          // fp16: the gradients overflowed, so no update was made
  double loss_scale = 0;         // fp16: the loss scale this step ran with (0 in bf16 and fp32)
  core::PerTier peak{};          // this rank's peak bytes per tier as the Program accounts them
  int64_t device_arena_peak = -1;  // bytes the backend's device arena held at most (-1: no arena)
  core::Timeline timeline;       // this rank's measured step
};

// Memory sizes from the command line and the machine, applied to o.hw before planning, for every
// backend: device_gib > 0 is the device memory the plan may use (node.gpu.memory: the CPU backend's
// arena in host memory, the CUDA backend's on the GPU; either arena is the Program's device budget,
// this less the profile's reserve); host_gib > 0 caps the host tier; a profile of a CPU machine
// never plans more host memory than this machine has.
void size_for_this_machine(TrainerOptions& o, double device_gib, double host_gib);

// What the process-wide staging cache may map for one rank of this Program: its planned host peak,
// and on a backend whose device is host memory its device peak too, less the static bytes of those
// tiers (the homes of states kept between steps, which are arrays of their own, not cache blocks).
uint64_t staging_budget_bytes(const core::Program& program, const core::Plan& plan, bool device_in_host, int rank);

class Trainer {
public:
  // Compares what must be equal across the ranks before planning and again after planning and
  // loading the data (RanksDisagree); plans and sets up, and resumes when options.start is Resume.
  // Throws core::PlanError (with the plan's figures) if it does not fit, and std::runtime_error
  // naming the file or directory at fault for bad data or checkpoints, a locked directory, or an
  // unwritable checkpoint directory.
  Trainer(TrainerOptions options, Collectives& comm);
  ~Trainer();

  const core::Plan& plan() const;
  const core::Program& program() const;
  int64_t step_count() const;  // steps done so far (including those before a resume)
  int64_t skipped_steps() const;  // of those, fp16 steps skipped for an overflow
  bool scales_loss() const;       // whether the run trains in fp16 with a loss scale
  const char* backend() const;  // "cpu" or "cuda": the backend running the steps
  double rss_before_homes() const;  // this process's RSS just before the backend built the homes
  // The run's learning-rate schedule, its `auto` lengths decided (core/lr_schedule.hpp).
  const core::LrSchedule& lr_schedule() const;

  // Throws TrainingDiverged when the step's loss, gradient norm or updated weights are not finite.
  StepStats step();
  // Whether the run has a held-out split (TrainerOptions::val_data or val_fraction).
  bool evaluates() const;
  // Collective: the held-out loss of the model as it stands (engine/train/evaluation.hpp), through
  // the forward-only Program; nothing is trained. Throws std::logic_error when evaluates() is false.
  EvalStats evaluate();
  // The forward-only Program evaluate() runs (null without a held-out split).
  const core::Program* eval_program() const;
  // The logits of the token that follows `context` (its last seq tokens, when longer), one per
  // vocabulary entry: the model's forward pass through a forward-only Program over this run's tiers,
  // as evaluate() runs it. One process only (throws std::logic_error on more ranks, or under tensor
  // parallelism); throws std::invalid_argument on an empty context or a token outside the vocabulary.
  std::vector<float> next_token_logits(const std::vector<int32_t>& context);
  // Collective: whether `mine` is true on any rank (e.g. a signal that reached one of them).
  bool any_rank(bool mine);

  // Collective: every rank calls them. A checkpoint that is not `final` (one saved every N steps)
  // becomes `latest` once the next step passes the divergence rule; a final one (the end of a run,
  // a stop) at once. publish_pending() makes a waiting checkpoint `latest` without a next step.
  // The checkpoint holds the full optimizer state (so it loads on any number of ranks), the step
  // count, the data position and the lr schedule's state (the schedule and the step it reached, in
  // meta.json). Both stream: each parameter
  // group's tensors are gathered from the ranks' tiers and written by rank 0 before the next group
  // is read, and a resume loads the file a group at a time into the tiers, so host memory holds
  // about one group's master, m and v (the CUDA backend still gathers and loads its whole state).
  std::string save_checkpoint(bool final = true);  // returns the directory written
  void publish_pending();
  // Rank 0 writes the master weights, F32, as one file.
  void export_safetensors(const std::string& path) { export_weights(ExportTarget{path, {}, false}); }
  // The same as a Hugging Face folder or one file, in the dtype asked for (engine/model/hf_weights.hpp).
  void export_weights(const ExportTarget& target);

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace zinf::engine
