// A training run's held-out loss, computed between its steps through the same Program machinery as
// the steps: the forward-only Program (core::make_forward_plan over the training plan's decisions,
// the training states counted beside it) run by the training backend on its own homes, one held-out
// micro-batch per run, with no gradient kept and no state changed. Each data-parallel rank takes its
// share of the batches (global batch g goes to rank g mod D, as BatchLoader deals them) and the
// losses are summed over the ranks. The batches are the first ones of the held-out split in the
// loader's order for the run's seed: the same every time, so evaluations compare across a run.
// An Evaluator belongs to its Trainer and is used from one thread; evaluate() is collective.
#pragma once
#include <cstdint>
#include <memory>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "engine/backend/training_backend.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"

namespace zinf::engine {

struct EvalStats {
  int64_t step = 0;        // steps done when it ran
  double loss = 0;         // mean cross-entropy over the held-out tokens
  double perplexity = 0;   // exp(loss)
  int64_t batches = 0;     // held-out micro-batches, all ranks together
  int64_t tokens = 0;      // predicted tokens in them
  double seconds = 0;      // wall time, the mean over the ranks
  core::PerTier peak{};    // this rank's peak bytes per tier in its forward passes, as the Program counts them
};

class Evaluator {
public:
  // `forward` is the forward-only Program over `backend`'s units; `batches` the held-out micro-batches
  // per evaluation over all data-parallel ranks (dp_rank of dp_size); `micro_batch` x `seq` tokens each.
  // Throws std::runtime_error naming the held-out data when it holds no whole window of seq + 1 tokens.
  Evaluator(TokenCorpus held_out, core::PlanResult forward, TrainingBackend& backend, int dp_rank, int dp_size,
            int64_t batches, int64_t micro_batch, int64_t seq, uint64_t seed);

  const core::PlanResult& forward() const { return forward_; }
  const TokenCorpus& held_out() const { return held_out_; }

  // Collective over `world` (every rank of the job, whose tensor-parallel groups of `tensor_parallel`
  // ranks hold the same losses). Leaves the backend ready for its next begin_step.
  EvalStats evaluate(Collectives& world, int tensor_parallel, int64_t step);

private:
  TokenCorpus held_out_;
  core::PlanResult forward_;
  TrainingBackend& backend_;
  Executor executor_;
  int dp_rank_, dp_size_;
  int64_t batches_, micro_batch_, seq_;
  uint64_t seed_;
  bool checked_ = false;  // the first forward pass's Timeline was checked against the Program
};

}  // namespace zinf::engine
