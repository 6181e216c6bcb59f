#include "sim/events.hpp"

#include <simgrid/kernel/Timer.hpp>

#include <stdexcept>

namespace zinf::sim {

namespace sg4 = simgrid::s4u;

namespace {
Events* current = nullptr;
bool connected = false;
}  // namespace

std::coroutine_handle<> Job::promise_type::Final::await_suspend(std::coroutine_handle<promise_type> h) noexcept {
  auto& p = h.promise();
  if (p.continuation) return p.continuation;  // the awaiting Job destroys this frame
  if (p.error && p.events && !p.events->failure_) p.events->failure_ = p.error;
  h.destroy();
  return std::noop_coroutine();
}

Events::Events() {
  if (current) throw std::logic_error("one Events object per SimGrid engine");
  current = this;
  if (!connected) {
    connected = true;
    sg4::Activity::on_completion_cb([](const sg4::Activity& a) {
      if (current) current->on_completion(a);
    });
  }
}

Events::~Events() {
  current = nullptr;
  for (auto h : queue_) h.destroy();
}

void Events::spawn(Job job) {
  auto h = std::exchange(job.h_, {});
  h.promise().events = this;
  schedule(h);
  drain();
}

void Events::resume_after(double seconds, std::coroutine_handle<> h) {
  ++timers_;
  simgrid::kernel::timer::Timer::set(sg4::Engine::get_clock() + seconds, [this, h] {
    graveyard_.clear();
    schedule(h);
    drain();
  });
}

void Events::on_completion(const sg4::Activity& a) {
  graveyard_.clear();  // ended earlier: SimGrid is done with them
  auto* w = a.get_data<Waiter>();
  if (!w) return;
  if (--w->remaining == 0) schedule(w->h);
  drain();
}

void Events::retire(std::vector<sg4::ActivityPtr> done) {
  for (auto& a : done) {
    a->set_data(nullptr);
    graveyard_.push_back(std::move(a));
  }
}

void Events::drain() {
  if (draining_) return;
  draining_ = true;
  for (size_t i = 0; i < queue_.size(); ++i) {
    auto h = queue_[i];  // a resumption may append, and move the vector
    h.resume();
  }
  queue_.clear();
  draining_ = false;
}

}  // namespace zinf::sim
