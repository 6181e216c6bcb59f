// NVLink transfers solved by the simulator itself (sim/nvlink.hpp) end when SimGrid's own flows over
// the same NVLink links end: the same transfers, started at the same times (alone, in phases of
// several at once, many on one port, some starting while others run), run both ways in one
// simulation, and every end time is compared. Each simulation runs in a child.
#include <simgrid/s4u.hpp>

#include <catch2/catch.hpp>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "sim/events.hpp"
#include "sim/isolate.hpp"
#include "sim/nvlink.hpp"
#include "sim/platform.hpp"

using namespace zinf;
namespace sg4 = simgrid::s4u;

namespace {

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

struct Transfer {
  int src, dst;
  double bytes;
};
struct Phase {
  double start;
  std::vector<Transfer> transfers;
};

// A deterministic spread of phases over the GPUs of two nodes (transfers stay inside a node).
std::vector<Phase> phases(int gpus, int count, uint64_t seed) {
  uint64_t x = seed;
  auto next = [&x] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(x >> 11) / 9007199254740992.0;
  };
  std::vector<Phase> out;
  for (int i = 0; i < count; ++i) {
    Phase p;
    p.start = 0.05 * next();
    const int node = next() < 0.5 ? 0 : 1;
    const int n = 1 + static_cast<int>(4 * next());
    for (int k = 0; k < n; ++k) {
      const int src = static_cast<int>(gpus * next()) % gpus;
      const int dst = (src + 1 + static_cast<int>((gpus - 1) * next()) % (gpus - 1)) % gpus;
      p.transfers.push_back({node * gpus + src, node * gpus + dst, 1e6 + 2e9 * next()});
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Every phase run twice at once, as SimGrid flows and on NvlinkPorts (the two never share a
// resource): the ends of both, one line per phase.
std::string run_both(int gpus, const std::vector<Phase>& ps) {
  return sim::run_isolated([&] {
    sim::Platform p(core::parse_hwprofile(profile(gpus), "test.yaml"), 2);
    sim::Events events;
    sim::NvlinkPorts ports(events, p.ranks(), 100e9);
    std::vector<double> by_flows(ps.size(), -1), by_ports(ps.size(), -1);
    auto as_flows = [&](size_t i) -> sim::Job {
      co_await events.delay(ps[i].start);
      std::vector<sg4::ActivityPtr> flows;
      for (const auto& t : ps[i].transfers)
        flows.push_back(sg4::Comm::sendto_async(p.gpu(t.src), p.gpu(t.dst), static_cast<uint64_t>(t.bytes)));
      co_await events.wait_all(flows);
      by_flows[i] = sg4::Engine::get_clock();
    };
    auto on_ports = [&](size_t i) -> sim::Job {
      co_await events.delay(ps[i].start);
      sim::NvlinkPorts::Group group;
      for (const auto& t : ps[i].transfers) ports.start(t.src, t.dst, t.bytes, group);
      co_await ports.wait(group);
      by_ports[i] = sg4::Engine::get_clock();
    };
    for (size_t i = 0; i < ps.size(); ++i) {
      events.spawn(as_flows(i));
      events.spawn(on_ports(i));
    }
    p.engine().run();
    if (auto e = events.failure()) std::rethrow_exception(e);
    std::ostringstream out;
    out.precision(17);
    for (size_t i = 0; i < ps.size(); ++i) out << by_flows[i] << " " << by_ports[i] << "\n";
    return out.str();
  });
}

void check_same_ends(const std::string& out) {
  std::istringstream in(out);
  double a = 0, b = 0;
  int lines = 0;
  while (in >> a >> b) {
    ++lines;
    INFO("phase " << lines << ": SimGrid's flows end at " << a << " s, NvlinkPorts' at " << b << " s");
    CHECK(a > 0);
    CHECK(b == Approx(a).epsilon(1e-12).margin(1e-15));
  }
  CHECK(lines > 0);
}

}  // namespace

TEST_CASE("a lone NVLink transfer takes its whole bytes over the port's bandwidth") {
  check_same_ends(run_both(4, {{0.0, {{0, 1, 1e9}}}}));
  check_same_ends(run_both(4, {{0.0, {{0, 1, 1234567.75}}}}));  // whole bytes, as SimGrid's payload
}

TEST_CASE("NVLink transfers sharing ports end as SimGrid's max-min flows end") {
  // Two into one GPU (its port in is shared), then a third that leaves from a saturated sender.
  check_same_ends(run_both(4, {{0.0, {{0, 2, 1e9}, {1, 2, 5e8}}}, {0.002, {{0, 3, 2e9}}}}));
  // A ring of four and one transfer that joins it halfway.
  check_same_ends(run_both(4, {{0.0, {{0, 1, 1e9}, {1, 2, 1e9}, {2, 3, 1e9}, {3, 0, 1e9}}}, {0.005, {{1, 3, 7e8}}}}));
  for (uint64_t seed : {1, 2, 3, 4})
    for (int gpus : {4, 8}) {
      INFO("seed " << seed << ", " << gpus << " GPUs per node");
      check_same_ends(run_both(gpus, phases(gpus, 60, seed)));
    }
}
