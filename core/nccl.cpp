#include "core/nccl.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace zinf::core {

const char* to_string(NcclAlgorithm a) { return a == NcclAlgorithm::Tree ? "tree" : "ring"; }

const char* to_string(NcclProtocol p) {
  switch (p) {
    case NcclProtocol::LL: return "LL";
    case NcclProtocol::LL128: return "LL128";
    case NcclProtocol::Simple: return "Simple";
  }
  return "?";
}

namespace {

// Indices as NCCL's: algorithm 0 tree, 1 ring; protocol 0 LL, 1 LL128, 2 Simple; hardware 0 NVLink,
// 1 PCI, 2 network. Latencies in microseconds, bandwidths in GB/s.
struct Release {
  const char* name;
  float base_lat[2][3];
  float hw_lat[3][2][3];
  float tree_correction[3][23];  // by log2(bytes / 64), 64 B up
  int tree_correction_sizes;     // entries of tree_correction NCCL reads
  // The model's refinements, which changed between releases.
  double tree_bus;               // the tree's bus bandwidth over the ring's: 0.9 (2.7), 0.92 (2.8 on)
  bool tree_absolute_cap;        // 2.7: the tree's bus bandwidth capped at 80 / 110 GB/s (105 / 130 for LL128 on Ampere)
  double tree_ll128_nodes;       // LL128's share of the tree across nodes: 0.915, or 120 / 128 (2.18)
  int ll_cap_rows;               // 2.8 on: LL capped by llMaxBws (rows: Volta/Intel, Ampere/AMD[, Hopper]); 0: no cap
  bool ll_intra_18;              // LL's NVLink/PCI step x 1.8 across nodes (2.7, 2.8)
  bool net_overhead;             // 2.18: a ring step across nodes costs at least the network post overhead
  bool all_reduce_inter_2n;      // 2.18: an all-reduce's network steps are 2 x nodes, not 2 x (nodes - 1)
};

// src/graph/tuning.cc at v2.7.8-1 (PyTorch 1.8's wheels).
constexpr Release kNccl278{
    "2.7.8",
    {{4.4f, 4.4f, 0}, {3.6f, 10.0f, 8.4f}},
    {{{.52f, 1.2f, 28}, {.47f, 1.9f, 3.4f}}, {{1.0f, 1.9f, 28}, {1.0f, 2.5f, 5.7f}}, {{5.0f, 8.5f, 50}, {2.7f, 4.0f, 9.6f}}},
    {{1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .7f, .7f, .7f, .7f, .6f, .5f, .4f, .4f, .5f, .6f, .7f, .8f, .9f, 1.0f, 1.0f, 1.0f, 0},
     {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .8f, .8f, .7f, .6f, .6f, .6f, .5f, .6f, .6f, .7f, .7f, .8f, .9f, .9f, 1.0f, 0},
     {.9f, .9f, .9f, .9f, .9f, .9f, .9f, .8f, .7f, .6f, .6f, .5f, .5f, .5f, .5f, .5f, .5f, .6f, .6f, .7f, .8f, .9f, 0}},
    22, 0.9, true, 0.915, 0, true, false, false};

// src/graph/tuning.cc at v2.8.3-1 (NGC PyTorch 20.12's).
constexpr Release kNccl283{
    "2.8.3",
    {{4.4f, 4.4f, 0}, {3.6f, 10.0f, 8.4f}},
    {{{.52f, 1.25f, 28}, {.47f, 1.9f, 3.4f}}, {{1.0f, 1.9f, 28}, {1.0f, 2.5f, 5.7f}}, {{5.0f, 8.5f, 28}, {2.7f, 4.0f, 9.6f}}},
    {{1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .7f, .7f, .7f, .7f, .6f, .5f, .4f, .4f, .5f, .6f, .7f, .8f, .9f, 1.0f, 1.0f, 1.0f, 1.0f},
     {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .8f, .8f, .7f, .6f, .6f, .6f, .5f, .6f, .6f, .7f, .7f, .8f, .9f, .9f, .92f, .92f},
     {.9f, .9f, .9f, .9f, .9f, .9f, .9f, .8f, .7f, .6f, .6f, .5f, .5f, .5f, .5f, .6f, .7f, .8f, .7f, .7f, .8f, .9f, .9f}},
    23, 0.92, false, 0.915, 2, true, false, false};

// src/graph/tuning.cc at v2.18.3-1 (the PyTorch 2.1 era; Hopper).
constexpr Release kNccl2183{
    "2.18.3",
    {{6.8f, 14.0f, 0}, {6.6f, 14.0f, 8.4f}},
    {{{.6f, 1.25f, 4}, {.6f, 1.9f, 3.4f}}, {{1.0f, 1.9f, 6}, {1.0f, 2.5f, 5.7f}}, {{5.0f, 8.5f, 14}, {2.7f, 4.0f, 14.0f}}},
    {{1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .7f, .7f, .7f, .7f, .6f, .5f, .4f, .4f, .5f, .6f, .7f, .8f, .9f, 1.0f, 1.0f, 1.0f, 1.0f},
     {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, .9f, .8f, .8f, .8f, .7f, .6f, .6f, .6f, .6f, .6f, .6f, .8f, .9f, .9f, .9f, .9f, 1.0f, 1.0f},
     {.9f, .9f, .9f, .9f, .9f, .9f, .9f, .8f, .7f, .6f, .6f, .5f, .5f, .5f, .5f, .6f, .7f, .8f, .7f, .7f, .8f, .9f, .9f}},
    23, 0.92, false, 120.0 / 128.0, 3, false, true, true};

constexpr const Release* kReleases[] = {&kNccl278, &kNccl283, &kNccl2183};

const Release& release_of(const std::string& name) {
  for (const Release* r : kReleases)
    if (name == r->name) return *r;
  throw std::invalid_argument("unknown NCCL release '" + name + "' (tabled: 2.7.8, 2.8.3, 2.18.3)");
}

int log2i(double v) { return v < 1 ? 0 : static_cast<int>(std::floor(std::log2(v))); }

// llMaxBws (GB/s): one node by GPU generation, more nodes by the host's CPU vendor; by 1, 2 or more nodes.
double ll_max_bw(const Release& rel, const NcclSpec& s, int nodes) {
  static const double caps[3][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {87.7, 22.5, 19.0}};
  const int gen = std::min(rel.ll_cap_rows - 1, s.sm >= 90 ? 2 : s.sm >= 80 ? 1 : 0);
  const int row = nodes == 1 ? gen : s.amd_cpu ? 1 : 0;
  return caps[row][nodes <= 2 ? nodes - 1 : 2];
}

}  // namespace

bool known_nccl_release(const std::string& release) {
  for (const Release* r : kReleases)
    if (release == r->name) return true;
  return false;
}

NcclCall nccl_call(const NcclSpec& nccl, TaskKind kind, double bytes, int ranks, int nodes, bool nvlink,
                   double ring_simple_seconds) {
  const Release& rel = release_of(nccl.release);
  if (!is_collective(kind)) throw std::invalid_argument("nccl_call: not a collective task kind");
  NcclCall best;
  if (ranks < 2 || bytes <= 0) return best;
  nodes = std::clamp(nodes, 1, ranks);
  const bool all_reduce = kind == TaskKind::AllReduce, rooted = kind == TaskKind::Broadcast || kind == TaskKind::Reduce;
  const int nsteps = all_reduce ? 2 * (ranks - 1) : rooted ? ranks : ranks - 1;
  const int inter_steps = all_reduce ? (rel.all_reduce_inter_2n ? (nodes > 1 ? 2 * nodes : 0) : 2 * (nodes - 1))
                          : rooted   ? nodes
                                     : nodes - 1;
  const double ppn = double(ranks) / nodes;
  const int intra_hw = nvlink ? 0 : 1, hw = nodes == 1 ? intra_hw : 2;
  // NCCL's bus bandwidth (GB/s), read off the ring/Simple transfer time: nBytes / (busBw x nRanks / nsteps).
  const double ring_ratio = double(ranks) / nsteps;
  const double bus = ring_simple_seconds > 0 ? bytes / (ring_simple_seconds * ring_ratio) / 1e9
                                             : std::numeric_limits<double>::infinity();
  const bool cc80 = nccl.sm == 80;
  best.seconds = std::numeric_limits<double>::infinity();
  for (int a = 0; a < 2; ++a) {
    if (a == 0 && !all_reduce) continue;  // tree: all-reduce only
    for (int p = 0; p < 3; ++p) {
      if (p == 1 && !nccl.ll128) continue;
      // Bus bandwidth of this algorithm and protocol (GB/s).
      double bw = bus;
      if (a == 1 && p == 0) {
        bw *= (nodes > 1 || all_reduce || kind == TaskKind::Reduce) ? 1.0 / 4.0 : 1.0 / 3.0;
        if (rel.ll_cap_rows > 0) bw = std::min(bw, ll_max_bw(rel, nccl, nodes));
      }
      if (a == 1 && p == 1) bw *= ppn < 2 ? 0.7 : 0.92;
      if (a == 0) {
        if (rel.tree_absolute_cap) {
          const double max_tree = nodes > 2 ? (cc80 && p == 1 ? 105.0 : 80.0) : (cc80 && p == 1 ? 130.0 : 110.0);
          bw = std::min(bw * rel.tree_bus, max_tree);
        } else {
          bw *= rel.tree_bus;
        }
        if (p == 0) bw /= 3.8;
        if (p == 0 && rel.ll_cap_rows > 0) bw = std::min(bw, ll_max_bw(rel, nccl, nodes));
        if (p == 1) bw *= nodes == 1 ? 7.0 / 9.0 : rel.tree_ll128_nodes;
        const int log_size = log2i(bytes / 64);
        if (log_size < rel.tree_correction_sizes) bw *= rel.tree_correction[p][log_size];
      }
      const double alg_bw = bw * (a == 1 ? ring_ratio : 0.5);
      // Latency (us).
      double lat = rel.base_lat[a][p];
      double intra = rel.hw_lat[intra_hw][a][p];
      const double inter = rel.hw_lat[2][a][p];
      if (rel.ll_intra_18 && nodes > 1 && p == 0) intra *= 1.8;
      if (a == 1) {
        if (rooted) {
          // The rings of a DGX's channels differ (NCCL's sameChannels is 0): a step per rank, and
          // for Simple the tree's chunk latency.
          lat += nsteps * rel.hw_lat[hw][p == 2 ? 0 : 1][p];
        } else {
          if (rel.net_overhead && nodes > 1) intra = std::max(intra, (nccl.amd_cpu ? 2.0 : 1.0) * (p == 2 ? 3.0 : 1.0));
          lat += (nsteps - inter_steps) * intra + inter_steps * inter;
        }
        // The ring's plateau across nodes (2.7, 2.8: from nRanks / 16 x 64 KiB; 2.18 counts bytes
        // per channel, whose number is not modelled, and applies 1.4 from Ampere on).
        if (p == 2 && all_reduce && nodes > 1 && bytes >= ranks / 16.0 * 65536)
          lat *= rel.net_overhead && nccl.sm >= 80 ? 1.4 : 1.9;
      } else {
        lat += 2 * ((ranks / nodes - 1) * intra + log2i(nodes) * inter);
      }
      const double seconds = lat * 1e-6 + bytes / (alg_bw * 1e9);
      if (seconds < best.seconds) {
        best.algorithm = a == 0 ? NcclAlgorithm::Tree : NcclAlgorithm::Ring;
        best.protocol = static_cast<NcclProtocol>(p);
        best.latency = lat * 1e-6;
        best.seconds = seconds;
        best.transfer_scale = ring_simple_seconds > 0 ? (seconds - best.latency) / ring_simple_seconds : 1.0;
      }
    }
  }
  return best;
}

}  // namespace zinf::core
