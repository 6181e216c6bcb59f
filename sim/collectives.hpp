// Collectives as the flows of their algorithm. A ring over k ranks is step-aggregated: each rank
// sends one flow of (k-1)/k·S bytes (all-gather, reduce-scatter) or 2(k-1)/k·S (all-reduce) to its
// successor, all flows at once, and the per-step latency is charged analytically before the flows
// start. Under exact max-min sharing this gives the step-by-step ring's time whenever the ring's
// links are alike (tests/sim_collectives_test.cpp checks it against hand-computed rings), at one
// flow per rank instead of k-1.
// Hierarchical: a ring inside each node over NVLink and a ring across nodes among the GPUs of the
// same local index over the NICs (reduce-scatter inside then across; all-gather across then inside;
// all-reduce as reduce-scatter inside, all-reduce across on S/G, all-gather inside). Broadcast and
// reduce are pipelined chains from / to the root. Pure functions, thread-safe.
// All-to-all (expert parallelism): one phase in which every member sends S/k to each other member
// of its group; a member's k - 1 flows share its NVLink port or NIC, so over a link of bandwidth B
// it takes (k-1)/k·S/B plus one hop's latency.
// Strided groups (tensor parallelism T): a ZeRO collective runs in T data-parallel groups at once,
// group j = {j, j+T, j+2T, ...}, each over its own S bytes (its share of every layer). A group has
// G/T members in each node: its ring (flat) visits them in order then crosses to the next node, so
// each node boundary carries T flows, one per group; hierarchically, T rings of G/T members inside
// each node and, across nodes, the same G rings of one local index as for T = 1, each on S·T/G.
// Either way a node receives T·S bytes from the fabric per all-gather (all of its groups' shares
// of the layer), not S: with T = 1 the two coincide.
#pragma once
#include <string>
#include <vector>

#include "core/nccl.hpp"
#include "core/program.hpp"
#include "sim/platform.hpp"

namespace zinf::sim {

enum class CollectiveAlgorithm { Ring, Hierarchical };
const char* to_string(CollectiveAlgorithm a);
CollectiveAlgorithm parse_collective_algorithm(const std::string& text);  // "ring" | "hierarchical"

struct Flow {
  int src = 0;  // ranks
  int dst = 0;
  double bytes = 0;
};

// One phase: all its flows start together after `latency` seconds and the next phase starts when
// they have all ended.
struct CollectivePhase {
  std::vector<Flow> flows;
  double latency = 0;
  bool crosses_nodes = false;
};

struct CollectiveShape {
  core::TaskKind kind = core::TaskKind::AllGather;
  int ranks = 1;          // participants: ranks 0 .. ranks-1, numbered node by node
  int gpus_per_node = 1;
  double bytes = 0;       // S: the full (gathered / reduced) buffer
  int root = 0;           // Broadcast / Reduce: a rank of group 0; group j's root is root + j
  int stride = 1;         // T: `stride` groups of ranks / stride members, group j = {j + stride·i}
};

struct HopLatency {
  double intra = 0;  // one hop inside a node (NVLink)
  double inter = 0;  // one hop across nodes (fabric)
};

std::vector<CollectivePhase> collective_phases(const CollectiveShape& c, CollectiveAlgorithm algorithm,
                                               const HopLatency& latency);

// The phases of one NCCL call priced by NCCL's tuning model (core/nccl.hpp): its latency once,
// before the first phase, in place of the per-hop latencies, and every flow's bytes scaled by the
// call's transfer_scale (the protocol's or the tree's bandwidth against the ring/Simple the flows
// carry), so that contention on shared links still decides how long they take.
void apply_nccl_call(std::vector<CollectivePhase>& phases, const core::NcclCall& call);

// Starts every flow of one phase on the platform's GPUs (its latency is the caller's to wait).
std::vector<sg4::ActivityPtr> start_flows(const Platform& platform, const CollectivePhase& phase);
// Runs one phase on the platform's GPUs, from inside an actor: waits its latency, starts every flow
// and waits for all of them. Returns the number of activities it started.
size_t execute_phase(const Platform& platform, const CollectivePhase& phase);
// The phases one after the other.
size_t execute_phases(const Platform& platform, const std::vector<CollectivePhase>& phases);

}  // namespace zinf::sim
