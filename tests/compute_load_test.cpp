// ComputeLoad (measure/compute_load.hpp), the GEMM load behind `zinf io-bench --compute-load`.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "measure/compute_load.hpp"

using zinf::measure::ComputeLoad;

TEST_CASE("the compute load reports a GEMM rate alone and while it ran, and nothing when never started", "[measure]") {
  ComputeLoad idle;
  CHECK(idle.stop() == 0);
  ComputeLoad load;
  const double alone = load.rate_alone(0.05);
  CHECK(alone >= ComputeLoad::kFlopsPerCall / 60.0);  // at least one call, and it finished
  load.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double during = load.stop();
  CHECK(during > 0);  // stop() waits for the call in flight, which is counted
  CHECK(load.stop() == 0);  // stopped already
}
