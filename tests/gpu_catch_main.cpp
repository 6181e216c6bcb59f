// main() of the GPU tests (tests/cuda_*_test.cpp). Without a usable CUDA device it runs no test:
// it prints why and exits with 77, which CTest reports as "Skipped" (SKIP_RETURN_CODE), so a GPU
// test is never counted as passed on a machine that could not run it. Listing the tests (CTest's
// discovery at build time) works everywhere.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "engine/backend/backend_select.hpp"
#include "skip.hpp"

int main(int argc, char* argv[]) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--list", 0) == 0) listing = true;
  std::string why;
  if (!listing && !zinf::engine::cuda_device_available(&why)) {
    std::printf("SKIPPED: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && zinf::test::skipped_cases() > 0) return 77;  // a case skipped itself (skip.hpp)
  return failed;
}
