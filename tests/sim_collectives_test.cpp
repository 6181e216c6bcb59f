// Collectives as per-rank flows on the platform match the closed forms of their algorithms:
// ring all-gather / reduce-scatter / all-reduce over k ranks inside a node, a flat ring across
// nodes (a channel per member of a node, as NCCL runs it), the hierarchical algorithms, and
// pipelined broadcast. Each simulation runs in a child.
#include <simgrid/s4u.hpp>

#include <catch2/catch.hpp>
#include <string>

#include "core/hwprofile.hpp"
#include "core/timeline.hpp"
#include "sim/collectives.hpp"
#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "formats/hwprofile_reader.hpp"

using namespace zinf;
using core::TaskKind;
namespace sg4 = simgrid::s4u;

namespace {

// NVLink 100 GB/s per GPU, 2 us per hop; two NICs of 10 GB/s per node, 5 us fabric latency.
std::string profile(int gpus) {
  return "name: test\nnode:\n  gpus: " + std::to_string(gpus) +
         "\n  gpu: {name: g, memory: 16 GB, peak_flops: 100 TFLOP/s, memory_bandwidth: 1000 GB/s}\n"
         "  host: {memory: 512 GB, memory_bandwidth: 400 GB/s, cores: 8, adam_params_per_s: 1e9}\n"
         "  nvme: {capacity: 8 TB, read_bandwidth: 8 GB/s, write_bandwidth: 4 GB/s}\n"
         "  pcie: {bandwidth_per_gpu: 10 GB/s}\n"
         "  nvlink: {bandwidth_per_gpu: 100 GB/s, latency: 2 us}\n"
         "  nic: {count: 2, bandwidth: 10 GB/s}\n"
         "fabric: {latency: 5 us}\n";
}

constexpr double kNv = 100e9, kNvLat = 2e-6, kFabricLat = 5e-6;

double simulate(int gpus, int nodes, TaskKind kind, int ranks, double bytes, sim::CollectiveAlgorithm algo, int root = 0,
                int stride = 1) {
  std::string out = sim::run_isolated([&] {
    sim::Platform p(core::parse_hwprofile(profile(gpus), "test.yaml"), nodes);
    auto phases = sim::collective_phases({kind, ranks, gpus, bytes, root, stride}, algo, {kNvLat, kFabricLat});
    double end = 0;
    sg4::Actor::create("collective", p.gpu(0), [&] {
      sim::execute_phases(p, phases);
      end = sg4::Engine::get_clock();
    });
    p.engine().run();
    return std::to_string(end);
  });
  return std::stod(out);
}

}  // namespace

TEST_CASE("ring all-gather over k ranks of one node: (k-1)/k S / B + (k-1) hops") {
  const double S = 4e9;
  for (int k : {2, 4, 8}) {
    double expected = (k - 1.0) / k * S / kNv + (k - 1) * kNvLat;
    double t = simulate(8, 1, TaskKind::AllGather, k, S, sim::CollectiveAlgorithm::Ring);
    INFO("k = " << k);
    CHECK(t == Approx(expected).epsilon(0.01));
  }
}

TEST_CASE("ring reduce-scatter and all-reduce over 8 ranks") {
  const double S = 4e9;
  CHECK(simulate(8, 1, TaskKind::ReduceScatter, 8, S, sim::CollectiveAlgorithm::Ring) ==
        Approx(7.0 / 8 * S / kNv + 7 * kNvLat).epsilon(0.01));
  CHECK(simulate(8, 1, TaskKind::AllReduce, 8, S, sim::CollectiveAlgorithm::Ring) ==
        Approx(2 * 7.0 / 8 * S / kNv + 14 * kNvLat).epsilon(0.01));
}

TEST_CASE("a flat ring across two nodes runs a channel per member of a node, as NCCL does") {
  // 8 ranks, 4 per node: 4 channels of S/4, each entering a node at a different GPU. Every GPU
  // sends one crossing flow; two GPUs share each of a node's two 10 GB/s NICs: 5 GB/s each.
  const double S = 4e9;
  double t = simulate(4, 2, TaskKind::AllGather, 8, S, sim::CollectiveAlgorithm::Ring);
  CHECK(t == Approx(7.0 / 8 * (S / 4) / 5e9 + 7 * kFabricLat).epsilon(0.01));
  // The node's whole fabric share (20 GB/s), where one ring crossing through one NIC got 10 GB/s.
  CHECK(t == Approx(7.0 / 8 * S / 20e9 + 7 * kFabricLat).epsilon(0.01));
}

TEST_CASE("hierarchical all-gather, reduce-scatter and all-reduce over 2 nodes x 4 GPUs") {
  const double S = 4e9;
  // Across: 4 rings of 2 (one per local index); each GPU sends S/8 while two GPUs share a NIC: 5 GB/s.
  const double across_ag = 0.5 * (S / 4) / 5e9 + kFabricLat;
  const double inside = 3.0 / 4 * S / kNv + 3 * kNvLat;
  CHECK(simulate(4, 2, TaskKind::AllGather, 8, S, sim::CollectiveAlgorithm::Hierarchical) ==
        Approx(across_ag + inside).epsilon(0.01));
  CHECK(simulate(4, 2, TaskKind::ReduceScatter, 8, S, sim::CollectiveAlgorithm::Hierarchical) ==
        Approx(inside + across_ag).epsilon(0.01));
  const double across_ar = 2 * 0.5 * (S / 4) / 5e9 + 2 * kFabricLat;
  CHECK(simulate(4, 2, TaskKind::AllReduce, 8, S, sim::CollectiveAlgorithm::Hierarchical) ==
        Approx(inside + across_ar + inside).epsilon(0.01));
}

TEST_CASE("pipelined broadcast from any root: S / B + (k-1) hops") {
  const double S = 1e9;
  CHECK(simulate(8, 1, TaskKind::Broadcast, 8, S, sim::CollectiveAlgorithm::Ring, 3) ==
        Approx(S / kNv + 7 * kNvLat).epsilon(0.01));
  CHECK(simulate(8, 1, TaskKind::Reduce, 8, S, sim::CollectiveAlgorithm::Ring, 5) ==
        Approx(S / kNv + 7 * kNvLat).epsilon(0.01));
}

TEST_CASE("collective phases: flows per rank and bytes per flow") {
  auto ring = sim::collective_phases({TaskKind::AllGather, 16, 8, 16e9, 0}, sim::CollectiveAlgorithm::Ring, {1e-6, 5e-6});
  REQUIRE(ring.size() == 1);
  CHECK(ring[0].flows.size() == 8 * 16);  // 8 channels (members per node) of 16 ranks
  CHECK(ring[0].flows[0].bytes == Approx(15.0 / 16 * 16e9 / 8));
  CHECK(ring[0].crosses_nodes);
  CHECK(ring[0].latency == Approx(15 * 5e-6));
  // Every GPU of node 0 sends exactly one flow to node 1 and receives one from it.
  std::vector<int> out(16, 0), in(16, 0);
  double sent = 0;
  for (const auto& f : ring[0].flows) {
    if (f.src / 8 != f.dst / 8) {
      ++out[static_cast<size_t>(f.src)];
      ++in[static_cast<size_t>(f.dst)];
    }
    if (f.src == 3) sent += f.bytes;
  }
  for (int r = 0; r < 16; ++r) {
    CHECK(out[static_cast<size_t>(r)] == 1);
    CHECK(in[static_cast<size_t>(r)] == 1);
  }
  CHECK(sent == Approx(15.0 / 16 * 16e9));  // what a rank sends is the ring's (k-1)/k S
  // Ranks that do not fill their nodes alike (8 + 4) stay one ring; one node: one ring.
  CHECK(sim::collective_phases({TaskKind::AllGather, 12, 8, 1e9, 0}, sim::CollectiveAlgorithm::Ring, {})[0].flows.size() == 12);
  CHECK(sim::collective_phases({TaskKind::AllGather, 8, 8, 1e9, 0}, sim::CollectiveAlgorithm::Ring, {})[0].flows.size() == 8);

  auto hier = sim::collective_phases({TaskKind::AllReduce, 16, 8, 16e9, 0}, sim::CollectiveAlgorithm::Hierarchical, {1e-6, 5e-6});
  REQUIRE(hier.size() == 3);
  CHECK_FALSE(hier[0].crosses_nodes);
  CHECK(hier[1].crosses_nodes);
  CHECK(hier[1].flows.size() == 16);                          // 8 rings of 2
  CHECK(hier[1].flows[0].bytes == Approx(2 * 0.5 * 16e9 / 8));  // all-reduce of S/G across 2 nodes

  auto bcast = sim::collective_phases({TaskKind::Broadcast, 4, 4, 1e9, 2}, sim::CollectiveAlgorithm::Ring, {1e-6, 5e-6});
  REQUIRE(bcast.size() == 1);
  REQUIRE(bcast[0].flows.size() == 3);
  CHECK(bcast[0].flows[0].src == 2);
  CHECK(bcast[0].flows[2].dst == 1);
  auto reduce = sim::collective_phases({TaskKind::Reduce, 4, 4, 1e9, 2}, sim::CollectiveAlgorithm::Ring, {1e-6, 5e-6});
  CHECK(reduce[0].flows.back().dst == 2);

  CHECK(sim::collective_phases({TaskKind::AllGather, 1, 8, 1e9, 0}, sim::CollectiveAlgorithm::Ring, {}).empty());
  CHECK_THROWS(sim::collective_phases({TaskKind::AllGather, 12, 8, 1e9, 0}, sim::CollectiveAlgorithm::Hierarchical, {}));
}

TEST_CASE("strided data-parallel groups under tensor parallelism: a node takes T times the fabric bytes", "[tensor-parallel]") {
  // 2 nodes x 4 GPUs, T = 2: groups {0,2,4,6} and {1,3,5,7}, each gathering its own S.
  const double S = 4e9;
  // Hierarchical: across, the 4 rings of one local index (as for T = 1) now carry S/L with L = G/T
  // = 2 members per node, two GPUs per NIC (5 GB/s each); inside, T rings of 2 on NVLink.
  const double across = 0.5 * (S / 2) / 5e9 + kFabricLat;
  const double inside = 0.5 * S / kNv + kNvLat;
  CHECK(simulate(4, 2, TaskKind::AllGather, 8, S, sim::CollectiveAlgorithm::Hierarchical, 0, 2) ==
        Approx(across + inside).epsilon(0.01));
  CHECK(simulate(4, 2, TaskKind::ReduceScatter, 8, S, sim::CollectiveAlgorithm::Hierarchical, 0, 2) ==
        Approx(inside + across).epsilon(0.01));
  // Twice the fabric time of one group of 8 (T = 1), whose rings carry S/4.
  const double across_t1 = 0.5 * (S / 4) / 5e9 + kFabricLat;
  CHECK(across == Approx(2 * across_t1).epsilon(0.01));
  // Flat: each group runs a channel per member it has in a node (2), each entering the node at a
  // different member; node 0's four GPUs each send one crossing flow of 3/4 x S/2, two per NIC:
  // 5 GB/s each.
  CHECK(simulate(4, 2, TaskKind::AllGather, 8, S, sim::CollectiveAlgorithm::Ring, 0, 2) ==
        Approx(3.0 / 4 * (S / 2) / 5e9 + 3 * kFabricLat).epsilon(0.01));
  // T = G: one member per node, every GPU's fabric ring carries the group's whole S.
  CHECK(simulate(4, 2, TaskKind::AllGather, 8, S, sim::CollectiveAlgorithm::Hierarchical, 0, 4) ==
        Approx(0.5 * S / 5e9 + kFabricLat).epsilon(0.01));
}

TEST_CASE("strided collective phases: groups, flows and the bytes a node receives", "[tensor-parallel]") {
  // 4 nodes x 8 GPUs, T = 4: 4 groups of 8, 2 members per node.
  const double S = 8e9;
  auto hier = sim::collective_phases({TaskKind::AllGather, 32, 8, S, 0, 4}, sim::CollectiveAlgorithm::Hierarchical, {1e-6, 5e-6});
  REQUIRE(hier.size() == 2);
  CHECK(hier[0].crosses_nodes);
  CHECK(hier[0].flows.size() == 32);                          // 8 rings of one local index over 4 nodes
  CHECK(hier[0].flows[0].bytes == Approx(3.0 / 4 * S / 2));
  CHECK_FALSE(hier[1].crosses_nodes);
  CHECK(hier[1].flows.size() == 32);                          // 16 rings of 2 (4 nodes x 4 groups)
  for (const auto& f : hier[1].flows) CHECK(f.src % 4 == f.dst % 4);  // inside one group
  // Bytes node 0 receives from other nodes: T x S x (N-1)/N, T times the unstrided collective's.
  auto into_node0 = [](const std::vector<sim::CollectivePhase>& ph) {
    double b = 0;
    for (const auto& p : ph)
      for (const auto& f : p.flows)
        if (f.dst < 8 && f.src >= 8) b += f.bytes;
    return b;
  };
  CHECK(into_node0(hier) == Approx(4 * S * 3.0 / 4));
  auto flat = sim::collective_phases({TaskKind::AllGather, 32, 8, S, 0, 4}, sim::CollectiveAlgorithm::Ring, {1e-6, 5e-6});
  REQUIRE(flat.size() == 1);
  CHECK(flat[0].flows.size() == 4 * 2 * 8);  // 4 groups x 2 channels x 8 members
  CHECK(flat[0].flows[0].bytes == Approx(7.0 / 8 * S / 2));
  CHECK(flat[0].latency == Approx(7 * 5e-6));
  CHECK(into_node0(flat) == Approx(4 * 7.0 / 8 * S));
  auto one = sim::collective_phases({TaskKind::AllGather, 32, 8, S, 0, 1}, sim::CollectiveAlgorithm::Hierarchical, {1e-6, 5e-6});
  CHECK(into_node0(one) == Approx(S * 3.0 / 4));
  // A stride must divide the ranks and a node's GPUs.
  CHECK_THROWS(sim::collective_phases({TaskKind::AllGather, 32, 8, S, 0, 3}, sim::CollectiveAlgorithm::Ring, {}));
}

TEST_CASE("the list scheduler's closed form of a collective is the simulated hierarchical one") {
  // core::collective_seconds (what the planner, zinf tune and the idealized schedule charge)
  // against the same collective simulated on the platform.
  const auto hw = core::parse_hwprofile(profile(4), "test.yaml");
  const double S = 4e9;
  const auto H = sim::CollectiveAlgorithm::Hierarchical;
  for (auto kind : {TaskKind::AllGather, TaskKind::ReduceScatter, TaskKind::AllReduce, TaskKind::Broadcast}) {
    INFO("kind " << static_cast<int>(kind));
    // 2 nodes x 4 GPUs, one group; T = 2: two groups of 4, 2 per node; T = 4: one per node.
    CHECK(core::collective_seconds(hw, kind, S, 8, 4) == Approx(simulate(4, 2, kind, 8, S, H)).epsilon(0.02));
    CHECK(core::collective_seconds(hw, kind, S, 4, 2) == Approx(simulate(4, 2, kind, 8, S, H, 0, 2)).epsilon(0.02));
    CHECK(core::collective_seconds(hw, kind, S, 2, 1) == Approx(simulate(4, 2, kind, 8, S, H, 0, 4)).epsilon(0.02));
    // Inside one node: a ring (a chain) over NVLink.
    CHECK(core::collective_seconds(hw, kind, S, 4, 4) == Approx(simulate(4, 1, kind, 4, S, H)).epsilon(0.02));
  }
  // A node takes the buffer about once from the fabric, not once per GPU: 4 GPUs at 5 GB/s each
  // send 1/4 of it, where charging each GPU the whole buffer at its NIC share took 4x as long.
  CHECK(core::collective_seconds(hw, TaskKind::AllGather, S, 8, 4) < 0.3 * (7.0 / 8 * S / 5e9));
}

TEST_CASE("an all-to-all among k ranks of a node: each sends (k-1)/k S over its NVLink port, plus one hop",
          "[expert-parallel]") {
  // Expert parallelism's dispatch and combine: every rank sends S / k to each other rank of its
  // group at once, so (k - 1)/k of its buffer leaves it over its own NVLink port.
  const double S = 1e9;
  for (int k : {2, 4, 8}) {
    INFO("k = " << k);
    const double expected = (k - 1.0) / k * S / kNv + kNvLat;
    CHECK(simulate(8, 1, TaskKind::AllToAll, k, S, sim::CollectiveAlgorithm::Hierarchical) ==
          Approx(expected).epsilon(0.01));
    // The list scheduler's closed form charges the same.
    const auto hw = core::parse_hwprofile(profile(8), "test.yaml");
    CHECK(core::collective_seconds(hw, TaskKind::AllToAll, S, k, k) == Approx(expected).epsilon(1e-9));
  }
  const auto phases = sim::collective_phases({TaskKind::AllToAll, 4, 8, S, 0, 1}, sim::CollectiveAlgorithm::Ring,
                                             {kNvLat, kFabricLat});
  REQUIRE(phases.size() == 1);
  CHECK(phases[0].flows.size() == 12);  // 4 x 3
  CHECK(phases[0].flows[0].bytes == S / 4);
  CHECK_FALSE(phases[0].crosses_nodes);
}

TEST_CASE("an all-to-all across two nodes: the shares for the other node leave through its NICs",
          "[expert-parallel]") {
  // 2 nodes x 4 GPUs, one group of 8: each GPU sends 4 shares of S / 8 to the other node, 16 shares
  // from a node over its two 10 GB/s NICs: 2 S / 20 GB/s, and 3 shares over NVLink beside them.
  const double S = 1e9;
  const double expected = 16.0 * S / 8 / 20e9 + kFabricLat;
  CHECK(simulate(4, 2, TaskKind::AllToAll, 8, S, sim::CollectiveAlgorithm::Hierarchical) == Approx(expected).epsilon(0.02));
  const auto hw = core::parse_hwprofile(profile(4), "test.yaml");
  CHECK(core::collective_seconds(hw, TaskKind::AllToAll, S, 8, 4) == Approx(expected).epsilon(0.02));
}
