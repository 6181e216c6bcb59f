// Child processes for simulations: results and errors come back to the parent, and parallel
// jobs each report once, whatever order they end in.
#include <signal.h>
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

TEST_CASE("a pool returns from a timed wait while its job runs, reports a killed child, and kills what is left") {
  sim::IsolatedPool pool;
  pool.start(5, [] {
    ::usleep(300000);
    return std::string("slow");
  });
  pool.start(6, []() -> std::string {
    ::raise(SIGKILL);
    return "never";
  });
  std::vector<sim::IsolatedPool::Finished> ended;
  for (int k = 0; k < 50 && ended.empty(); ++k)
    for (auto& f : pool.wait(2)) ended.push_back(f);
  REQUIRE(ended.size() == 1);  // the killed one, long before the slow one
  CHECK(ended[0].index == 6);
  CHECK_FALSE(ended[0].ok);
  CHECK(ended[0].text.find("signal 9") != std::string::npos);
  CHECK(pool.running() == 1);
  CHECK(pool.wait(0).empty());
  auto last = pool.wait(-1);
  REQUIRE(last.size() == 1);
  CHECK(last[0].index == 5);
  CHECK(last[0].text == "slow");
  CHECK(pool.running() == 0);
  CHECK(pool.wait(-1).empty());  // nothing running: returns at once

  // A pool destroyed with a child still running kills and reaps it.
  int pid_file[2];
  REQUIRE(::pipe(pid_file) == 0);
  pid_t child = 0;
  {
    sim::IsolatedPool doomed;
    doomed.start(0, [&] {
      const pid_t me = ::getpid();
      (void)!::write(pid_file[1], &me, sizeof me);
      ::sleep(60);
      return std::string();
    });
    REQUIRE(::read(pid_file[0], &child, sizeof child) == sizeof child);
    CHECK(::kill(child, 0) == 0);
  }
  CHECK(::kill(child, 0) != 0);  // gone, and reaped: no zombie left to signal
  ::close(pid_file[0]);
  ::close(pid_file[1]);
}
