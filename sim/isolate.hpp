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

// Runs jobs 0 .. count-1, each in its own child process, at most `workers` at a time. In the parent,
// `done(index, ok, text)` is called as each ends: ok with the string the job returned, or not ok
// with the job's error message (or how its process died). Jobs finish in any order.
void run_isolated_parallel(size_t count, int workers, const std::function<std::string(size_t)>& job,
                           const std::function<void(size_t, bool, const std::string&)>& done);

}  // namespace zinf::sim
