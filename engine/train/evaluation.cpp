#include "engine/train/evaluation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/timeline.hpp"

namespace zinf::engine {

Evaluator::Evaluator(TokenCorpus held_out, core::PlanResult forward, TrainingBackend& backend, int dp_rank, int dp_size,
                     int64_t batches, int64_t micro_batch, int64_t seq, uint64_t seed)
    : held_out_(std::move(held_out)), forward_(std::move(forward)), backend_(backend),
      executor_(forward_.program, dp_rank, backend), dp_rank_(dp_rank), dp_size_(dp_size), batches_(batches),
      micro_batch_(micro_batch), seq_(seq), seed_(seed) {
  if (!forward_.program.forward_only())
    throw std::logic_error("an Evaluator runs a forward-only Program (core::make_forward_plan)");
  if (batches_ < 1) throw std::invalid_argument(fmt::format("held-out batches must be at least 1, got {}", batches_));
  if (const auto broken = core::validate_program(forward_.program); !broken.empty())
    throw std::logic_error(fmt::format("the planner produced a forward-only Program that breaks its invariants ({}; a "
                                       "bug in zinf, please report it)",
                                       broken.front()));
  BatchLoader probe(held_out_, micro_batch_, seq_, dp_rank_, dp_size_, seed_);  // throws naming the data when too short
}

EvalStats Evaluator::evaluate(Collectives& world, int tensor_parallel, int64_t step) {
  const auto t0 = std::chrono::steady_clock::now();
  BatchLoader loader(held_out_, micro_batch_, seq_, dp_rank_, dp_size_, seed_);
  // Every rank runs as many forward passes (their collectives pair up); a pass past a rank's share
  // of the batches counts for nothing.
  const int64_t passes = (batches_ + dp_size_ - 1) / dp_size_;
  double sum = 0;
  EvalStats e;
  for (int64_t n = 0; n < passes; ++n) {
    std::vector<Batch> batch{loader.next()};
    backend_.begin_forward(forward_.program, std::move(batch));
    const core::Timeline tl = executor_.run_step();
    if (!checked_) {
      if (const auto check = core::check_timeline(forward_.program, tl, 1e-3); !check.ok())
        throw std::logic_error(fmt::format("the first held-out forward pass did not follow its Program: {} (a bug in "
                                           "zinf, please report it)",
                                           check.errors.front()));
      checked_ = true;
    }
    if (n * dp_size_ + dp_rank_ < batches_) sum += backend_.loss();
    for (size_t i = 0; i < 3; ++i) e.peak[i] = std::max(e.peak[i], executor_.peak_bytes()[i]);
  }
  double r[2] = {sum, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  world.all_reduce(r, 2, "held-out loss");
  e.step = step;
  e.batches = batches_;
  e.tokens = batches_ * micro_batch_ * seq_;
  e.loss = r[0] / double(batches_ * std::max(1, tensor_parallel));
  e.perplexity = std::exp(e.loss);
  e.seconds = r[1] / double(world.size());
  if (!std::isfinite(e.loss))
    throw std::runtime_error(fmt::format("step {}: the held-out loss is {}: the model's weights or the held-out data "
                                         "are damaged",
                                         step, e.loss));
  return e;
}

}  // namespace zinf::engine
