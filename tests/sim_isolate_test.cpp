// Child processes for simulations: results and errors come back to the parent, and parallel
// jobs each report once, whatever order they end in.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>
#include <stdexcept>
#include <string>

#include "sim/isolate.hpp"

using namespace zinf;

TEST_CASE("a child's result and a child's exception come back to the parent") {
  CHECK(sim::run_isolated([] { return std::string(100000, 'x'); }).size() == 100000);
  CHECK(sim::run_isolated([] { return std::to_string(::getpid()); }) != std::to_string(::getpid()));
  CHECK_THROWS_WITH(sim::run_isolated([]() -> std::string { throw std::runtime_error("no route to rank 7"); }),
                    "no route to rank 7");
}

TEST_CASE("parallel jobs: each reports once with its own result or error") {
  std::set<size_t> seen;
  int failures = 0;
  sim::run_isolated_parallel(
      7, 2,
      [](size_t i) {
        if (i == 3) throw std::runtime_error("job 3 failed");
        ::usleep(static_cast<useconds_t>((7 - i) * 2000));
        return std::to_string(i * i);
      },
      [&](size_t i, bool ok, const std::string& text) {
        CHECK(seen.insert(i).second);
        if (ok) {
          CHECK(text == std::to_string(i * i));
        } else {
          ++failures;
          CHECK(i == 3);
          CHECK(text == "job 3 failed");
        }
      });
  CHECK(seen.size() == 7);
  CHECK(failures == 1);
}
