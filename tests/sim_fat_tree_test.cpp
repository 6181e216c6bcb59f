// A fat-tree fabric with static routing: the routes' arithmetic (destination-mod-k climbs, one way
// down), and closed forms on a two-level tree: transfers whose routes climb through the same cable
// share it, those whose destinations pick different spines do not, and a ring and a hierarchical
// collective slow down exactly by the sharing of the cables their routes have in common. Each
// simulation runs in a child.
#include <simgrid/s4u.hpp>

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "core/errors.hpp"
#include "core/hwprofile.hpp"
#include "sim/collectives.hpp"
#include "sim/fat_tree.hpp"
#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "formats/hwprofile_reader.hpp"

using namespace zinf;
using core::TaskKind;
namespace sg4 = simgrid::s4u;

namespace {

// One GPU per NIC, NICs of 10 GB/s, PCIe and NVLink fast enough never to bind, no latencies.
std::string profile(int gpus, const std::string& fabric) {
  return "name: tree\nnode:\n  gpus: " + std::to_string(gpus) +
         "\n  gpu: {name: g, memory: 16 GB, peak_flops: 100 TFLOP/s, memory_bandwidth: 1000 GB/s}\n"
         "  host: {memory: 512 GB, memory_bandwidth: 4000 GB/s, cores: 8, adam_params_per_s: 1e9}\n"
         "  nvme: {capacity: 8 TB, read_bandwidth: 8 GB/s, write_bandwidth: 4 GB/s}\n"
         "  pcie: {bandwidth_per_gpu: 1000 GB/s, latency: 0 us}\n"
         "  nvlink: {bandwidth_per_gpu: 1000 GB/s, latency: 0 us}\n"
         "  nic: {count: " + std::to_string(gpus) + ", bandwidth: 10 GB/s}\n"
         "fabric: " + fabric + "\n";
}

constexpr double kNic = 10e9;

// Starts `flows` (GPU rank pairs, `bytes` each) at once on the platform; returns when the last ends.
double transfers(const std::string& yaml, int nodes, const std::vector<std::pair<int, int>>& flows, double bytes) {
  return std::stod(sim::run_isolated([&] {
    sim::Platform p(core::parse_hwprofile(yaml, "tree.yaml"), nodes);
    double end = 0;
    sg4::Actor::create("flows", p.gpu(0), [&] {
      std::vector<sg4::CommPtr> comms;
      for (auto [a, b] : flows) comms.push_back(sg4::Comm::sendto_async(p.gpu(a), p.gpu(b), uint64_t(bytes)));
      sg4::Comm::wait_all(comms);
      end = sg4::Engine::get_clock();
    });
    p.engine().run();
    return std::to_string(end);
  }));
}

double collective(const std::string& yaml, int gpus, int nodes, TaskKind kind, double bytes, sim::CollectiveAlgorithm algo) {
  return std::stod(sim::run_isolated([&] {
    sim::Platform p(core::parse_hwprofile(yaml, "tree.yaml"), nodes);
    auto phases = sim::collective_phases({kind, gpus * nodes, gpus, bytes, 0, 1}, algo, {});
    double end = 0;
    sg4::Actor::create("collective", p.gpu(0), [&] {
      sim::execute_phases(p, phases);
      end = sg4::Engine::get_clock();
    });
    p.engine().run();
    return std::to_string(end);
  }));
}

// A two-level tree: leaves of `down` ports, `spines` spine switches (each leaf one cable to each).
std::string two_level(int down, int spines, int leaves, const std::string& placement = "packed") {
  return "{topology: fat-tree, latency: 0 us, tree: {children: [" + std::to_string(down) + ", " + std::to_string(leaves) +
         "], parents: [1, " + std::to_string(spines) + "], placement: " + placement + "}}";
}

}  // namespace

TEST_CASE("fat-tree routes climb by destination mod k and come down the one path below") {
  sim::FatTreeRoutes t({4, 2}, {1, 2});  // 2 leaves of 4 ports, 2 spines
  CHECK(t.endpoints() == 8);
  CHECK(t.cables() == 4);  // each leaf to each spine
  std::vector<int64_t> up, down;
  t.route(0, 3, up, down);  // the same leaf: no cable
  CHECK(t.common_level(0, 3) == 1);
  CHECK(up.empty());
  CHECK(down.empty());
  t.route(0, 4, up, down);  // destination 4: spine 4 mod 2 = 0, leaf 0's cable to it, then spine 0 to leaf 1
  CHECK(up == std::vector<int64_t>{0});
  CHECK(down == std::vector<int64_t>{2});
  t.route(1, 5, up, down);  // destination 5: spine 1
  CHECK(up == std::vector<int64_t>{1});
  CHECK(down == std::vector<int64_t>{3});
  t.route(1, 6, up, down);  // destination 6: spine 0 again, the cable 0 -> 4 climbs too
  CHECK(up == std::vector<int64_t>{0});
  CHECK(down == std::vector<int64_t>{2});

  sim::FatTreeRoutes three({2, 2, 2}, {1, 2, 2});  // three levels: 8 ports
  CHECK(three.endpoints() == 8);
  std::set<int64_t> seen;
  for (int64_t s = 0; s < 8; ++s)
    for (int64_t d = 0; d < 8; ++d) {
      three.route(s, d, up, down);
      CHECK(up.size() == down.size());
      CHECK(int(up.size()) == std::max(0, three.common_level(s, d) - 1));
      for (auto c : up) seen.insert(c);
      for (auto c : down) CHECK(c < three.cables());
    }
  CHECK(int64_t(seen.size()) == three.cables());  // every cable is some route's
  CHECK_THROWS_AS(sim::FatTreeRoutes({4, 2}, {2, 2}), std::invalid_argument);
  CHECK_THROWS_AS(sim::FatTreeRoutes({4}, {1, 2}), std::invalid_argument);
}

TEST_CASE("two transfers climbing through one leaf-to-spine cable share it; to different spines they do not") {
  const double S = 10e9;
  // 8 nodes of one GPU and one NIC; leaves of 4 ports, 2 spines: non-blocking, statically routed.
  const auto yaml = profile(1, two_level(4, 2, 2));
  // Destinations 4 and 5 take spines 0 and 1: each transfer at its NIC's rate.
  CHECK(transfers(yaml, 8, {{0, 4}, {1, 5}}, S) == Approx(S / kNic).epsilon(1e-9));
  // Destinations 4 and 6 both take spine 0: leaf 0's cable to it carries both, half each.
  CHECK(transfers(yaml, 8, {{0, 4}, {1, 6}}, S) == Approx(2 * S / kNic).epsilon(1e-9));
  // Inside one leaf no cable is crossed.
  CHECK(transfers(yaml, 8, {{0, 1}, {2, 3}}, S) == Approx(S / kNic).epsilon(1e-9));
  // The same pairs on a non-blocking crossbar.
  CHECK(transfers(profile(1, "{topology: full, latency: 0 us}"), 8, {{0, 4}, {1, 6}}, S) == Approx(S / kNic).epsilon(1e-9));
}

TEST_CASE("a ring across the leaves of an oversubscribed tree takes the shared cable's share, in closed form") {
  const double S = 8e9;
  // 4 nodes of 2 GPUs (one NIC each), leaves of 4 ports (2 nodes), ONE spine: a leaf's 4 NICs share
  // one cable up, 4:1 oversubscribed.
  const auto tree = profile(2, two_level(4, 1, 2));
  const auto full = profile(2, "{topology: full, latency: 0 us}");
  const int k = 8;
  // Flat ring over the 8 GPUs, one channel per member of a node (NCCL's rings): each channel leaves
  // a node through one member's NIC; between leaves, node 1 -> 2 and node 3 -> 0 cross, 2 channels
  // each, each channel on S / 2: per GPU (k-1)/k S/2 bytes. Without the tree every flow runs at its
  // NIC's 10 GB/s (NVLink is fast); through one spine cable the two channels crossing it share it.
  const double ring_full = (k - 1.0) / k * (S / 2) / kNic;
  CHECK(collective(full, 2, 4, TaskKind::AllGather, S, sim::CollectiveAlgorithm::Ring) == Approx(ring_full).epsilon(1e-6));
  CHECK(collective(tree, 2, 4, TaskKind::AllGather, S, sim::CollectiveAlgorithm::Ring) ==
        Approx(2 * ring_full).epsilon(1e-6));
  // Hierarchical: across nodes, the 2 rings of one local index, each on S / 2: (N-1)/N S/2 per GPU
  // over its NIC; 2 flows cross each leaf's one cable in each direction, so half the rate there;
  // then inside each node over NVLink (1000 GB/s: (G-1)/G S / 1000e9).
  const double inside = (2 - 1.0) / 2 * S / 1000e9;
  const double across = (4 - 1.0) / 4 * (S / 2) / kNic;
  CHECK(collective(full, 2, 4, TaskKind::AllGather, S, sim::CollectiveAlgorithm::Hierarchical) ==
        Approx(across + inside).epsilon(1e-6));
  CHECK(collective(tree, 2, 4, TaskKind::AllGather, S, sim::CollectiveAlgorithm::Hierarchical) ==
        Approx(2 * across + inside).epsilon(1e-6));
}

TEST_CASE("a tree too small for the nodes, or a tree shape that is not one, is refused with its field") {
  CHECK_THROWS_WITH(sim::run_isolated([] {
                      sim::Platform p(core::parse_hwprofile(profile(1, two_level(2, 1, 2)), "tree.yaml"), 8);
                      return std::string();
                    }),
                    Catch::Contains("fabric.tree") && Catch::Contains("4 nodes"));
  CHECK_THROWS_AS(core::parse_hwprofile(profile(1, "{topology: fat-tree}"), "tree.yaml"), core::ConfigError);
  CHECK_THROWS_WITH(core::parse_hwprofile(profile(1, "{topology: fat-tree, tree: {children: [4, 2], parents: [2, 2]}}"),
                                          "tree.yaml"),
                    Catch::Contains("fabric.tree.parents"));
  CHECK_THROWS_WITH(core::parse_hwprofile(profile(1, "{topology: full, tree: {children: [4], parents: [1]}}"), "tree.yaml"),
                    Catch::Contains("fabric.tree"));
}

TEST_CASE("scattered placement puts the job's nodes at seeded places of the tree; packed at its first ports") {
  // 16 ports, 4 nodes of one NIC: with packed nodes 0..3 share leaf 0 (4 ports) and never climb.
  const auto packed = profile(1, two_level(4, 1, 4));
  const auto scattered = profile(1, two_level(4, 1, 4, "scattered"));
  const double S = 10e9;
  const std::vector<std::pair<int, int>> ring{{0, 1}, {1, 2}, {2, 3}, {3, 0}};
  CHECK(transfers(packed, 4, ring, S) == Approx(S / kNic).epsilon(1e-9));
  // Scattered over 4 leaves with one spine, some of the ring climbs; whatever the draw it is never
  // faster than packed and never slower than all 4 sharing one cable.
  const double t = transfers(scattered, 4, ring, S);
  CHECK(t >= S / kNic * (1 - 1e-9));
  CHECK(t <= 4 * S / kNic * (1 + 1e-9));
}
