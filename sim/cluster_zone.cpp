#include "sim/cluster_zone.hpp"

#include <stdexcept>

namespace zinf::sim {

namespace sg4 = simgrid::s4u;
using simgrid::kernel::routing::NetPoint;
using simgrid::kernel::routing::Route;

ClusterZone* ClusterZone::create_root(const std::string& name) {
  if (sg4::Engine::get_instance()->get_netzone_root())
    throw std::logic_error("the cluster zone must be the engine's first netzone");
  return new ClusterZone(name);  // the engine owns its root zone and destroys it
}

ClusterZone::LinkImpl* ClusterZone::one_way(sg4::Link* link, sg4::LinkInRoute::Direction d) {
  auto impl = get_link_list_impl({sg4::LinkInRoute(link, d)}, false);
  if (impl.size() != 1) throw std::logic_error("a link in a route must resolve to one link");
  return impl.front();
}

void ClusterZone::get_local_route(const NetPoint* src, const NetPoint* dst, Route* into, double* /*latency*/) {
  router_(src->id(), dst->id(), into->link_list_);
}

}  // namespace zinf::sim
