// The SimGrid platform built from a hwprofile reproduces hand-computed transfer times: one transfer,
// flows sharing a link, GPUs sharing a host-memory link, NVMe read and write. Each simulation runs
// in a child process (one SimGrid engine per process).
#include <simgrid/s4u.hpp>

#include <catch2/catch.hpp>
#include <functional>
#include <string>

#include "core/hwprofile.hpp"
#include "sim/isolate.hpp"
#include "sim/platform.hpp"
#include "formats/hwprofile_reader.hpp"

using namespace zinf;
namespace sg4 = simgrid::s4u;

namespace {

// Round numbers so that every expected time is exact: PCIe 10 GB/s per GPU, host memory 40 GB/s,
// NVLink 100 GB/s, 2 NICs of 10 GB/s, NVMe 8 GB/s read, 4 GB/s write.
std::string profile(int gpus, int per_switch, const std::string& uplink) {
  return "name: test\nnode:\n  gpus: " + std::to_string(gpus) +
         "\n  gpu: {name: g, memory: 16 GB, peak_flops: 100 TFLOP/s, memory_bandwidth: 1000 GB/s}\n"
         "  host: {memory: 512 GB, memory_bandwidth: 40 GB/s, sockets: 1, cores: 8, adam_params_per_s: 1e9}\n"
         "  nvme: {capacity: 8 TB, read_bandwidth: 8 GB/s, write_bandwidth: 4 GB/s}\n"
         "  pcie: {bandwidth_per_gpu: 10 GB/s, gpus_per_switch: " + std::to_string(per_switch) +
         ", switch_uplink: " + uplink + "}\n"
         "  nvlink: {bandwidth_per_gpu: 100 GB/s}\n"
         "  nic: {count: 2, bandwidth: 10 GB/s}\n";
}

// Runs `body` inside one actor on a fresh platform in a child process; returns the clock at its end.
double simulate(const std::string& yaml, int nodes, std::function<void(sim::Platform&)> body) {
  std::string out = sim::run_isolated([&] {
    sim::Platform platform(core::parse_hwprofile(yaml, "test.yaml"), nodes);
    double end = 0;
    sg4::Actor::create("test", platform.gpu(0), [&] {
      body(platform);
      end = sg4::Engine::get_clock();
    });
    platform.engine().run();
    return std::to_string(end);
  });
  return std::stod(out);
}

void wait_all(std::vector<sg4::CommPtr> comms) { sg4::Comm::wait_all(comms); }

}  // namespace

TEST_CASE("one host-to-device transfer takes bytes / PCIe bandwidth") {
  double t = simulate(profile(8, 1, "0"), 1, [](sim::Platform& p) {
    sg4::Comm::sendto_async(p.cpu_of(0), p.gpu(0), 1'000'000'000)->wait();
  });
  CHECK(t == Approx(0.1).epsilon(0.01));
}

TEST_CASE("two GPUs behind one switch uplink share it equally, in each direction separately") {
  double t = simulate(profile(8, 2, "10 GB/s"), 1, [](sim::Platform& p) {
    wait_all({sg4::Comm::sendto_async(p.cpu_of(0), p.gpu(0), 1'000'000'000),
              sg4::Comm::sendto_async(p.cpu_of(1), p.gpu(1), 1'000'000'000)});
  });
  CHECK(t == Approx(0.2).epsilon(0.01));
  // Full duplex: one GPU reading while its neighbour writes does not slow either.
  double d = simulate(profile(8, 2, "10 GB/s"), 1, [](sim::Platform& p) {
    wait_all({sg4::Comm::sendto_async(p.cpu_of(0), p.gpu(0), 1'000'000'000),
              sg4::Comm::sendto_async(p.gpu(1), p.cpu_of(1), 1'000'000'000)});
  });
  CHECK(d == Approx(0.1).epsilon(0.01));
}

TEST_CASE("eight GPUs copying at once share the host-memory link") {
  double t = simulate(profile(8, 1, "0"), 1, [](sim::Platform& p) {
    std::vector<sg4::CommPtr> comms;
    for (int g = 0; g < 8; ++g) comms.push_back(sg4::Comm::sendto_async(p.cpu_of(g), p.gpu(g), 1'000'000'000));
    wait_all(comms);
  });
  // 8 GB through 40 GB/s of host memory, each GPU at 5 GB/s < its 10 GB/s PCIe link.
  CHECK(t == Approx(0.2).epsilon(0.01));
}

TEST_CASE("NVMe reads and writes run at the profile's read and write bandwidths") {
  double r = simulate(profile(8, 1, "0"), 1, [](sim::Platform& p) { p.nvme_read(0, 8e9)->wait(); });
  CHECK(r == Approx(1.0).epsilon(0.01));
  double w = simulate(profile(8, 1, "0"), 1, [](sim::Platform& p) { p.nvme_write(0, 4e9)->wait(); });
  CHECK(w == Approx(1.0).epsilon(0.01));
}

TEST_CASE("GPUs of two nodes exchange over their NICs, and two GPUs on one NIC share it") {
  double one = simulate(profile(4, 1, "0"), 2, [](sim::Platform& p) {
    sg4::Comm::sendto_async(p.gpu(0), p.gpu(4), 1'000'000'000)->wait();
  });
  CHECK(one == Approx(0.1).epsilon(0.01));
  // GPUs 0 and 1 share NIC 0 (4 GPUs, 2 NICs): 5 GB/s each.
  double two = simulate(profile(4, 1, "0"), 2, [](sim::Platform& p) {
    wait_all({sg4::Comm::sendto_async(p.gpu(0), p.gpu(4), 1'000'000'000),
              sg4::Comm::sendto_async(p.gpu(1), p.gpu(5), 1'000'000'000)});
  });
  CHECK(two == Approx(0.2).epsilon(0.01));
}

TEST_CASE("the DGX-2 profile gives each of 16 GPUs the paper's ~3 GB/s when all copy at once") {
  const std::string path = std::string(ZINF_SOURCE_DIR) + "/hwprofiles/dgx2-v100.yaml";
  std::string out = sim::run_isolated([&] {
    sim::Platform p(core::load_hwprofile(path), 1);
    double end = 0;
    sg4::Actor::create("copy", p.gpu(0), [&] {
      std::vector<sg4::CommPtr> comms;
      for (int g = 0; g < 16; ++g) comms.push_back(sg4::Comm::sendto_async(p.cpu_of(g), p.gpu(g), 3'000'000'000));
      sg4::Comm::wait_all(comms);
      end = sg4::Engine::get_clock();
    });
    p.engine().run();
    return std::to_string(end);
  });
  CHECK(std::stod(out) == Approx(1.0).epsilon(0.01));
}

TEST_CASE("a second SimGrid engine in one process is refused with a message") {
  std::string out = sim::run_isolated([] {
    const std::string yaml = profile(2, 1, "0");
    sim::Platform first(core::parse_hwprofile(yaml, "t"), 1);
    try {
      sim::Platform second(core::parse_hwprofile(yaml, "t"), 1);
    } catch (const std::logic_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  });
  CHECK(out.find("one engine per process") != std::string::npos);
}
