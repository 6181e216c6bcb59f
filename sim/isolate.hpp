// Runs a function in a forked child process and returns what it wrote. SimGrid's engine can be
// created once per process, so every simulation after the first, in tests, in `zinf sweep` and in
// benchmarks, runs in a child of its own. The parent must not itself have created an engine
// (a child inherits it). Blocking; safe to call from one thread at a time.
#pragma once
#include <functional>
#include <string>

namespace zinf::sim {

// Forks; the child runs `fn` and sends back the string it returns. Throws std::runtime_error with
// the child's message if `fn` threw, or with its exit status or signal if it died.
std::string run_isolated(const std::function<std::string()>& fn);

}  // namespace zinf::sim
