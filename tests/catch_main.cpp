// main() of the CPU tests: Catch2's own, except that a run in which a case skipped itself
// (ZINF_SKIP, skip.hpp) and none failed exits 77, which CTest reports as "Skipped".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "skip.hpp"

int main(int argc, char* argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && zinf::test::skipped_cases() > 0) return 77;
  return failed;
}
