// A fuzz target for one of zinf's readers of user files: `fuzz_one` feeds it one input and lets
// through only the errors a user is meant to see (core::ConfigError, SafetensorsError and the
// other std::runtime_errors that name the file); fuzz_driver.cpp runs it over seed files and
// deterministic mutations of them, and fails on a crash, a sanitizer report, or any other
// exception (a logic_error, bad_alloc, or a raw yaml-cpp / nlohmann error that escaped unwrapped).
// The same function is libFuzzer's entry point when built with -fsanitize=fuzzer. Single-threaded.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace zinf::fuzz {

// Runs the reader on `input`; throws what the reader throws.
void fuzz_one(std::string_view input);
// Inputs to start from besides the seed files named on the command line.
std::vector<std::string> builtin_seeds();

}  // namespace zinf::fuzz
