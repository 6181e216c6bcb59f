#include "sim/nvlink.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace zinf::sim {

namespace sg4 = simgrid::s4u;

NvlinkPorts::NvlinkPorts(Events& events, int gpus, double bandwidth)
    : events_(events),
      bandwidth_(bandwidth),
      on_port_(static_cast<size_t>(2 * gpus)),
      port_seen_(static_cast<size_t>(2 * gpus), 0),
      left_(static_cast<size_t>(2 * gpus), 0),
      unfrozen_(static_cast<size_t>(2 * gpus), 0) {}

NvlinkPorts::~NvlinkPorts() {
  for (auto& f : flows_)
    if (f.timer) f.timer->remove();
}

void NvlinkPorts::start(int src, int dst, double bytes, Group& group) {
  const double whole = std::floor(bytes);  // as Comm::sendto_async's integral payload
  if (whole <= 0) return;
  int id;
  if (free_.empty()) {
    id = static_cast<int>(flows_.size());
    flows_.emplace_back();
  } else {
    id = free_.back();
    free_.pop_back();
  }
  auto& f = flows_[static_cast<size_t>(id)];
  f = Flow{};
  f.src = src;
  f.dst = dst;
  f.remaining = whole;
  f.since = sg4::Engine::get_clock();
  f.group = &group;
  ++group.remaining;
  on_port_[static_cast<size_t>(out_port(src))].push_back(id);
  on_port_[static_cast<size_t>(in_port(dst))].push_back(id);
  solve({out_port(src), in_port(dst)});
}

void NvlinkPorts::detach(int id) {
  const auto& f = flows_[static_cast<size_t>(id)];
  for (int p : {out_port(f.src), in_port(f.dst)}) {
    auto& on = on_port_[static_cast<size_t>(p)];
    on.erase(std::find(on.begin(), on.end(), id));
  }
}

void NvlinkPorts::finish(int id) {
  auto& f = flows_[static_cast<size_t>(id)];
  f.timer = nullptr;  // SimGrid deletes a timer once it has run
  Group* group = f.group;
  const int src = f.src, dst = f.dst;
  detach(id);
  f.src = f.dst = -1;
  f.group = nullptr;
  free_.push_back(id);
  solve({out_port(src), in_port(dst)});
  if (--group->remaining == 0 && group->waiting) events_.resume_soon(std::exchange(group->waiting, {}));
}

void NvlinkPorts::solve(const std::vector<int>& seeds) {
  // The component: every port and transfer reachable from the seeds through shared ports.
  ports_.clear();
  component_.clear();
  for (int p : seeds)
    if (!port_seen_[static_cast<size_t>(p)]) {
      port_seen_[static_cast<size_t>(p)] = 1;
      ports_.push_back(p);
    }
  for (size_t i = 0; i < ports_.size(); ++i)
    for (int id : on_port_[static_cast<size_t>(ports_[i])]) {
      auto& f = flows_[static_cast<size_t>(id)];
      if (f.frozen) continue;  // already in the component (reset below)
      f.frozen = true;
      f.at = static_cast<int>(component_.size());
      component_.push_back(id);
      for (int q : {out_port(f.src), in_port(f.dst)})
        if (!port_seen_[static_cast<size_t>(q)]) {
          port_seen_[static_cast<size_t>(q)] = 1;
          ports_.push_back(q);
        }
    }
  for (int id : component_) flows_[static_cast<size_t>(id)].frozen = false;
  for (int p : ports_) {
    port_seen_[static_cast<size_t>(p)] = 0;
    left_[static_cast<size_t>(p)] = bandwidth_;
    unfrozen_[static_cast<size_t>(p)] = static_cast<int>(on_port_[static_cast<size_t>(p)].size());
  }
  // Progressive filling: every unfrozen transfer grows at the same rate until a port saturates;
  // the transfers on the ports that saturate first keep that rate.
  const double now = sg4::Engine::get_clock();
  new_rate_.assign(component_.size(), 0);
  size_t unfrozen = component_.size();
  while (unfrozen > 0) {
    double level = std::numeric_limits<double>::infinity();
    for (int p : ports_)
      if (unfrozen_[static_cast<size_t>(p)] > 0)
        level = std::min(level, left_[static_cast<size_t>(p)] / unfrozen_[static_cast<size_t>(p)]);
    saturated_.clear();
    for (int p : ports_)
      if (unfrozen_[static_cast<size_t>(p)] > 0 && left_[static_cast<size_t>(p)] / unfrozen_[static_cast<size_t>(p)] == level)
        saturated_.push_back(p);
    for (int p : saturated_)
      for (int id : on_port_[static_cast<size_t>(p)]) {
        auto& f = flows_[static_cast<size_t>(id)];
        if (f.frozen) continue;
        f.frozen = true;
        --unfrozen;
        new_rate_[static_cast<size_t>(f.at)] = level;
        for (int q : {out_port(f.src), in_port(f.dst)}) {
          left_[static_cast<size_t>(q)] -= level;
          --unfrozen_[static_cast<size_t>(q)];
        }
      }
  }
  for (size_t i = 0; i < component_.size(); ++i) {
    auto& f = flows_[static_cast<size_t>(component_[i])];
    f.frozen = false;
    if (new_rate_[i] == f.rate) continue;
    f.remaining = std::max(0.0, f.remaining - f.rate * (now - f.since));
    f.since = now;
    f.rate = new_rate_[i];
    reschedule(component_[i], now);
  }
}

void NvlinkPorts::reschedule(int id, double now) {
  auto& f = flows_[static_cast<size_t>(id)];
  if (f.timer) f.timer->remove();
  f.timer = simgrid::kernel::timer::Timer::set(now + f.remaining / f.rate, [this, id] { finish(id); });
}

}  // namespace zinf::sim
