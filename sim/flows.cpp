#include "sim/flows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace zinf::sim {

Flows::Flows(Events& events, const Platform& platform)
    : events_(events),
      platform_(platform),
      on_link_(static_cast<size_t>(platform.link_count())),
      link_seen_(static_cast<size_t>(platform.link_count()), 0),
      left_(static_cast<size_t>(platform.link_count()), 0),
      unfrozen_(static_cast<size_t>(platform.link_count()), 0) {}

Flows::~Flows() {
  for (auto& f : flows_)
    if (f.timer) f.timer->remove();
}

void Flows::start(const sg4::Host* from, const sg4::Host* to, double bytes, Group& group) {
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
  platform_.links_between(from, to, f.route);
  if (f.route.empty()) throw std::logic_error("a transfer between hosts that no link joins");
  f.remaining = whole;
  f.rate = 0;
  f.since = sg4::Engine::get_clock();
  f.group = &group;
  ++group.remaining;
  for (int l : f.route) on_link_[static_cast<size_t>(l)].push_back(id);
  seeds_ = f.route;
  solve(seeds_);
}

void Flows::finish(int id) {
  auto& f = flows_[static_cast<size_t>(id)];
  f.timer = nullptr;  // SimGrid deletes a timer once it has run
  Group* group = f.group;
  for (int l : f.route) {
    auto& on = on_link_[static_cast<size_t>(l)];
    on.erase(std::find(on.begin(), on.end(), id));
  }
  seeds_.swap(f.route);
  f.route.clear();
  f.group = nullptr;
  free_.push_back(id);
  solve(seeds_);
  if (--group->remaining == 0 && group->waiting) events_.resume_soon(std::exchange(group->waiting, {}));
}

void Flows::solve(const std::vector<int>& seeds) {
  // The component: every link and transfer reachable from the seeds through shared links.
  links_.clear();
  component_.clear();
  for (int l : seeds)
    if (!link_seen_[static_cast<size_t>(l)]) {
      link_seen_[static_cast<size_t>(l)] = 1;
      links_.push_back(l);
    }
  for (size_t i = 0; i < links_.size(); ++i)
    for (int id : on_link_[static_cast<size_t>(links_[i])]) {
      auto& f = flows_[static_cast<size_t>(id)];
      if (f.frozen) continue;  // already in the component (reset below)
      f.frozen = true;
      f.at = static_cast<int>(component_.size());
      component_.push_back(id);
      for (int q : f.route)
        if (!link_seen_[static_cast<size_t>(q)]) {
          link_seen_[static_cast<size_t>(q)] = 1;
          links_.push_back(q);
        }
    }
  for (int id : component_) flows_[static_cast<size_t>(id)].frozen = false;
  for (int l : links_) {
    link_seen_[static_cast<size_t>(l)] = 0;
    left_[static_cast<size_t>(l)] = platform_.link_bandwidth(l);
    unfrozen_[static_cast<size_t>(l)] = static_cast<int>(on_link_[static_cast<size_t>(l)].size());
  }
  // Progressive filling: every unfrozen transfer grows at the same rate until a link saturates;
  // the transfers on the links that saturate first keep that rate.
  new_rate_.assign(component_.size(), 0);
  size_t unfrozen = component_.size();
  while (unfrozen > 0) {
    double level = std::numeric_limits<double>::infinity();
    for (int l : links_)
      if (unfrozen_[static_cast<size_t>(l)] > 0)
        level = std::min(level, left_[static_cast<size_t>(l)] / unfrozen_[static_cast<size_t>(l)]);
    saturated_.clear();
    for (int l : links_)
      if (unfrozen_[static_cast<size_t>(l)] > 0 && left_[static_cast<size_t>(l)] / unfrozen_[static_cast<size_t>(l)] == level)
        saturated_.push_back(l);
    for (int l : saturated_)
      for (int id : on_link_[static_cast<size_t>(l)]) {
        auto& f = flows_[static_cast<size_t>(id)];
        if (f.frozen) continue;
        f.frozen = true;
        --unfrozen;
        new_rate_[static_cast<size_t>(f.at)] = level;
        for (int q : f.route) {
          left_[static_cast<size_t>(q)] -= level;
          --unfrozen_[static_cast<size_t>(q)];
        }
      }
  }
  const double now = sg4::Engine::get_clock();
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

void Flows::reschedule(int id, double now) {
  auto& f = flows_[static_cast<size_t>(id)];
  if (f.timer) f.timer->remove();
  f.timer = simgrid::kernel::timer::Timer::set(now + f.remaining / f.rate, [this, id] { finish(id); });
}

}  // namespace zinf::sim
