// Choosing the next token from a model's logits, as `zinf sample` does: greedy at temperature 0,
// otherwise a draw from softmax(logits / temperature) over the top_k largest (all when top_k is 0),
// from a splitmix64 stream, so that a seed gives the same text on every machine.
#pragma once
#include <cstdint>
#include <span>

namespace zinf::engine {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the largest logit, the lowest id on ties)
  int64_t top_k = 0;         // 0: every token
};

class Sampler {
 public:
  // Throws std::invalid_argument on a negative or non-finite temperature or a negative top_k.
  Sampler(SamplingOptions options, uint64_t seed);

  // The next token's id. Throws std::invalid_argument on empty logits, or when a logit is not finite
  // (a damaged model: named by its id).
  int32_t next(std::span<const float> logits);

 private:
  SamplingOptions options_;
  uint64_t state_;
};

}  // namespace zinf::engine
