// Transfers solved by the simulator itself (sim/flows.hpp) end when SimGrid's own flows over the
// same routes end: the same transfers (NVLink inside a node, PCIe to and from host memory behind a
// shared switch uplink, across nodes through the NICs and a fat tree's cables, NVMe reads and writes,
// GPUDirect Storage), started at the same times, alone, in phases of several at once, many on one
// link, some starting while others run, are run both ways in one simulation and every end time is
// compared. Each simulation runs in a child.
#include <simgrid/s4u.hpp>

#include <catch2/catch.hpp>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "sim/events.hpp"
#include "sim/flows.hpp"
#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "formats/hwprofile_reader.hpp"

using namespace zinf;
namespace sg4 = simgrid::s4u;

namespace {

// `gpus` per node, two behind each PCIe switch uplink, GPUDirect Storage, two NICs per node;
// `fabric`: the profile's fabric section.
std::string profile(int gpus, const std::string& fabric = "{latency: 5 us}") {
  return "name: test\nnode:\n  gpus: " + std::to_string(gpus) +
         "\n  gpu: {name: g, memory: 16 GB, peak_flops: 100 TFLOP/s, memory_bandwidth: 1000 GB/s}\n"
         "  host: {memory: 512 GB, memory_bandwidth: 40 GB/s, cores: 8, adam_params_per_s: 1e9}\n"
         "  nvme: {capacity: 8 TB, read_bandwidth: 8 GB/s, write_bandwidth: 4 GB/s}\n"
         "  pcie: {bandwidth_per_gpu: 16 GB/s, gpus_per_switch: 2, switch_uplink: 20 GB/s}\n"
         "  gds: {bandwidth_per_switch: 12 GB/s}\n"
         "  nvlink: {bandwidth_per_gpu: 100 GB/s, latency: 2 us}\n"
         "  nic: {count: 2, bandwidth: 10 GB/s}\n"
         "fabric: " + fabric + "\n";
}

// Hosts of the platform, by kind.
enum class End { Gpu, Cpu, Nvme, Gds };
struct Transfer {
  End from_kind, to_kind;
  int from, to;  // a GPU rank, or a node for the other kinds
  double bytes;
};
struct Phase {
  double start;
  std::vector<Transfer> transfers;
};

const sg4::Host* host(const sim::Platform& p, End kind, int i) {
  switch (kind) {
    case End::Gpu: return p.gpu(i);
    case End::Cpu: return p.cpu_of(i);  // the GPU's socket
    case End::Nvme: return p.nvme(i);
    case End::Gds: return p.gds_endpoint(p.node_of(i));
  }
  return nullptr;
}

// A deterministic spread of phases over `nodes` nodes of `gpus` GPUs: every kind of route.
std::vector<Phase> phases(int gpus, int nodes, int count, uint64_t seed) {
  uint64_t x = seed;
  auto next = [&x] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(x >> 11) / 9007199254740992.0;
  };
  auto pick = [&](int n) { return static_cast<int>(n * next()) % n; };
  const int ranks = gpus * nodes;
  std::vector<Phase> out;
  for (int i = 0; i < count; ++i) {
    Phase p;
    p.start = 0.2 * next();
    const int n = 1 + pick(4);
    for (int k = 0; k < n; ++k) {
      const int a = pick(ranks);
      const double bytes = 1e6 + 1e9 * next();
      switch (pick(6)) {
        case 0: p.transfers.push_back({End::Gpu, End::Gpu, a, a / gpus * gpus + (a + 1 + pick(gpus - 1)) % gpus, bytes}); break;
        case 1: p.transfers.push_back({End::Gpu, End::Gpu, a, (a + gpus * (1 + pick(nodes - 1))) % ranks, bytes}); break;
        case 2: p.transfers.push_back({End::Cpu, End::Gpu, a, a, bytes}); break;
        case 3: p.transfers.push_back({End::Gpu, End::Cpu, a, a, bytes}); break;
        case 4: {
          // The NVMe array: a read into socket 0 or a write from it.
          const int node = a / gpus;
          if (next() < 0.5)
            p.transfers.push_back({End::Nvme, End::Cpu, node, node * gpus, bytes});
          else
            p.transfers.push_back({End::Cpu, End::Nvme, node * gpus, node, bytes});
          break;
        }
        default:
          if (next() < 0.5)
            p.transfers.push_back({End::Gds, End::Gpu, a, a, bytes});
          else
            p.transfers.push_back({End::Gpu, End::Gds, a, a, bytes});
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Every phase run twice at once on the same routes, as SimGrid flows and on Flows: the two solvers
// never see each other's load, so each runs as if alone. The ends of both, one line per phase.
std::string run_both(const std::string& yaml, int nodes, const std::vector<Phase>& ps) {
  return sim::run_isolated([&] {
    sim::Platform p(core::parse_hwprofile(yaml, "test.yaml"), nodes);
    sim::Events events;
    sim::Flows flows(events, p);
    std::vector<double> by_simgrid(ps.size(), -1), by_flows(ps.size(), -1);
    auto as_simgrid = [&](size_t i) -> sim::Job {
      co_await events.delay(ps[i].start);
      std::vector<sg4::ActivityPtr> comms;
      for (const auto& t : ps[i].transfers)
        comms.push_back(sg4::Comm::sendto_async(const_cast<sg4::Host*>(host(p, t.from_kind, t.from)),
                                                const_cast<sg4::Host*>(host(p, t.to_kind, t.to)),
                                                static_cast<uint64_t>(t.bytes)));
      co_await events.wait_all(comms);
      by_simgrid[i] = sg4::Engine::get_clock();
    };
    auto as_flows = [&](size_t i) -> sim::Job {
      co_await events.delay(ps[i].start);
      sim::Flows::Group group;
      for (const auto& t : ps[i].transfers)
        flows.start(host(p, t.from_kind, t.from), host(p, t.to_kind, t.to), t.bytes, group);
      co_await flows.wait(group);
      by_flows[i] = sg4::Engine::get_clock();
    };
    for (size_t i = 0; i < ps.size(); ++i) {
      events.spawn(as_simgrid(i));
      events.spawn(as_flows(i));
    }
    p.engine().run();
    if (auto e = events.failure()) std::rethrow_exception(e);
    std::ostringstream out;
    out.precision(17);
    for (size_t i = 0; i < ps.size(); ++i) out << by_simgrid[i] << " " << by_flows[i] << "\n";
    return out.str();
  });
}

void check_same_ends(const std::string& out) {
  std::istringstream in(out);
  double a = 0, b = 0;
  int lines = 0;
  while (in >> a >> b) {
    ++lines;
    INFO("phase " << lines << ": SimGrid's flows end at " << a << " s, Flows' at " << b << " s");
    CHECK(a > 0);
    CHECK(b == Approx(a).epsilon(1e-12).margin(1e-15));
  }
  CHECK(lines > 0);
}

}  // namespace

TEST_CASE("a lone transfer takes its whole bytes over its route's narrowest link") {
  const auto one = profile(4);
  check_same_ends(run_both(one, 1, {{0.0, {{End::Gpu, End::Gpu, 0, 1, 1e9}}}}));
  check_same_ends(run_both(one, 1, {{0.0, {{End::Gpu, End::Gpu, 0, 1, 1234567.75}}}}));  // whole bytes only
  check_same_ends(run_both(one, 1, {{0.0, {{End::Cpu, End::Gpu, 2, 2, 1e9}}}}));
  check_same_ends(run_both(one, 1, {{0.0, {{End::Nvme, End::Cpu, 0, 0, 1e9}}}}));
}

TEST_CASE("transfers sharing links end as SimGrid's max-min flows end") {
  // Two into one GPU's NVLink port, then a third from a saturated sender.
  check_same_ends(run_both(profile(4), 1,
                           {{0.0, {{End::Gpu, End::Gpu, 0, 2, 1e9}, {End::Gpu, End::Gpu, 1, 2, 5e8}}},
                            {0.002, {{End::Gpu, End::Gpu, 0, 3, 2e9}}}}));
  // Host memory shared by four copies both ways, one joining halfway.
  check_same_ends(run_both(profile(4), 1,
                           {{0.0, {{End::Cpu, End::Gpu, 0, 0, 1e9}, {End::Cpu, End::Gpu, 1, 1, 1e9}, {End::Gpu, End::Cpu, 2, 2, 1e9}}},
                            {0.01, {{End::Gpu, End::Cpu, 3, 3, 7e8}}}}));
  for (uint64_t seed : {1, 2, 3})
    for (int nodes : {2, 3}) {
      INFO("seed " << seed << ", " << nodes << " nodes");
      check_same_ends(run_both(profile(4), nodes, phases(4, nodes, 80, seed)));
    }
}

TEST_CASE("transfers across a fat tree's cables end as SimGrid's flows end") {
  // Four leaves of four ports (two nodes of two NICs each) under one spine: transfers between
  // leaves share the leaves' cables.
  const auto tree = profile(2, "{topology: fat-tree, latency: 0 us, tree: {children: [4, 4], parents: [1, 1]}}");
  for (uint64_t seed : {4, 5}) {
    INFO("seed " << seed);
    check_same_ends(run_both(tree, 4, phases(2, 4, 60, seed)));
  }
}
