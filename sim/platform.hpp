// The SimGrid platform of a cluster described by a HwProfile: `nodes` copies of the profile's node
// joined by a fabric. Per node: one host per GPU (compute at the GPU's peak rate), one host per CPU
// socket (CPU Adam at the socket's share of the node's rate), a PCIe link per GPU, a shared switch
// uplink per group of GPUs that the profile says share one, a host-memory link per socket, an NVLink
// link per GPU into a non-blocking NVSwitch, the NICs, and the NVMe array as a disk with its own read
// and write bandwidths. Routes:
//   GPU <-> GPU, same node : nvlink(src) up, nvlink(dst) down
//   GPU <-> its CPU socket  : pcie(gpu), switch uplink (when shared), host memory of the socket
//   GPU <-> other node     : pcie(gpu), nic(gpu), [fabric cables], nic, pcie
//   GPU <-> NVMe over GDS  : pcie(gpu), gds(switch) to the node's `nvme_p2p` endpoint — not the host
//                            memory link, not the switch uplink (only when the profile has node.gds)
//   NVMe array <-> socket 0: nvme read (or write), nvme read+write: the drives alone
// The fabric is either non-blocking (`fabric.topology: full`: a NIC reaches any other at its own
// bandwidth, no cable in between) or a multi-stage fat tree whose switch-to-switch cables a transfer
// crosses as static routing sends it (`fat-tree`, sim/fat_tree.hpp), the job's nodes packed on the
// tree's ports or scattered over them from `seed`.
// All of it is one netzone whose routes are computed per transfer (sim/cluster_zone.hpp).
//
// A profile whose device shares the host's cores (the CPU backend) also gets, per node, one host
// `cores` with the node's cpu_cores cores at speed 1 (an exec's amount is the seconds one core
// needs): compute, CPU Adam and host copies of every rank on the node run there, and SimGrid gives
// each exec at most one core and time-shares the cores among the execs that want them.
//
// Every link has zero latency and the engine runs SimGrid's CM02 model without cross-traffic and
// without the TCP window bound, so that bandwidth sharing is exact max-min fairness; per-transfer
// latencies from the profile are charged by the simulator outside the links (latency()).
//
// SimGrid's engine is a process-wide singleton that cannot be created twice (its clock and its
// configuration survive it): build one platform per process; see isolate.hpp to run many.
#pragma once
#include <simgrid/s4u.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/hwprofile.hpp"
#include "sim/cluster_zone.hpp"
#include "sim/fat_tree.hpp"

namespace zinf::sim {

namespace sg4 = simgrid::s4u;

// Which links a transfer crosses, for latency and accounting.
enum class Path { HostToDevice, DeviceToHost, NvLink, Fabric };

class Platform {
public:
  // Creates the SimGrid engine (quiet: warnings and errors only), configures exact bandwidth sharing
  // and builds the platform. Throws std::logic_error if an engine already exists in this process.
  // `seed` places the nodes on a fat tree whose placement is `scattered` (otherwise unused).
  Platform(const core::HwProfile& hw, int nodes, uint64_t seed = 1);
  ~Platform();
  Platform(const Platform&) = delete;
  Platform& operator=(const Platform&) = delete;

  const core::HwProfile& hw() const { return hw_; }
  int nodes() const { return nodes_; }
  int ranks() const { return nodes_ * hw_.node.gpus; }
  int gpus_per_node() const { return hw_.node.gpus; }
  int node_of(int rank) const { return rank / hw_.node.gpus; }
  int local_of(int rank) const { return rank % hw_.node.gpus; }

  sg4::Host* gpu(int rank) const { return gpus_[rank]; }
  // The CPU socket a GPU is attached to.
  sg4::Host* cpu_of(int rank) const;
  sg4::Host* cpu(int node, int socket) const { return cpus_[node * hw_.node.cpu_sockets + socket]; }
  // The node's NVMe array as a transfer: read from it into the node's first socket, or written from
  // there. The array is a host behind three links, one each for reads and writes at their
  // bandwidths and one of the larger of the two that both cross (SimGrid's disk model, as flows:
  // its disk activities, started outside an actor, are never released in SimGrid 3.32).
  sg4::ActivityPtr nvme_read(int node, double bytes) const;
  sg4::ActivityPtr nvme_write(int node, double bytes) const;
  // The node's NVMe array as a host: transfers from it are reads into socket 0, to it writes.
  sg4::Host* nvme(int node) const { return nvme_[node]; }
  // The NVMe array's end of the GPUDirect Storage routes, or nullptr when the profile has no GDS.
  sg4::Host* gds_endpoint(int node) const { return gds_.empty() ? nullptr : gds_[node]; }
  // The node's shared core pool, or nullptr when the profile's device has cores of its own.
  sg4::Host* cores(int node) const { return cores_.empty() ? nullptr : cores_[node]; }
  sg4::Engine& engine() { return *engine_; }

  // The links of the route from `from` to `to`, as ids 0 .. link_count()-1 (one per direction of a
  // split-duplex link), each with the bandwidth SimGrid shares (sim/flows.hpp solves with them).
  void links_between(const sg4::Host* from, const sg4::Host* to, std::vector<int>& ids) const;
  int link_count() const { return static_cast<int>(link_bandwidth_.size()); }
  double link_bandwidth(int id) const { return link_bandwidth_[static_cast<size_t>(id)]; }

  // Latency charged per transfer along a path (from the profile).
  double latency(Path p) const;
  Path path_between(int rank_a, int rank_b) const {
    return node_of(rank_a) == node_of(rank_b) ? Path::NvLink : Path::Fabric;
  }

  // Capacities, one direction, used to turn bytes moved into utilization.
  double pcie_bandwidth() const { return hw_.node.pcie_bandwidth; }
  double nic_bandwidth_total() const { return hw_.node.nic_bandwidth_total(); }

private:
  enum class Kind { Gpu, Cpu, Cores, NvmeP2p, Nvme };
  struct Endpoint {
    Kind kind = Kind::Gpu;
    int node = 0;
    int index = 0;  // GPU, socket
  };
  using Duplex = std::pair<ClusterZone::LinkImpl*, ClusterZone::LinkImpl*>;  // up (out of the GPU), down
  struct NodeLinks {
    std::vector<ClusterZone::LinkImpl*> memory;  // per socket, shared by both directions
    std::vector<Duplex> uplink, nic, pcie, nvlink, gds;
    ClusterZone::LinkImpl *nvme_read = nullptr, *nvme_write = nullptr, *nvme_both = nullptr;
  };

  sg4::Host* add_host(const std::string& name, double speed, Endpoint who);
  ClusterZone::LinkImpl* known(ClusterZone::LinkImpl* link, double bandwidth);
  Duplex duplex(const std::string& name, double bandwidth);
  void build_node(int n);
  void build_tree(uint64_t seed);
  void route(unsigned long src, unsigned long dst, ClusterZone::Links& links) const;
  void across_nodes(const Endpoint& a, const Endpoint& b, bool reverse, ClusterZone::Links& links) const;

  core::HwProfile hw_;
  int nodes_;
  std::unique_ptr<sg4::Engine> engine_;
  ClusterZone* zone_ = nullptr;  // owned by the engine
  std::vector<Endpoint> who_;    // by netpoint id
  std::vector<NodeLinks> nodes_links_;
  std::unique_ptr<FatTreeRoutes> tree_;
  std::vector<Duplex> cables_;            // the tree's, by cable id
  std::vector<int64_t> port_of_node_;     // the tree port of each node's NIC 0
  std::vector<sg4::Host*> gds_;
  std::vector<sg4::Host*> gpus_;
  std::vector<sg4::Host*> cpus_;
  std::vector<sg4::Host*> nvme_;
  std::vector<sg4::Host*> cores_;
  std::unordered_map<const ClusterZone::LinkImpl*, int> link_id_;
  std::vector<double> link_bandwidth_;
};

}  // namespace zinf::sim
