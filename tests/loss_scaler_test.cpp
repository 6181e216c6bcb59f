// engine/train/loss_scaler.hpp: fp16's loss scale as DeepSpeed's DynamicLossScaler moves it (growth
// after a window of clean steps, halving once the hysteresis is spent, the minimum), a static scale,
// the count of skipped steps, and its state through a checkpoint's JSON.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/train/loss_scaler.hpp"

using zinf::core::LossScaleConfig;
using zinf::engine::LossScaler;
using zinf::engine::LossScaleAtMinimum;

namespace {

LossScaleConfig config(int64_t power, int64_t window, int64_t hysteresis, double min_scale = 1) {
  LossScaleConfig c;
  c.initial_scale_power = power;
  c.window = window;
  c.hysteresis = hysteresis;
  c.min_scale = min_scale;
  return c;
}

}  // namespace

TEST_CASE("loss scaler: the scale starts at 2^initial_scale_power and doubles after each window of clean steps",
          "[loss_scaler]") {
  LossScaler s(config(16, 3, 2));
  CHECK(s.scale() == 65536);
  CHECK(s.dynamic());
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    CHECK(s.update(false).empty());
    scales.push_back(s.scale());
  }
  // DeepSpeed: after step i (0-based) the stable interval is i; it doubles when i % window == 0, i > 0.
  CHECK(scales == std::vector<double>{65536, 65536, 65536, 131072, 131072, 131072, 262144});
  CHECK(s.skipped() == 0);
}

TEST_CASE("loss scaler: an overflow spends hysteresis first, then halves the scale; both skip the step",
          "[loss_scaler]") {
  LossScaler s(config(10, 1000, 3));
  CHECK_THAT(s.update(true), Catch::Contains("hysteresis 2 left"));
  CHECK(s.scale() == 1024);
  s.update(true);
  CHECK(s.hysteresis_left() == 1);
  CHECK(s.scale() == 1024);
  CHECK_THAT(s.update(true), Catch::Contains("1024 -> 512"));
  CHECK(s.scale() == 512);
  s.update(true);  // hysteresis stays spent until a window of clean steps refills it
  CHECK(s.scale() == 256);
  CHECK(s.skipped() == 4);
}

TEST_CASE("loss scaler: a clean window after an overflow grows the scale and refills the hysteresis", "[loss_scaler]") {
  LossScaler s(config(8, 2, 2));
  s.update(true);  // iter 0: hysteresis 2 -> 1
  s.update(true);  // iter 1: halved to 128
  CHECK(s.scale() == 128);
  s.update(false);  // iter 2: 0 stable steps before it
  s.update(false);  // iter 3: 1
  CHECK(s.scale() == 128);
  s.update(false);  // iter 4: 2 stable steps, a whole window: doubled, hysteresis refilled
  CHECK(s.scale() == 256);
  CHECK(s.hysteresis_left() == 2);
}

TEST_CASE("loss scaler: consecutive hysteresis refills after every clean step", "[loss_scaler]") {
  LossScaleConfig c = config(8, 100, 2);
  c.consecutive_hysteresis = true;
  LossScaler s(c);
  s.update(true);
  CHECK(s.hysteresis_left() == 1);
  s.update(false);
  CHECK(s.hysteresis_left() == 2);
  s.update(true);  // absorbed again, not halved
  CHECK(s.scale() == 256);
}

TEST_CASE("loss scaler: the scale never falls below min_loss_scale, and an overflow at the minimum stops the run",
          "[loss_scaler]") {
  LossScaler s(config(2, 1000, 1, 3));  // 4, min 3
  s.update(true);
  CHECK(s.scale() == 3);  // max(4 / 2, 3)
  CHECK_THROWS_AS(s.update(true), LossScaleAtMinimum);
}

TEST_CASE("loss scaler: a static loss_scale never changes, and an overflow still skips the step", "[loss_scaler]") {
  LossScaleConfig c = config(16, 1, 1);
  c.static_scale = 128;
  LossScaler s(c);
  CHECK_FALSE(s.dynamic());
  CHECK(s.scale() == 128);
  for (int i = 0; i < 5; ++i) s.update(false);
  CHECK(s.scale() == 128);
  CHECK_THAT(s.update(true), Catch::Contains("skipped"));
  CHECK(s.scale() == 128);
  CHECK(s.skipped() == 1);
}

TEST_CASE("loss scaler: the state round-trips through JSON and a damaged one is refused by field", "[loss_scaler]") {
  LossScaler a(config(12, 3, 2));
  for (bool o : {false, true, false, false, true, true, false}) a.update(o);
  LossScaler b(config(12, 3, 2));
  b.from_json(a.to_json(), "meta.json");
  CHECK(b.to_json() == a.to_json());
  for (bool o : {false, false, false, true, false}) {
    a.update(o);
    b.update(o);
    CHECK(a.scale() == b.scale());
  }
  auto bad = a.to_json();
  bad["scale"] = -1;
  CHECK_THROWS_WITH(b.from_json(bad, "meta.json"), Catch::Contains("loss_scaler.scale"));
  bad = a.to_json();
  bad["hysteresis_left"] = 7;
  CHECK_THROWS_WITH(b.from_json(bad, "meta.json"), Catch::Contains("hysteresis_left"));
  bad = a.to_json();
  bad.erase("iter");
  CHECK_THROWS_WITH(b.from_json(bad, "meta.json"), Catch::Contains("loss_scaler.iter"));
}
