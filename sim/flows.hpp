// Transfers over the platform's links (sim/platform.hpp), shared by max-min fairness as SimGrid's
// CM02 model shares its flows, but solved here and ended by kernel timers instead of being SimGrid
// flows. Each transfer crosses the links of Platform's route between its hosts, every link of the
// bandwidth the platform gave it, every transfer of equal weight, its bytes rounded down to whole
// bytes as Comm::sendto_async's payload is. Why: SimGrid 3.32 files every flow started outside an
// actor in one list and removes each at its end by a linear scan, so a flow costs O(flows in
// flight); a timer costs a heap entry (docs/DESIGN.md, what a simulated step costs). SimGrid keeps
// the platform, the routes, the clock and every exec; tests/sim_flows_test.cpp holds these
// transfers to SimGrid's own flows on the same routes.
//
// When a transfer starts or ends, the rates of the transfers connected to it through shared links
// (its component) are solved again by progressive filling, as SimGrid's solver does on the
// constraints it modified; a transfer whose rate changes has its remaining bytes brought up to date
// and its timer moved. One object per simulation, after the Platform and the Events; maestro's
// thread only, like SimGrid.
#pragma once
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>

#include <coroutine>
#include <cstdint>
#include <vector>

#include "sim/events.hpp"
#include "sim/platform.hpp"

namespace zinf::sim {

class Flows {
public:
  // Transfers started together and awaited together (a collective's phase, a copy).
  struct Group {
    int remaining = 0;
    std::coroutine_handle<> waiting;
  };

  Flows(Events& events, const Platform& platform);
  ~Flows();
  Flows(const Flows&) = delete;
  Flows& operator=(const Flows&) = delete;

  // Starts `bytes` from `from` to `to` now; counts in `group` until it ends.
  void start(const sg4::Host* from, const sg4::Host* to, double bytes, Group& group);
  // Until every transfer of `group` has ended.
  auto wait(Group& group) {
    struct Awaiter {
      Group& g;
      bool await_ready() const noexcept { return g.remaining == 0; }
      void await_suspend(std::coroutine_handle<> h) noexcept { g.waiting = h; }
      void await_resume() const noexcept {}
    };
    return Awaiter{group};
  }

  // Transfers in flight now.
  size_t in_flight() const { return flows_.size() - free_.size(); }

private:
  struct Flow {
    std::vector<int> route;  // link ids; empty: a free slot
    double remaining = 0;    // bytes left at `since`
    double rate = 0;
    double since = 0;
    simgrid::kernel::timer::Timer* timer = nullptr;
    Group* group = nullptr;
    bool frozen = false;     // scratch of solve()
    int at = 0;              // scratch of solve(): index in the component
  };

  void finish(int id);
  // Solves again the rates of the transfers reachable from `seeds` (links) through shared links.
  void solve(const std::vector<int>& seeds);
  void reschedule(int id, double now);

  Events& events_;
  const Platform& platform_;
  std::vector<Flow> flows_;
  std::vector<int> free_;
  std::vector<std::vector<int>> on_link_;  // transfers crossing each link
  // Scratch of solve().
  std::vector<uint8_t> link_seen_;
  std::vector<int> links_, component_, saturated_, seeds_;
  std::vector<double> left_, new_rate_;
  std::vector<int> unfrozen_;
};

}  // namespace zinf::sim
