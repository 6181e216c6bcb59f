// Runs a function in a forked child process and returns what it wrote. SimGrid's engine can be
// created once per process, so every simulation after the first, in tests, in `zinf sweep` and in
// benchmarks, runs in a child of its own. The parent must not itself have created an engine
// (a child inherits it). A child is killed when the thread that forked it ends (PR_SET_PDEATHSIG),
// so a parent stopped by a signal takes its children with it. Blocking, except IsolatedPool::wait with a timeout; safe to call from one
// thread at a time.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace zinf::sim {

// Forks; the child runs `fn` and sends back the string it returns. Throws std::runtime_error with
// the child's message if `fn` threw, or with its exit status or signal if it died.
std::string run_isolated(const std::function<std::string()>& fn);

// Runs jobs 0 .. count-1, each in its own child process, at most `workers` at a time. In the parent,
// `done(index, ok, text)` is called as each ends: ok with the string the job returned, or not ok
// with the job's error message (or how its process died). Jobs finish in any order.
void run_isolated_parallel(size_t count, int workers, const std::function<std::string(size_t)>& job,
                           const std::function<void(size_t, bool, const std::string&)>& done);

// Child processes started one job at a time and collected as they end, for callers that also wait
// on something else (a sweep's rank 0 serving other ranks between its own points). Destroying the
// pool kills and reaps the children still running. One thread.
class IsolatedPool {
public:
  struct Finished {
    size_t index = 0;
    bool ok = false;
    std::string text;  // the job's result, or its error message (or how its process died)
  };

  IsolatedPool() = default;
  ~IsolatedPool();
  IsolatedPool(const IsolatedPool&) = delete;
  IsolatedPool& operator=(const IsolatedPool&) = delete;

  void start(size_t index, const std::function<std::string()>& fn);
  size_t running() const { return children_.size(); }
  // Returns the jobs that ended: waits until one does (timeout_ms negative), or at most
  // `timeout_ms` (returning early, perhaps with none, when output arrives). Nothing running:
  // returns at once.
  std::vector<Finished> wait(int timeout_ms);

private:
  struct Child {
    int pid = -1;
    int fd = -1;
    size_t index = 0;
    std::string out;
  };
  void wait_once(int timeout_ms, std::vector<Finished>& ended);
  std::vector<Child> children_;
};

}  // namespace zinf::sim
