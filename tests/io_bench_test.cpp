// The recommendation of `zinf io-bench` (measure/io_bench.hpp): the deepest queue within 5% of the
// best setting, both directions weighed equally.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

#include "measure/io_bench.hpp"

using zinf::measure::IoBenchPoint;
using zinf::measure::pick_recommended;

TEST_CASE("io-bench recommends the deepest queue within 5% of the best setting", "[measure]") {
  const std::vector<IoBenchPoint> points{
      {1 << 20, 8, 2.00e9, 2.00e9},   // the best score
      {1 << 20, 32, 1.95e9, 1.95e9},  // 2.5% below it, deeper: picked
      {1 << 20, 64, 1.50e9, 2.40e9},  // deeper still, but 7.7% below the best (harmonic mean 1.85e9)
      {4 << 20, 32, 1.90e9, 1.92e9},  // as deep as the pick, lower score
  };
  const IoBenchPoint pick = pick_recommended(points);
  CHECK(pick.block == (1u << 20));
  CHECK(pick.qd == 32);
}

TEST_CASE("io-bench's score weighs a slow direction as the step meets it", "[measure]") {
  // Harmonic mean: one slow direction drags the score down more than a fast one lifts it.
  const IoBenchPoint lopsided{1 << 20, 8, 4.0e9, 1.0e9}, even{1 << 20, 8, 2.0e9, 2.0e9};
  CHECK(lopsided.score() == Approx(1.6e9));
  CHECK(pick_recommended(std::vector<IoBenchPoint>{lopsided, even}).write_bps == even.write_bps);
}

TEST_CASE("io-bench refuses to recommend from no measurements", "[measure]") {
  CHECK_THROWS_AS(pick_recommended({}), std::invalid_argument);
}
