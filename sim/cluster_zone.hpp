// The whole simulated cluster as one SimGrid netzone whose routes are computed when a transfer
// starts, not stored: a Full zone over thousands of hosts would hold every pair's route, and
// nested zones route between nodes through one gateway per node, which cannot say which of a
// node's NICs (and so which fabric links) a GPU's traffic takes. The owner (Platform) creates the
// hosts and links through the zone's s4u interface and gives it a routing function over the hosts'
// netpoint ids. Built before the simulation runs; single thread, like SimGrid.
#pragma once
#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>

#include <functional>
#include <string>
#include <vector>

namespace zinf::sim {

class ClusterZone : public simgrid::kernel::routing::NetZoneImpl {
public:
  using LinkImpl = simgrid::kernel::resource::StandardLinkImpl;
  using Links = std::vector<LinkImpl*>;
  // Appends to `links` the links a transfer from netpoint `src` to netpoint `dst` crosses.
  using Router = std::function<void(unsigned long src, unsigned long dst, Links& links)>;

  // Creates the zone as the platform's root (the first zone of the engine).
  static ClusterZone* create_root(const std::string& name);

  void set_router(Router router) { router_ = std::move(router); }
  // The one-direction link a route crosses: `link` itself (shared), or one direction of a
  // split-duplex link.
  LinkImpl* one_way(simgrid::s4u::Link* link, simgrid::s4u::LinkInRoute::Direction d);

protected:
  explicit ClusterZone(const std::string& name) : NetZoneImpl(name) {}
  // Every link has zero latency (the simulator charges latencies itself), so none is added here.
  void get_local_route(const simgrid::kernel::routing::NetPoint* src, const simgrid::kernel::routing::NetPoint* dst,
                       simgrid::kernel::routing::Route* into, double* latency) override;

private:
  Router router_;
};

}  // namespace zinf::sim
