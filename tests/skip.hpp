// Honest skips for the Catch2 tests (Catch2 v2 has no SKIP): a test case that cannot run here
// says why with ZINF_SKIP and returns; the test program's main() (catch_main.cpp) then exits 77
// when nothing failed, which CTest reports as "Skipped" (SKIP_RETURN_CODE), never as passed.
// CTest runs each case in its own process, so a skip marks that case alone.
#pragma once
#include <cstdio>
#include <string>

namespace zinf::test {

inline int& skipped_cases() {
  static int count = 0;
  return count;
}

inline void note_skip(const std::string& why) {
  ++skipped_cases();
  std::printf("SKIPPED: %s\n", why.c_str());
}

}  // namespace zinf::test

#define ZINF_SKIP(why)             \
  do {                             \
    ::zinf::test::note_skip(why);  \
    return;                        \
  } while (0)
