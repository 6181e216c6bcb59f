#include "sim/collectives.hpp"

#include <algorithm>
#include <stdexcept>

namespace zinf::sim {

using core::TaskKind;

const char* to_string(CollectiveAlgorithm a) {
  return a == CollectiveAlgorithm::Ring ? "ring" : "hierarchical";
}

CollectiveAlgorithm parse_collective_algorithm(const std::string& text) {
  if (text == "ring") return CollectiveAlgorithm::Ring;
  if (text == "hierarchical") return CollectiveAlgorithm::Hierarchical;
  throw std::invalid_argument("unknown collective algorithm '" + text + "' (ring | hierarchical)");
}

namespace {

struct Builder {
  const CollectiveShape& c;
  HopLatency hop;
  std::vector<CollectivePhase> phases;

  bool crosses(const std::vector<int>& members) const {
    for (int m : members)
      if (m / c.gpus_per_node != members.front() / c.gpus_per_node) return true;
    return false;
  }

  // Several disjoint rings (or chains) that run at the same time form one phase. `steps(k)` is the
  // number of latency-bearing steps of one ring of k members; `bytes(k, i)` what each member of
  // the i-th ring sends.
  template <class Steps, class Bytes>
  void phase(const std::vector<std::vector<int>>& groups, bool chain, Steps steps, Bytes bytes) {
    CollectivePhase p;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const auto& g = groups[gi];
      const int k = static_cast<int>(g.size());
      if (k < 2) continue;
      const bool across = crosses(g);
      p.crosses_nodes = p.crosses_nodes || across;
      p.latency = std::max(p.latency, steps(k) * (across ? hop.inter : hop.intra));
      const int senders = chain ? k - 1 : k;
      for (int i = 0; i < senders; ++i) p.flows.push_back({g[i], g[(i + 1) % k], bytes(k, gi)});
    }
    if (!p.flows.empty()) phases.push_back(std::move(p));
  }

  // Rings at once in one phase; ring i carries sizes[i] (all `size` when sizes is empty).
  void ring(const std::vector<std::vector<int>>& groups, TaskKind kind, double size,
            const std::vector<double>& sizes = {}) {
    const bool all_reduce = kind == TaskKind::AllReduce;
    phase(groups, false, [&](int k) { return (all_reduce ? 2.0 : 1.0) * (k - 1); },
          [&](int k, size_t i) { return (all_reduce ? 2.0 : 1.0) * (k - 1) / k * (sizes.empty() ? size : sizes[i]); });
  }

  // A ring across nodes as NCCL runs it: one channel per member a group has in each node, channel
  // c entering every node at its c-th member and leaving from the one before, each channel on
  // size / m. Every member's PCIe link and NIC thus carries one crossing each way, where a single
  // ring would cross each node boundary through one GPU's NIC. (NCCL 2.7.8's ring search,
  // src/graph/search.cc, with NCCL_CROSS_NIC's default 2: when a node holds one GPU of the
  // communicator per NIC, rings enter through one GPU's NIC and leave through another's.) A
  // group inside one node, or with unequal counts per node, stays one ring.
  void channel_ring(const std::vector<std::vector<int>>& groups, TaskKind kind, double size) {
    std::vector<std::vector<int>> rings;
    std::vector<double> sizes;
    for (const auto& g : groups) {
      const int m = per_node_members(g);
      if (m < 2) {
        rings.push_back(g);
        sizes.push_back(size);
        continue;
      }
      for (int ch = 0; ch < m; ++ch) {
        std::vector<int> order;
        for (size_t first = 0; first < g.size(); first += static_cast<size_t>(m))
          for (int i = 0; i < m; ++i) order.push_back(g[first + static_cast<size_t>((ch + i) % m)]);
        rings.push_back(std::move(order));
        sizes.push_back(size / m);
      }
    }
    ring(rings, kind, size, sizes);
  }

  // Members of a rank-ordered group in each node when every node it spans holds the same number
  // and it spans more than one; 0 otherwise.
  int per_node_members(const std::vector<int>& g) const {
    if (!crosses(g)) return 0;
    int m = 0, count = 0, node = g.front() / c.gpus_per_node;
    for (int r : g) {
      if (r / c.gpus_per_node != node) {
        if (m != 0 && count != m) return 0;
        m = count;
        count = 0;
        node = r / c.gpus_per_node;
      }
      ++count;
    }
    return count == m ? m : 0;
  }

  // Pipelined chain through `groups`, each listed from its first sender to its last receiver.
  void chain(const std::vector<std::vector<int>>& groups, double size) {
    phase(groups, true, [](int k) { return double(k - 1); }, [&](int, size_t) { return size; });
  }
};

// Members of a group listed starting at `first` (rotated), or ending at it when `reverse`.
std::vector<int> rotated(std::vector<int> g, int first, bool reverse) {
  size_t i = 0;
  while (i < g.size() && g[i] != first) ++i;
  std::vector<int> out;
  for (size_t j = 0; j < g.size(); ++j) out.push_back(g[(i + j) % g.size()]);
  if (reverse) {
    std::vector<int> r{out.front()};
    for (size_t j = out.size() - 1; j >= 1; --j) r.push_back(out[j]);
    out.assign(r.rbegin(), r.rend());
  }
  return out;
}

// One phase: in each of the `stride` groups every member sends bytes / k to each of the k - 1
// others, all at once (NCCL's all-to-all is such a group of sends and receives; DeepSpeed-MoE's
// _AllToAll calls it), so a member's sends share its links: (k - 1) / k of the buffer leaves it.
std::vector<CollectivePhase> all_to_all(const CollectiveShape& c, const HopLatency& latency) {
  CollectivePhase p;
  const int T = c.stride, k = c.ranks / T;
  if (k < 2 || c.bytes <= 0) return {};
  const double share = c.bytes / k;
  for (int j = 0; j < T; ++j)
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) {
        if (a == b) continue;
        const int src = j + a * T, dst = j + b * T;
        p.crosses_nodes = p.crosses_nodes || src / c.gpus_per_node != dst / c.gpus_per_node;
        p.flows.push_back({src, dst, share});
      }
  p.latency = p.crosses_nodes ? latency.inter : latency.intra;
  return {p};
}

}  // namespace

std::vector<CollectivePhase> collective_phases(const CollectiveShape& c, CollectiveAlgorithm algorithm,
                                               const HopLatency& latency) {
  if (!core::is_collective(c.kind)) throw std::invalid_argument("collective_phases: not a collective task kind");
  if (c.ranks < 1 || c.gpus_per_node < 1) throw std::invalid_argument("collective_phases: no ranks");
  const int T = c.stride;
  if (T < 1 || c.ranks % T != 0 || (c.ranks > T && std::min(c.gpus_per_node, c.ranks) % T != 0))
    throw std::invalid_argument("collective over strided groups: stride " + std::to_string(T) + " must divide the " +
                                std::to_string(c.ranks) + " ranks and a node's " + std::to_string(c.gpus_per_node) +
                                " GPUs");
  Builder b{c, latency, {}};
  if (c.kind == TaskKind::AllToAll) return all_to_all(c, latency);
  const int G = std::min(c.gpus_per_node, c.ranks);
  const bool hierarchical = algorithm == CollectiveAlgorithm::Hierarchical && c.ranks > G;
  if (hierarchical && c.ranks % G != 0)
    throw std::invalid_argument("hierarchical collective: " + std::to_string(c.ranks) +
                                " ranks do not fill nodes of " + std::to_string(G) + " GPUs");
  const bool rooted = c.kind == TaskKind::Broadcast || c.kind == TaskKind::Reduce;
  const bool reverse = c.kind == TaskKind::Reduce;
  // The T groups, each in rank order (node by node).
  std::vector<std::vector<int>> groups(static_cast<size_t>(T));
  for (int r = 0; r < c.ranks; ++r) groups[static_cast<size_t>(core::parallel_place(r, T).tensor)].push_back(r);

  if (!hierarchical) {
    if (rooted) {
      std::vector<std::vector<int>> chains;
      for (int j = 0; j < T; ++j) chains.push_back(rotated(groups[static_cast<size_t>(j)], c.root + j, reverse));
      b.chain(chains, c.bytes);
    } else {
      b.channel_ring(groups, c.kind, c.bytes);
    }
    return std::move(b.phases);
  }

  // Hierarchical: inside each node the group's L = G/T members; across nodes the rings of one
  // local index (each local index belongs to one group), each on the group's S/L.
  const int N = c.ranks / G, L = G / T;
  std::vector<std::vector<int>> intra(static_cast<size_t>(N * T)), inter(static_cast<size_t>(G));
  for (int r = 0; r < c.ranks; ++r) {
    intra[static_cast<size_t>((r / G) * T + r % T)].push_back(r);
    inter[static_cast<size_t>(r % G)].push_back(r);
  }
  const double S = c.bytes;
  switch (c.kind) {
    case TaskKind::AllGather:
      b.ring(inter, TaskKind::AllGather, S / L);
      b.ring(intra, TaskKind::AllGather, S);
      break;
    case TaskKind::ReduceScatter:
      b.ring(intra, TaskKind::ReduceScatter, S);
      b.ring(inter, TaskKind::ReduceScatter, S / L);
      break;
    case TaskKind::AllReduce:
      b.ring(intra, TaskKind::ReduceScatter, S);
      b.ring(inter, TaskKind::AllReduce, S / L);
      b.ring(intra, TaskKind::AllGather, S);
      break;
    case TaskKind::Broadcast:
    case TaskKind::Reduce: {
      std::vector<std::vector<int>> inside, across;
      for (int j = 0; j < T; ++j) {
        const int root = c.root + j, root_local = root % G, root_node = root / G;
        for (int n = 0; n < N; ++n)
          inside.push_back(rotated(intra[static_cast<size_t>(n * T + j)], n * G + root_local, reverse));
        across.push_back(rotated(inter[static_cast<size_t>(root_local)], root_node * G + root_local, reverse));
      }
      if (reverse) {
        b.chain(inside, S);
        b.chain(across, S);
      } else {
        b.chain(across, S);
        b.chain(inside, S);
      }
      break;
    }
    default: break;
  }
  return std::move(b.phases);
}

void apply_nccl_call(std::vector<CollectivePhase>& phases, const core::NcclCall& call) {
  for (size_t i = 0; i < phases.size(); ++i) {
    phases[i].latency = i == 0 ? call.latency : 0.0;
    for (auto& f : phases[i].flows) f.bytes *= call.transfer_scale;
  }
}

std::vector<sg4::ActivityPtr> start_flows(const Platform& platform, const CollectivePhase& p) {
  std::vector<sg4::ActivityPtr> comms;
  comms.reserve(p.flows.size());
  for (const auto& f : p.flows)
    comms.push_back(sg4::Comm::sendto_async(platform.gpu(f.src), platform.gpu(f.dst), static_cast<uint64_t>(f.bytes)));
  return comms;
}

size_t execute_phase(const Platform& platform, const CollectivePhase& p) {
  size_t started = 0;
  if (p.latency > 0) {
    sg4::this_actor::sleep_for(p.latency);
    ++started;
  }
  auto flows = start_flows(platform, p);
  for (auto& f : flows) f->wait();
  return started + flows.size();
}

size_t execute_phases(const Platform& platform, const std::vector<CollectivePhase>& phases) {
  size_t started = 0;
  for (const auto& p : phases) started += execute_phase(platform, p);
  return started;
}

}  // namespace zinf::sim
