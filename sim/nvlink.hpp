// Transfers between GPUs of one node, simulated here instead of as SimGrid flows. Such a transfer
// crosses only its source GPU's NVLink port out and its destination's port in (NVSwitch is
// non-blocking, sim/platform.hpp), and nothing else crosses those ports, so these transfers share
// bandwidth only among themselves: a resource system of its own, apart from PCIe, NICs and host
// memory. This class solves it as SimGrid's CM02 model would (max-min fairness, every flow of equal
// weight, every port of the node's NVLink bandwidth, bytes rounded down to whole bytes as
// Comm::sendto_async does) and ends each transfer with a kernel timer. Why: SimGrid 3.32 lists every
// flow started outside an actor in one list and removes each at its end by a linear scan, so a flow
// costs O(flows in flight); a timer costs a heap entry (docs/DESIGN.md, what a simulated step costs).
//
// When a transfer starts or ends, the rates of the transfers connected to it through shared ports
// (its component) are solved again by progressive filling; a transfer whose rate changes has its
// remaining bytes brought up to date and its timer moved. One object per simulation; maestro's
// thread only, like SimGrid.
#pragma once
#include <simgrid/kernel/Timer.hpp>

#include <coroutine>
#include <cstdint>
#include <vector>

#include "sim/events.hpp"

namespace zinf::sim {

class NvlinkPorts {
public:
  // Transfers started together and awaited together (a collective's phase).
  struct Group {
    int remaining = 0;
    std::coroutine_handle<> waiting;
  };

  // `gpus`: GPU ranks of the platform (ports 0..gpus-1 each way); `bandwidth`: one port, one way.
  NvlinkPorts(Events& events, int gpus, double bandwidth);
  ~NvlinkPorts();
  NvlinkPorts(const NvlinkPorts&) = delete;
  NvlinkPorts& operator=(const NvlinkPorts&) = delete;

  // Starts `bytes` from GPU `src` to GPU `dst` (of one node) now; counts in `group` until it ends.
  void start(int src, int dst, double bytes, Group& group);
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
    int src = -1, dst = -1;  // -1: a free slot
    double remaining = 0;    // bytes left at `since`
    double rate = 0;
    double since = 0;
    simgrid::kernel::timer::Timer* timer = nullptr;
    Group* group = nullptr;
    bool frozen = false;     // scratch of solve()
    int at = 0;              // scratch of solve(): index in the component
  };
  // Ports: 2·gpu is the GPU's port out, 2·gpu + 1 its port in.
  static int out_port(int gpu) { return 2 * gpu; }
  static int in_port(int gpu) { return 2 * gpu + 1; }

  void finish(int id);
  void detach(int id);
  // Solves again the rates of the transfers reachable from `seeds` (ports) through shared ports.
  void solve(const std::vector<int>& seeds);
  void reschedule(int id, double now);

  Events& events_;
  double bandwidth_;
  std::vector<Flow> flows_;
  std::vector<int> free_;
  std::vector<std::vector<int>> on_port_;  // transfers crossing each port
  // Scratch of solve().
  std::vector<uint8_t> port_seen_;
  std::vector<int> ports_, component_, saturated_;
  std::vector<double> left_, new_rate_;
  std::vector<int> unfrozen_;
};

}  // namespace zinf::sim
