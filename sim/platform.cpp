#include "sim/platform.hpp"

#include <xbt/log.h>

#include <atomic>
#include <stdexcept>

namespace zinf::sim {

namespace {

std::atomic<bool> engine_created{false};

std::string name(int node, const std::string& what, int index = -1) {
  std::string s(1, 'n');
  s.append(std::to_string(node)).append(1, '.').append(what);
  if (index >= 0) s.append(std::to_string(index));
  return s;
}

sg4::LinkInRoute up(sg4::Link* l) { return sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::UP); }
sg4::LinkInRoute down(sg4::Link* l) { return sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::DOWN); }

}  // namespace

Platform::Platform(const core::HwProfile& hw, int nodes) : hw_(hw), nodes_(nodes) {
  if (nodes < 1) throw std::invalid_argument("the platform needs at least one node");
  if (engine_created.exchange(true))
    throw std::logic_error("SimGrid allows one engine per process: run each simulation in its own process");
  xbt_log_control_set("root.thresh:warning");
  int argc = 1;
  char arg0[] = "zinf-sim";
  char* argv[] = {arg0, nullptr};
  engine_ = std::make_unique<sg4::Engine>(&argc, argv);
  // Exact max-min sharing: SimGrid's default model is tuned to TCP (bandwidth x0.97, latency x13,
  // 5 % of each flow added to the reverse route, flows weighted by route latency, a window bound),
  // several percent off for PCIe or NVLink. With CM02, no cross-traffic, no TCP window and zero link
  // latencies (charged by the simulator instead), tests/sim_*_test.cpp match hand-computed times.
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic:0");
  sg4::Engine::set_config("network/TCP-gamma:0");

  auto* fabric = sg4::create_star_zone("fabric");
  gpus_.reserve(static_cast<size_t>(ranks()));
  for (int n = 0; n < nodes; ++n) build_node(fabric, n);
  fabric->seal();
}

Platform::~Platform() = default;

void Platform::build_node(sg4::NetZone* fabric, int n) {
  const auto& node = hw_.node;
  auto* zone = sg4::create_full_zone(name(n, "node"));
  zone->set_parent(fabric);

  std::vector<sg4::Host*> gpus, cpus;
  for (int g = 0; g < node.gpus; ++g) gpus.push_back(zone->create_host(name(n, "gpu", g), node.gpu.peak_flops)->seal());
  const double socket_rate = node.cpu_adam_rate / node.cpu_sockets;
  for (int s = 0; s < node.cpu_sockets; ++s) cpus.push_back(zone->create_host(name(n, "cpu", s), socket_rate)->seal());
  // The pool delivers core_capacity() one-thread rates in all; each exec on it is one thread and is
  // bounded at one thread's rate (the simulator sets the bound), so k busy threads each get
  // min(1, capacity / k): with capacity = cores this is a cores-core host.
  if (node.device_shares_host_cores)
    cores_.push_back(zone->create_host(name(n, "cores"), node.core_capacity())->seal());
  auto* gateway = zone->create_router(name(n, "gw"));

  std::vector<sg4::Link*> memory;
  for (int s = 0; s < node.cpu_sockets; ++s)
    memory.push_back(zone->create_link(name(n, "mem", s), node.host_memory_bandwidth / node.cpu_sockets)
                         ->set_sharing_policy(sg4::Link::SharingPolicy::SHARED)
                         ->set_latency(0)
                         ->seal());
  const int per_switch = std::max(1, std::min(node.gpus_per_pcie_switch, node.gpus));
  std::vector<sg4::Link*> uplinks;
  if (node.pcie_switch_uplink > 0)
    for (int s = 0; s < (node.gpus + per_switch - 1) / per_switch; ++s)
      uplinks.push_back(zone->create_split_duplex_link(name(n, "pcie_switch", s), node.pcie_switch_uplink)->set_latency(0)->seal());
  std::vector<sg4::Link*> nics;
  for (int c = 0; c < node.nics; ++c)
    nics.push_back(zone->create_split_duplex_link(name(n, "nic", c), node.nic_bandwidth)->set_latency(0)->seal());

  std::vector<sg4::Link*> pcie, nvlink;
  for (int g = 0; g < node.gpus; ++g) {
    pcie.push_back(zone->create_split_duplex_link(name(n, "pcie", g), node.pcie_bandwidth)->set_latency(0)->seal());
    nvlink.push_back(zone->create_split_duplex_link(name(n, "nvlink", g), node.nvlink_bandwidth)->set_latency(0)->seal());
  }

  for (int g = 0; g < node.gpus; ++g) {
    const int socket = g * node.cpu_sockets / node.gpus;
    std::vector<sg4::LinkInRoute> to_host{up(pcie[g])};
    if (!uplinks.empty()) to_host.push_back(up(uplinks[g / per_switch]));
    to_host.emplace_back(memory[socket]);
    zone->add_route(gpus[g]->get_netpoint(), cpus[socket]->get_netpoint(), nullptr, nullptr, to_host, true);
    zone->add_route(gpus[g]->get_netpoint(), gateway, nullptr, nullptr, {up(pcie[g]), up(nics[g * node.nics / node.gpus])},
                    true);
    for (int h = g + 1; h < node.gpus; ++h)
      zone->add_route(gpus[g]->get_netpoint(), gpus[h]->get_netpoint(), nullptr, nullptr, {up(nvlink[g]), down(nvlink[h])},
                      true);
  }
  if (node.has_gds()) {
    // GPUDirect Storage: the drives sit behind the PCIe switches; a transfer crosses the GPU's PCIe
    // link and its switch's peer-to-peer path, shared by the switch's GPUs.
    auto* endpoint = zone->create_host(name(n, "nvme_p2p"), 1.0)->seal();
    gds_.push_back(endpoint);
    std::vector<sg4::Link*> gds;
    for (int s = 0; s < (node.gpus + per_switch - 1) / per_switch; ++s)
      gds.push_back(zone->create_split_duplex_link(name(n, "gds", s), node.gds_bandwidth)->set_latency(0)->seal());
    for (int g = 0; g < node.gpus; ++g)
      zone->add_route(gpus[g]->get_netpoint(), endpoint->get_netpoint(), nullptr, nullptr,
                      {up(pcie[g]), up(gds[g / per_switch])}, true);
  }
  zone->seal();

  auto* port = fabric->create_split_duplex_link(name(n, "fabric_port"), node.nic_bandwidth_total())->set_latency(0)->seal();
  fabric->add_route(zone->get_netpoint(), nullptr, gateway, nullptr, {up(port)}, true);

  // The NVMe drives form one RAID-0 array per node: one disk with the array's aggregate bandwidths.
  auto* disk = cpus[0]->create_disk(name(n, "nvme"), node.nvme_read_bandwidth, node.nvme_write_bandwidth);
  disk->seal();
  disks_.push_back(disk);
  gpus_.insert(gpus_.end(), gpus.begin(), gpus.end());
  cpus_.insert(cpus_.end(), cpus.begin(), cpus.end());
}

sg4::Host* Platform::cpu_of(int rank) const {
  const int socket = local_of(rank) * hw_.node.cpu_sockets / hw_.node.gpus;
  return cpu(node_of(rank), socket);
}

double Platform::latency(Path p) const {
  switch (p) {
    case Path::HostToDevice:
    case Path::DeviceToHost: return hw_.node.pcie_latency;
    case Path::NvLink: return hw_.node.nvlink_latency;
    case Path::Fabric: return hw_.fabric.latency;
  }
  return 0;
}

}  // namespace zinf::sim
