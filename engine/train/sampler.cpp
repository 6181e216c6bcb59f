#include "engine/train/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "engine/splitmix.hpp"

namespace zinf::engine {

Sampler::Sampler(SamplingOptions options, uint64_t seed) : options_(options), state_(seed) {
  if (!std::isfinite(options_.temperature) || options_.temperature < 0)
    throw std::invalid_argument(fmt::format("temperature must be 0 (greedy) or positive, got {}", options_.temperature));
  if (options_.top_k < 0) throw std::invalid_argument(fmt::format("top-k must be 0 (all) or positive, got {}", options_.top_k));
}

int32_t Sampler::next(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("sampling from no logits");
  for (size_t i = 0; i < logits.size(); ++i)
    if (!std::isfinite(logits[i]))
      throw std::invalid_argument(fmt::format("the logit of token {} is {}: the model's weights are damaged", i, logits[i]));
  // Candidates by logit, largest first (the lower id first on ties): the greedy pick is the first.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = options_.top_k > 0 ? std::min(size_t(options_.top_k), order.size()) : order.size();
  const auto larger = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(), larger);
  if (options_.temperature == 0 || k == 1) return order.front();
  // softmax(logits / T) over the k candidates, shifted by the largest for range.
  const double top = logits[size_t(order.front())];
  std::vector<double> weight(k);
  double total = 0;
  for (size_t i = 0; i < k; ++i) total += weight[i] = std::exp((double(logits[size_t(order[i])]) - top) / options_.temperature);
  // A uniform draw in [0, total) from the top 53 bits of the stream.
  const double u = double(splitmix64_next(state_) >> 11) * 0x1.0p-53 * total;
  double sum = 0;
  for (size_t i = 0; i < k; ++i)
    if (u < (sum += weight[i])) return order[i];
  return order[k - 1];  // u within rounding of total
}

}  // namespace zinf::engine
