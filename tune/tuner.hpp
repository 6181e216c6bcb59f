// The tuner: searches run configurations for a model on a cluster and ranks them by what the
// simulator predicts. The memory model (core/memory_model) is the constraint and a closed-form
// estimate of each lane's load orders the space; the planner and its idealized list schedule
// (core::estimate_step_time) judge the most promising ones, a local search over the schedule knobs
// refines the best of those, and the simulator runs only the finalists. Planning and simulating
// happen through TuneEvaluators, forked children by default (SimGrid's engine runs once per
// process); tests put plain functions in their place.
//
// What it searches: the tier of parameters (gradients with them), of optimizer states and of
// activation checkpoints, the checkpoint interval, the tiling factor (the smallest that fits),
// micro-batch and gradient accumulation for the global batch, the bound on live prefetched bytes,
// prefetch distances, optimizer sub-group size and timing, partitioning (bandwidth-centric;
// owner-based too on up to 16 ranks), the tensor-parallel degree (powers of two that divide the
// GPUs of a node, the heads and the widths; the global batch is split over the data-parallel ranks
// that remain), and for a mixture of experts the expert-parallel degree (powers of two that divide
// the experts and the data-parallel ranks, with ZeRO-3 and tensor parallelism 1, as the planner
// takes it). ZeRO stage and everything else come from the base config.
//
// Deterministic: nothing is drawn at random, ties go to the earlier candidate; only a time limit
// that cuts a stage short makes a result depend on the machine's speed. Not thread-safe (forks).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/model_spec.hpp"
#include "core/program.hpp"
#include "core/run_config.hpp"

namespace zinf::tune {

enum class TuneObjective {
  Throughput,  // samples/s on the nodes given
  Cost,        // GPU-seconds per sample, over node counts up to the nodes given (powers of two and it)
};

// The values each knob may take. Empty lists take the defaults of default_tune_space.
struct TuneSpace {
  std::vector<core::Tier> params_tiers;      // gradients live with the parameters ...
  std::optional<core::Tier> gradients_tier;  // ... unless this fixes their tier
  std::vector<core::Tier> optimizer_tiers;
  std::vector<int64_t> checkpoint_intervals; // 0: no checkpoints
  std::vector<core::Tier> checkpoint_tiers;
  std::vector<int64_t> tiling_factors;       // ascending; the smallest that fits is taken
  std::vector<int64_t> micro_batches;        // kept where they divide the global batch
  std::vector<double> live_bytes;            // descending; the largest that fits is taken
  std::vector<core::Partitioning> partitionings;
  std::vector<int64_t> tensor_parallels;     // kept where the model and the node allow them
  std::vector<int64_t> expert_parallels;     // kept where they divide the experts and the data-parallel ranks
  std::vector<int> node_counts;              // the Cost objective's cluster sizes
  // Local search over the schedule knobs of the best planned candidates.
  struct Prefetch {
    int64_t nvme, h2d, allgather;
  };
  std::vector<Prefetch> prefetch;
  std::vector<int64_t> sub_group_sizes;
  std::vector<core::OptimizerTiming> timings;
};

struct TuneRequest {
  core::ModelSpec model;
  core::HwProfile hw;
  int nodes = 1;
  core::RunConfig base;
  int64_t global_batch = 0;  // sequences per step; 0: ranks x base micro-batch x base accumulation
  TuneObjective objective = TuneObjective::Throughput;
  double time_limit = 0;     // seconds for the whole search; 0: none
  int plan_budget = 32;      // candidates planned before the local search (more only if none fits)
  int local_search_top = 2;  // planned candidates whose schedule knobs are searched
  int finalists = 4;         // simulated
  TuneSpace space;           // empty lists: defaults
  // Configurations simulated beside the finalists whatever their estimate, each with what it is:
  // what `zinf plan`, `sim` and `train` run for the base config (tune/auto_config.hpp), so that the
  // pick is never slower than it, and the whole activation choices the base config leaves open.
  std::vector<std::pair<std::string, core::RunConfig>> incumbents;
};

// One point of the search space.
struct TuneCandidate {
  core::RunConfig config;
  int nodes = 1;
  std::string describe() const;  // "params nvme, optimizer nvme, ckpt host/1, tiling 1, mb 2 x ga 1, ..."
};

// The closed-form estimate: seconds each lane of a rank is busy in one step, and the step time
// they add up to (lanes overlap; optimizer work after backward follows the rest).
struct LaneLoad {
  // compute, pcie_h2d, pcie_d2h, nvme_read, nvme_write, comm, cpu_optim (cores: shared-core profiles),
  // and compute+comm where gathers cannot be prefetched (twice the largest gathered operator exceeds
  // max_live_bytes: each waits for the operator before it)
  std::string lane;
  double seconds = 0;
};
struct LaneEstimate {
  std::vector<LaneLoad> lanes;
  double step_time = 0;
  std::string bottleneck;
  double flops_per_gpu = 0;
};
LaneEstimate estimate_lanes(const core::ModelSpec& model, const core::HwProfile& hw, int nodes,
                            const core::RunConfig& config);

// What planning or simulating one candidate gave.
struct TuneOutcome {
  bool ok = false;
  bool refused = false;      // the planner refused it (does not fit); else an error
  std::string message;       // why not ok
  double step_time = 0;      // idealized schedule, or simulated
  double tflops_per_gpu = 0; // simulated only
  int64_t tiling_factor = 1; // as planned
  core::PerTier peak{};      // per rank at the step's peak (planned), or as simulated
  std::vector<std::pair<std::string, double>> busy;  // simulated: resource -> busy fraction
};

// Both return one outcome per candidate, in order.
struct TuneEvaluators {
  std::function<std::vector<TuneOutcome>(const std::vector<TuneCandidate>&)> schedule;
  std::function<std::vector<TuneOutcome>(const std::vector<TuneCandidate>&)> simulate;
};
// Plans (and schedules, or simulates) each candidate in a forked child, `workers` at a time.
TuneEvaluators isolated_evaluators(const core::ModelSpec& model, const core::HwProfile& hw, int workers);
// Plans and schedules in this process (no SimGrid); for tests and cheap callers.
TuneOutcome schedule_in_process(const core::ModelSpec& model, const core::HwProfile& hw, const TuneCandidate& c);

struct TuneEntry {
  TuneCandidate candidate;
  LaneEstimate estimate;
  bool memory_fits = false;
  std::optional<TuneOutcome> planned;    // idealized schedule
  std::optional<TuneOutcome> simulated;
  std::string found_by;                  // "closed form", "local search: prefetch 1/1/1", ...
  // The objective's value from the best evidence at hand (simulated, else planned, else closed
  // form): seconds per step (Throughput) or GPU-seconds per sample (Cost). Lower is better.
  double score = 0;
  double samples_per_s = 0;
};

struct TuneReport {
  int64_t global_batch = 0;
  std::vector<TuneEntry> finalists;  // simulated, best first (failed simulations last)
  std::vector<TuneEntry> planned;    // every candidate the planner accepted, best first
  std::vector<std::string> not_searched;
  size_t enumerated = 0, memory_fit = 0, plans = 0, plans_refused = 0, simulations = 0;
  double seconds_enumerate = 0, seconds_plan = 0, seconds_simulate = 0, seconds_total = 0;
  bool time_limited = false;         // a stage stopped early for the time limit
};

// The space with defaults filled in for `req` (its lists where given).
TuneSpace default_tune_space(const TuneRequest& req);
// Every structural candidate of the space (no local-search variants), in search order before
// ranking, with the smallest fitting tiling and largest fitting live-bytes bound already chosen.
std::vector<TuneCandidate> enumerate_candidates(const TuneRequest& req, const TuneSpace& space);
// The same candidates of default_tune_space(req), each with its memory-model fit and closed-form
// estimate, in the order the search plans them: those the memory model admits by estimated
// objective, then the others, closest to fitting first. Closed forms only: microseconds each.
std::vector<TuneEntry> ranked_candidates(const TuneRequest& req);

// Progress of a stage: "plan" or "simulate", done of total.
using TuneProgress = std::function<void(const std::string& stage, size_t done, size_t total)>;

// Searches. Throws core::PlanError, naming the tier that is short for the closest candidate, when
// nothing fits; std::invalid_argument for a global batch the ranks cannot split.
TuneReport tune(const TuneRequest& req, const TuneEvaluators& eval, const TuneProgress& progress = {});

// The report as JSON (every planned candidate with its peak memory per tier, for the Pareto front).
std::string tune_report_json(const TuneRequest& req, const TuneReport& report);

}  // namespace zinf::tune
