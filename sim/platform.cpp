#include "sim/platform.hpp"

#include <xbt/log.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
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

using Dir = sg4::LinkInRoute::Direction;

}  // namespace

Platform::Platform(const core::HwProfile& hw, int nodes, uint64_t seed) : hw_(hw), nodes_(nodes) {
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

  zone_ = ClusterZone::create_root("cluster");
  nodes_links_.resize(static_cast<size_t>(nodes));
  gpus_.reserve(static_cast<size_t>(ranks()));
  for (int n = 0; n < nodes; ++n) build_node(n);
  if (hw_.fabric.is_tree()) build_tree(seed);
  zone_->set_router([this](unsigned long src, unsigned long dst, ClusterZone::Links& links) { route(src, dst, links); });
  zone_->get_iface()->seal();
}

Platform::~Platform() = default;

sg4::Host* Platform::add_host(const std::string& host_name, double speed, Endpoint who) {
  auto* h = zone_->get_iface()->create_host(host_name, speed)->seal();
  const auto id = h->get_netpoint()->id();
  if (who_.size() <= id) who_.resize(id + 1);
  who_[id] = who;
  return h;
}

std::pair<ClusterZone::LinkImpl*, ClusterZone::LinkImpl*> Platform::duplex(const std::string& link_name, double bandwidth) {
  auto* l = zone_->get_iface()->create_split_duplex_link(link_name, bandwidth)->set_latency(0)->seal();
  return {known(zone_->one_way(l, Dir::UP), bandwidth), known(zone_->one_way(l, Dir::DOWN), bandwidth)};
}

ClusterZone::LinkImpl* Platform::known(ClusterZone::LinkImpl* link, double bandwidth) {
  link_id_.emplace(link, static_cast<int>(link_bandwidth_.size()));
  link_bandwidth_.push_back(bandwidth);
  return link;
}

void Platform::links_between(const sg4::Host* from, const sg4::Host* to, std::vector<int>& ids) const {
  thread_local ClusterZone::Links links;
  links.clear();
  route(from->get_netpoint()->id(), to->get_netpoint()->id(), links);
  ids.clear();
  for (const auto* l : links) ids.push_back(link_id_.at(l));
}

void Platform::build_node(int n) {
  const auto& node = hw_.node;
  auto& L = nodes_links_[static_cast<size_t>(n)];
  for (int g = 0; g < node.gpus; ++g) gpus_.push_back(add_host(name(n, "gpu", g), node.gpu.peak_flops, {Kind::Gpu, n, g}));
  const double socket_rate = node.cpu_adam_rate / node.cpu_sockets;
  for (int s = 0; s < node.cpu_sockets; ++s) cpus_.push_back(add_host(name(n, "cpu", s), socket_rate, {Kind::Cpu, n, s}));
  // The pool delivers core_capacity() one-thread rates in all; each exec on it is one thread and is
  // bounded at one thread's rate (the simulator sets the bound), so k busy threads each get
  // min(1, capacity / k): with capacity = cores this is a cores-core host.
  if (node.device_shares_host_cores) cores_.push_back(add_host(name(n, "cores"), node.core_capacity(), {Kind::Cores, n, 0}));

  for (int s = 0; s < node.cpu_sockets; ++s) {
    auto* m = zone_->get_iface()
                  ->create_link(name(n, "mem", s), node.host_memory_bandwidth / node.cpu_sockets)
                  ->set_sharing_policy(sg4::Link::SharingPolicy::SHARED)
                  ->set_latency(0)
                  ->seal();
    L.memory.push_back(known(zone_->one_way(m, Dir::NONE), node.host_memory_bandwidth / node.cpu_sockets));
  }
  const int per_switch = std::max(1, std::min(node.gpus_per_pcie_switch, node.gpus));
  const int switches = (node.gpus + per_switch - 1) / per_switch;
  if (node.pcie_switch_uplink > 0)
    for (int s = 0; s < switches; ++s) L.uplink.push_back(duplex(name(n, "pcie_switch", s), node.pcie_switch_uplink));
  for (int c = 0; c < node.nics; ++c) L.nic.push_back(duplex(name(n, "nic", c), node.nic_bandwidth));
  for (int g = 0; g < node.gpus; ++g) {
    L.pcie.push_back(duplex(name(n, "pcie", g), node.pcie_bandwidth));
    L.nvlink.push_back(duplex(name(n, "nvlink", g), node.nvlink_bandwidth));
  }
  if (node.has_gds()) {
    // GPUDirect Storage: the drives sit behind the PCIe switches; a transfer crosses the GPU's PCIe
    // link and its switch's peer-to-peer path, shared by the switch's GPUs.
    gds_.push_back(add_host(name(n, "nvme_p2p"), 1.0, {Kind::NvmeP2p, n, 0}));
    for (int s = 0; s < switches; ++s) L.gds.push_back(duplex(name(n, "gds", s), node.gds_bandwidth));
  }
  // The NVMe drives form one RAID-0 array per node, with the array's aggregate bandwidths.
  nvme_.push_back(add_host(name(n, "nvme"), 1.0, {Kind::Nvme, n, 0}));
  auto shared = [&](const std::string& what, double bw) {
    auto* l = zone_->get_iface()->create_link(name(n, what), bw)->set_sharing_policy(sg4::Link::SharingPolicy::SHARED)->set_latency(0)->seal();
    return known(zone_->one_way(l, Dir::NONE), bw);
  };
  L.nvme_read = shared("nvme_read", node.nvme_read_bandwidth);
  L.nvme_write = shared("nvme_write", node.nvme_write_bandwidth);
  L.nvme_both = shared("nvme_rw", std::max(node.nvme_read_bandwidth, node.nvme_write_bandwidth));
}

// The tree's switch-to-switch cables, and where each node's NIC ports sit among the tree's ports.
void Platform::build_tree(uint64_t seed) {
  const auto& f = hw_.fabric;
  tree_ = std::make_unique<FatTreeRoutes>(f.tree_children, f.tree_parents);
  const int nics = hw_.node.nics;
  const int64_t slots = tree_->endpoints() / nics;  // places for a whole node
  if (slots < nodes_)
    throw std::invalid_argument("fabric.tree: " + std::to_string(tree_->endpoints()) + " ports hold " +
                                std::to_string(slots) + " nodes of " + std::to_string(nics) + " NICs, fewer than the " +
                                std::to_string(nodes_) + " simulated");
  std::vector<int64_t> slot(static_cast<size_t>(slots));
  std::iota(slot.begin(), slot.end(), 0);
  if (f.placement == "scattered") {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 0x5CA77E8ED);
    for (int64_t i = 0; i < nodes_; ++i)  // the first `nodes_` entries of a Fisher-Yates shuffle
      std::swap(slot[static_cast<size_t>(i)],
                slot[static_cast<size_t>(i + int64_t(rng() % uint64_t(slots - i)))]);
  }
  port_of_node_.assign(slot.begin(), slot.begin() + nodes_);
  for (auto& p : port_of_node_) p *= nics;
  const double bw = f.tree_link_bandwidth > 0 ? f.tree_link_bandwidth : hw_.node.nic_bandwidth;
  cables_.reserve(static_cast<size_t>(tree_->cables()));
  for (int64_t c = 0; c < tree_->cables(); ++c) cables_.push_back(duplex(tree_->cable_name(c), bw));
}

// Routes, as the hardware carries them:
//   GPU <-> GPU, same node : nvlink(src) up, nvlink(dst) down
//   GPU <-> its CPU socket  : pcie(gpu), switch uplink (when shared), host memory of the socket
//   GPU <-> other node     : pcie(gpu), nic(gpu), [tree cables], nic, pcie
//   GPU <-> NVMe over GDS  : pcie(gpu), gds(switch)
void Platform::route(unsigned long src, unsigned long dst, ClusterZone::Links& links) const {
  Endpoint a = who_.at(src), b = who_.at(dst);
  if (a.kind == Kind::Nvme || b.kind == Kind::Nvme) {
    const auto& L = nodes_links_[static_cast<size_t>(a.node)];
    if (a.node != b.node || (a.kind != Kind::Cpu && b.kind != Kind::Cpu))
      throw std::logic_error("the NVMe array moves data to and from its own node's host only");
    links.push_back(a.kind == Kind::Nvme ? L.nvme_read : L.nvme_write);
    links.push_back(L.nvme_both);
    return;
  }
  bool reverse = false;  // routes are written from the GPU's side; the other way crosses the same links back
  if (a.kind != Kind::Gpu) {
    std::swap(a, b);
    reverse = true;
  }
  if (a.kind != Kind::Gpu) throw std::logic_error("the simulator moves data only to or from a GPU");
  auto pick = [reverse](const std::pair<ClusterZone::LinkImpl*, ClusterZone::LinkImpl*>& d, bool out) {
    return (out != reverse) ? d.first : d.second;
  };
  const auto& A = nodes_links_[static_cast<size_t>(a.node)];
  const auto& node = hw_.node;
  const int per_switch = std::max(1, std::min(node.gpus_per_pcie_switch, node.gpus));
  switch (b.kind) {
    case Kind::Gpu:
      if (a.node == b.node) {
        links.push_back(pick(A.nvlink[static_cast<size_t>(a.index)], true));
        links.push_back(pick(nodes_links_[static_cast<size_t>(b.node)].nvlink[static_cast<size_t>(b.index)], false));
      } else {
        across_nodes(a, b, reverse, links);
      }
      return;
    case Kind::Cpu:
      if (a.node != b.node) break;
      links.push_back(pick(A.pcie[static_cast<size_t>(a.index)], true));
      if (!A.uplink.empty()) links.push_back(pick(A.uplink[static_cast<size_t>(a.index / per_switch)], true));
      links.push_back(A.memory[static_cast<size_t>(b.index)]);
      return;
    case Kind::NvmeP2p:
      if (a.node != b.node) break;
      links.push_back(pick(A.pcie[static_cast<size_t>(a.index)], true));
      links.push_back(pick(A.gds[static_cast<size_t>(a.index / per_switch)], true));
      return;
    case Kind::Cores:
    case Kind::Nvme: break;
  }
  throw std::logic_error("no route between these hosts of the simulated platform");
}

void Platform::across_nodes(const Endpoint& a, const Endpoint& b, bool reverse, ClusterZone::Links& links) const {
  // Written for a -> b; `reverse`: the transfer runs b -> a, over each link's other direction.
  const auto& node = hw_.node;
  const int nic_a = a.index * node.nics / node.gpus, nic_b = b.index * node.nics / node.gpus;
  const auto& A = nodes_links_[static_cast<size_t>(a.node)];
  const auto& B = nodes_links_[static_cast<size_t>(b.node)];
  auto dir = [reverse](const std::pair<ClusterZone::LinkImpl*, ClusterZone::LinkImpl*>& d, bool out) {
    return (out != reverse) ? d.first : d.second;
  };
  links.push_back(dir(A.pcie[static_cast<size_t>(a.index)], true));
  links.push_back(dir(A.nic[static_cast<size_t>(nic_a)], true));
  if (tree_) {
    const int64_t pa = port_of_node_[static_cast<size_t>(a.node)] + nic_a;
    const int64_t pb = port_of_node_[static_cast<size_t>(b.node)] + nic_b;
    thread_local std::vector<int64_t> up, down;
    // Static routing is not symmetric: the way back is the route from b's port to a's.
    if (reverse)
      tree_->route(pb, pa, up, down);
    else
      tree_->route(pa, pb, up, down);
    for (int64_t c : up) links.push_back(cables_[static_cast<size_t>(c)].first);
    for (int64_t c : down) links.push_back(cables_[static_cast<size_t>(c)].second);
  }
  links.push_back(dir(B.nic[static_cast<size_t>(nic_b)], false));
  links.push_back(dir(B.pcie[static_cast<size_t>(b.index)], false));
}

sg4::ActivityPtr Platform::nvme_read(int node, double bytes) const {
  return sg4::Comm::sendto_async(nvme_[static_cast<size_t>(node)], cpu(node, 0), static_cast<uint64_t>(bytes));
}

sg4::ActivityPtr Platform::nvme_write(int node, double bytes) const {
  return sg4::Comm::sendto_async(cpu(node, 0), nvme_[static_cast<size_t>(node)], static_cast<uint64_t>(bytes));
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
