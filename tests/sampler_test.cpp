// The sampler of `zinf sample` (engine/train/sampler.hpp): greedy at temperature 0, top-k keeps the
// K likeliest, draws follow softmax(logits / T), a seed repeats its draws, bad input is refused.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "engine/train/sampler.hpp"

using zinf::engine::Sampler;

TEST_CASE("at temperature 0 the sampler takes the largest logit, the lowest id on a tie", "[sample]") {
  Sampler greedy({0.0, 0}, 1);
  CHECK(greedy.next(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}) == 1);
  CHECK(greedy.next(std::vector<float>{3.0f, 1.0f, 3.0f}) == 0);
  Sampler top1({5.0, 1}, 1);  // top-k 1 is greedy at any temperature
  for (int i = 0; i < 20; ++i) CHECK(top1.next(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}) == 1);
}

TEST_CASE("draws follow softmax(logits / T) over the top k, and a seed repeats them", "[sample]") {
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  const int n = 40000;
  std::array<int, 4> counts{};
  Sampler s({1.0, 0}, 42);
  for (int i = 0; i < n; ++i) ++counts[size_t(s.next(logits))];
  CHECK(double(counts[0]) / n == Approx(0.5).margin(0.015));
  CHECK(double(counts[1]) / n == Approx(0.3).margin(0.015));
  CHECK(double(counts[3]) / n == Approx(0.05).margin(0.01));
  // Top 2: the two likeliest, renormalized (0.5 : 0.3); the others never.
  std::array<int, 4> top2{};
  Sampler t({1.0, 2}, 42);
  for (int i = 0; i < n; ++i) ++top2[size_t(t.next(logits))];
  CHECK(top2[2] + top2[3] == 0);
  CHECK(double(top2[0]) / n == Approx(0.625).margin(0.015));
  // A high temperature flattens: at T = 100 the four come out nearly alike.
  std::array<int, 4> hot{};
  Sampler h({100.0, 0}, 7);
  for (int i = 0; i < n; ++i) ++hot[size_t(h.next(logits))];
  for (int c : hot) CHECK(double(c) / n == Approx(0.25).margin(0.02));
  Sampler a({1.0, 0}, 9), b({1.0, 0}, 9);
  for (int i = 0; i < 100; ++i) CHECK(a.next(logits) == b.next(logits));
}

TEST_CASE("the sampler refuses a bad temperature or top-k, and logits that are not finite", "[sample]") {
  CHECK_THROWS_AS(Sampler({-1.0, 0}, 1), std::invalid_argument);
  CHECK_THROWS_AS(Sampler({std::numeric_limits<double>::quiet_NaN(), 0}, 1), std::invalid_argument);
  CHECK_THROWS_AS(Sampler({1.0, -3}, 1), std::invalid_argument);
  Sampler s({1.0, 0}, 1);
  CHECK_THROWS_WITH(s.next(std::vector<float>{1.0f, std::numeric_limits<float>::quiet_NaN()}), Catch::Contains("token 1"));
  CHECK_THROWS_AS(s.next(std::vector<float>{}), std::invalid_argument);
}
