// Coroutines that SimGrid's maestro resumes, in place of actors. A simulated lane, task or
// collective is a coroutine (`Job`) that awaits what the simulated thing waits for:
//   co_await delay(seconds);        a kernel timer: no resource, no activity
//   co_await wait(activity);        an Exec, Comm or Io started here, until it ends
//   co_await wait_all(activities);  all of them
//   co_await other_job;             another coroutine, to its end (its exception comes back here)
// Activities started outside any actor are SimGrid's DAG mode: when one ends, SimGrid calls
// Activity::on_completion in maestro, and the Events object resumes the coroutine that waits for
// it. No actor, no context switch, no simcall per activity: a simulated step costs its activities
// and timers only (see docs/DESIGN.md, the simulator's speed).
//
// Resumptions go through one run queue, drained in maestro after each timer and each activity's
// end, so that a coroutine that ends a task and starts the next never recurses into another.
// One Events per SimGrid engine (it connects the engine-wide completion signal once); single
// thread, like SimGrid itself.
#pragma once
#include <simgrid/s4u.hpp>

#include <coroutine>
#include <cstdint>
#include <exception>
#include <utility>
#include <vector>

namespace zinf::sim {

class Events;

// A coroutine run by Events. Created suspended; `Events::spawn` runs it detached (its frame frees
// itself at the end and an exception goes to Events::failure), `co_await job` runs it to its end.
class Job {
public:
  struct promise_type {
    std::coroutine_handle<> continuation;  // who co_awaits this job (null: spawned)
    Events* events = nullptr;              // set by spawn: where a spawned job's exception goes
    std::exception_ptr error;
    Job get_return_object() { return Job(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct Final {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept;
      void await_resume() noexcept {}
    };
    Final final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { error = std::current_exception(); }
  };

  Job(Job&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Job& operator=(Job&&) = delete;
  ~Job() {
    if (h_) h_.destroy();
  }

  // Runs this job until it ends, then resumes the awaiting coroutine; rethrows its exception.
  auto operator co_await() && noexcept {
    struct Awaiter {
      std::coroutine_handle<promise_type> h;
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> parent) noexcept {
        h.promise().continuation = parent;
        return h;
      }
      void await_resume() {
        if (auto e = h.promise().error) std::rethrow_exception(e);
      }
    };
    return Awaiter{h_};
  }

private:
  friend class Events;
  explicit Job(std::coroutine_handle<promise_type> h) : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

class Events {
public:
  // Connects the engine's completion signal; create after the engine, before any activity.
  Events();
  ~Events();
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;

  // Starts `job` at the current simulated time (now, if nothing is being resumed; else when the
  // run queue reaches it). A spawned job's exception is kept in failure() and later jobs still run.
  void spawn(Job job);
  // Resumes a suspended coroutine at the current simulated time, after the one running now.
  void resume_soon(std::coroutine_handle<> h) {
    schedule(h);
    drain();
  }
  // The first exception a spawned job threw, or null.
  std::exception_ptr failure() const { return failure_; }

  // Counts a coroutine waiting for one or more activities.
  struct Waiter {
    int remaining = 0;
    std::coroutine_handle<> h;
  };

  // Awaitables.
  auto delay(double seconds) {
    struct Awaiter {
      Events* ev;
      double seconds;
      bool await_ready() const noexcept { return seconds <= 0; }
      void await_suspend(std::coroutine_handle<> h) { ev->resume_after(seconds, h); }
      void await_resume() const noexcept {}
    };
    return Awaiter{this, seconds};
  }
  // Waits for started activities (each must not have ended yet: started here, this instant). Pass
  // named activities, not temporaries made in the co_await expression: GCC 12 mishandles those.
  auto wait_all(const std::vector<simgrid::s4u::ActivityPtr>& activities) {
    struct Awaiter {
      Events* ev;
      std::vector<simgrid::s4u::ActivityPtr> activities;
      Waiter waiter;
      bool await_ready() const noexcept { return activities.empty(); }
      void await_suspend(std::coroutine_handle<> h) {
        waiter = {static_cast<int>(activities.size()), h};
        for (auto& a : activities) a->set_data(&waiter);
      }
      void await_resume() { ev->retire(std::move(activities)); }
    };
    return Awaiter{this, activities, {}};
  }
  auto wait(const simgrid::s4u::ActivityPtr& activity) { return wait_all({activity}); }

  // Activities and timers started through this object since it was created.
  uint64_t timers() const { return timers_; }

private:
  void resume_after(double seconds, std::coroutine_handle<> h);
  void on_completion(const simgrid::s4u::Activity& a);
  void schedule(std::coroutine_handle<> h) { queue_.push_back(h); }
  void drain();
  // Activities whose waiters have resumed are released on the next event, not while SimGrid
  // still handles their end.
  void retire(std::vector<simgrid::s4u::ActivityPtr> done);

  std::vector<std::coroutine_handle<>> queue_;
  std::vector<simgrid::s4u::ActivityPtr> graveyard_;
  bool draining_ = false;
  std::exception_ptr failure_;
  uint64_t timers_ = 0;
  friend struct Job::promise_type::Final;
};

}  // namespace zinf::sim
