// NCCL's tuning model (core/nccl.hpp) against hand-computed cases from its constants
// (src/graph/tuning.cc at v2.7.8-1, v2.8.3-1 and v2.18.3-1): latency per algorithm and protocol growing with
// the ranks and nodes a call spans, the protocol NCCL picks by size, the tree for all-reduce across
// many nodes, and the closed form of the list scheduler (core::collective_seconds) built on it.
#include <catch2/catch.hpp>
#include <string>

#include "core/hwprofile.hpp"
#include "core/nccl.hpp"
#include "core/timeline.hpp"
#include "formats/hwprofile_reader.hpp"

using namespace zinf;
using core::NcclAlgorithm;
using core::NcclProtocol;
using core::TaskKind;

namespace {

core::NcclSpec v278(bool ll128 = true) { return {"2.7.8", 70, ll128, false}; }

}  // namespace

TEST_CASE("NCCL 2.7.8, a ring all-gather over 128 ranks on 32 nodes: latency per protocol and the pick by size") {
  // nsteps 127, of which 31 cross nodes; NVLink inside. Latencies (us):
  //   Simple 8.4 + 96 x 3.4 + 31 x 9.6 = 632.4
  //   LL128  10  + 96 x 1.9 + 31 x 4.0 = 316.4    (bus bandwidth x 0.92: 4 ranks per node)
  //   LL     3.6 + 96 x 0.47 x 1.8 + 31 x 2.7 = 168.516  (bus bandwidth / 4)
  const auto big = core::nccl_call(v278(), TaskKind::AllGather, 1e9, 128, 32, true, 1.0);
  CHECK(big.algorithm == NcclAlgorithm::Ring);
  CHECK(big.protocol == NcclProtocol::Simple);
  CHECK(big.latency == Approx(632.4e-6));
  CHECK(big.seconds == Approx(1.0 + 632.4e-6));
  CHECK(big.transfer_scale == Approx(1.0));
  // 1 ms of ring transfer: LL128's lower latency beats its 8 % less bandwidth.
  const auto mid = core::nccl_call(v278(), TaskKind::AllGather, 1e6, 128, 32, true, 1e-3);
  CHECK(mid.protocol == NcclProtocol::LL128);
  CHECK(mid.latency == Approx(316.4e-6));
  CHECK(mid.seconds == Approx(316.4e-6 + 1e-3 / 0.92));
  CHECK(mid.transfer_scale == Approx(1 / 0.92));
  // 10 us of transfer: latency-bound, LL.
  const auto small = core::nccl_call(v278(), TaskKind::AllGather, 1e4, 128, 32, true, 1e-5);
  CHECK(small.protocol == NcclProtocol::LL);
  CHECK(small.latency == Approx(168.516e-6));
  CHECK(small.seconds == Approx(168.516e-6 + 4e-5));
  // Without LL128 (not enabled on the machine) the middle case falls back to Simple.
  CHECK(core::nccl_call(v278(false), TaskKind::AllGather, 1e6, 128, 32, true, 1e-3).protocol == NcclProtocol::Simple);
}

TEST_CASE("NCCL's latency grows with the ranks and the nodes a ring spans") {
  // Simple: 8.4 + (k - 1 - (N - 1)) x 3.4 + (N - 1) x 9.6 us.
  for (int nodes : {1, 2, 8, 32})
    for (int per_node : {1, 4, 16}) {
      const int k = nodes * per_node;
      if (k < 2) continue;
      const auto c = core::nccl_call(v278(false), TaskKind::ReduceScatter, 1e12, k, nodes, true, 100.0);
      INFO(nodes << " nodes x " << per_node);
      // One node: every step over NVLink (hwLat NVLink), no network step.
      const double expected = nodes == 1 ? 8.4 + (k - 1) * 3.4 : 8.4 + (k - nodes) * 3.4 + (nodes - 1) * 9.6;
      CHECK(c.latency == Approx(expected * 1e-6));
    }
  // Without NVLink the steps inside a node are PCI's (5.7 us for Simple).
  CHECK(core::nccl_call(v278(false), TaskKind::AllGather, 1e12, 8, 1, false, 100.0).latency == Approx((8.4 + 7 * 5.7) * 1e-6));
}

TEST_CASE("NCCL 2.7.8's all-reduce across 64 nodes takes the tree, with its size correction") {
  // 512 ranks, 8 per node, 64 MiB, 10 ms of ring/Simple transfer. The ring's bus bandwidth:
  // 64 MiB / (10 ms x 512 / 1022) = 13.40 GB/s.
  const double S = 64.0 * (1 << 20), X = 0.01;
  const double bus = S / (X * 512.0 / 1022.0) / 1e9;
  // Without LL128: ring/Simple (8.4 + 896 x 3.4 + 126 x 9.6) x 1.9 (the plateau across nodes) + 10 ms
  // = 18.10 ms; ring/LL 1.1 ms + 40 ms; tree/Simple 2 x (7 x 28 + log2(64) x 50) us +
  // S / (0.5 x min(0.9 bus, 80) x 0.8 GB/s) = 14.91 ms (0.8: the tree's correction at 2^20 x 64 B).
  // With LL128 on, the ring's LL128 beats both: 10 + 896 x 1.9 + 126 x 4.0 = 2216.4 us and
  // 10 ms / 0.92 = 13.09 ms; the tree's LL128 takes 4.4 + 2 x (7 x 1.2 + 6 x 8.5) = 123.2 us and
  // S / (0.5 x 0.9 bus x 0.915 x 0.9 GB/s) = 13.52 ms.
  const auto no128 = core::nccl_call(v278(false), TaskKind::AllReduce, S, 512, 64, true, X);
  CHECK(no128.algorithm == NcclAlgorithm::Tree);
  CHECK(no128.protocol == NcclProtocol::Simple);
  CHECK(no128.latency == Approx(992e-6));
  CHECK(no128.seconds == Approx(992e-6 + S / (0.5 * 0.9 * bus * 0.8 * 1e9)));
  const auto with128 = core::nccl_call(v278(true), TaskKind::AllReduce, S, 512, 64, true, X);
  CHECK(with128.algorithm == NcclAlgorithm::Ring);
  CHECK(with128.protocol == NcclProtocol::LL128);
  CHECK(with128.latency == Approx(2216.4e-6));
  CHECK(with128.seconds == Approx(2216.4e-6 + X / 0.92));
  CHECK(with128.seconds < 123.2e-6 + S / (0.5 * 0.9 * bus * 0.915 * 0.9 * 1e9));
  CHECK(with128.transfer_scale == Approx(1 / 0.92));
  // Inside one node the ring wins: the tree's Simple chunk latency is 28 us a step.
  const auto one = core::nccl_call(v278(false), TaskKind::AllReduce, S, 8, 1, true, X);
  CHECK(one.algorithm == NcclAlgorithm::Ring);
  CHECK(one.latency == Approx((8.4 + 14 * 3.4) * 1e-6));
  // Tree's bus bandwidth is capped at 80 GB/s across more than two nodes: on a fabric 10x faster
  // (bus 134 GB/s) the tree still wins (ring Simple 9.1 ms, ring LL 5.1 ms) but moves 64 MiB at
  // 0.5 x 80 x 0.8 GB/s, not at 0.5 x 0.9 x 134 x 0.8.
  const auto capped = core::nccl_call(v278(false), TaskKind::AllReduce, S, 512, 64, true, X / 10);
  CHECK(capped.algorithm == NcclAlgorithm::Tree);
  CHECK(capped.seconds == Approx(992e-6 + S / (0.5 * 80e9 * 0.8)));
}

TEST_CASE("NCCL 2.8.3 against 2.7.8: the tree's network step and its bandwidth") {
  // 2.8.3 (NGC PyTorch 20.12) prices the tree's Simple network step at 28 us, not 50, and takes
  // 0.92 of the ring's bus bandwidth, no longer capped at 80 GB/s.
  const double S = 64.0 * (1 << 20), X = 0.01, bus = S / (X * 512.0 / 1022.0) / 1e9;
  const auto c = core::nccl_call({"2.8.3", 80, false, true}, TaskKind::AllReduce, S, 512, 64, true, X);
  CHECK(c.algorithm == NcclAlgorithm::Tree);
  CHECK(c.protocol == NcclProtocol::Simple);
  CHECK(c.latency == Approx(2 * (7 * 28 + 6 * 28) * 1e-6));
  CHECK(c.seconds == Approx(c.latency + S / (0.5 * 0.92 * bus * 0.8 * 1e9)));
}

TEST_CASE("NCCL 2.18.3's constants and refinements") {
  const core::NcclSpec v218{"2.18.3", 90, true, false};
  // Ring/Simple all-gather over 16 ranks on 2 nodes: 8.4 + 14 x max(3.4, 1 x 3) + 1 x 14 us (the
  // network post overhead of an Intel host, x 3 for Simple, floors the NVLink step).
  const auto c = core::nccl_call(v218, TaskKind::AllGather, 1e12, 16, 2, true, 100.0);
  CHECK(c.protocol == NcclProtocol::Simple);
  CHECK(c.latency == Approx((8.4 + 14 * 3.4 + 14.0) * 1e-6));
  // LL's bandwidth is capped (one node of Hopper: 87.7 GB/s): a fast NVLink ring gains nothing past it.
  const double S = 1e6, fast = S / 400e9 * 7 / 8;  // 400 GB/s of ring bus bandwidth over 8 ranks
  const auto ll = core::nccl_call({"2.18.3", 90, false, false}, TaskKind::AllGather, 1e3, 8, 1, true, fast * 1e-3);
  CHECK(ll.protocol == NcclProtocol::LL);
  CHECK(ll.latency == Approx((6.6 + 7 * 0.6) * 1e-6));
  CHECK(ll.seconds == Approx(ll.latency + 1e3 / (87.7e9 * 8.0 / 7.0)));
  CHECK_THROWS_WITH(core::nccl_call({"2.9.9", 70, false, false}, TaskKind::AllGather, S, 8, 1, true, 1e-3),
                    Catch::Contains("unknown NCCL release '2.9.9'"));
}

TEST_CASE("collective_seconds with a profile's nccl section is NCCL's call over the transfer it had") {
  auto text = [](const std::string& nccl) {
    return "name: t\nnode:\n  gpus: 4\n"
           "  gpu: {name: g, memory: 16 GB, peak_flops: 100 TFLOP/s, memory_bandwidth: 1000 GB/s}\n"
           "  host: {memory: 512 GB, memory_bandwidth: 400 GB/s, cores: 8, adam_params_per_s: 1e9}\n"
           "  nvme: {capacity: 8 TB, read_bandwidth: 8 GB/s, write_bandwidth: 4 GB/s}\n"
           "  pcie: {bandwidth_per_gpu: 10 GB/s}\n"
           "  nvlink: {bandwidth_per_gpu: 100 GB/s, latency: 2 us}\n"
           "  nic: {count: 2, bandwidth: 10 GB/s}\n"
           "fabric: {latency: 5 us}\n" + nccl;
  };
  const auto plain = core::parse_hwprofile(text(""), "t.yaml");
  const auto nccl = core::parse_hwprofile(text("nccl: {release: 2.7.8, sm: 70, ll128: true}\n"), "t.yaml");
  CHECK(nccl.nccl.release == "2.7.8");
  CHECK(nccl.nccl.ll128);
  // 8 ranks on 2 nodes, 4 GB all-gather: hierarchical transfer 3/4 x 4 GB / 100 GB/s inside plus
  // 1/2 x 1 GB / 5 GB/s across = 0.13 s; per-hop latencies 3 x 2 us + 1 x 5 us.
  const double transfer = 0.75 * 4e9 / 100e9 + 0.5 * 1e9 / 5e9;
  CHECK(core::collective_seconds(plain, TaskKind::AllGather, 4e9, 8, 4) == Approx(transfer + 11e-6));
  const auto call = core::collective_call(nccl, TaskKind::AllGather, 4e9, 8, 4);
  CHECK(call.protocol == NcclProtocol::Simple);
  CHECK(call.latency == Approx((8.4 + 6 * 3.4 + 1 * 9.6) * 1e-6));
  CHECK(core::collective_seconds(nccl, TaskKind::AllGather, 4e9, 8, 4) == Approx(transfer + call.latency));
  // A small all-gather is latency-bound: NCCL's LL, 3.6 + 6 x 0.47 x 1.8 + 2.7 us plus 4x the transfer.
  const double small = 4e4, small_transfer = 0.75 * small / 100e9 + 0.5 * small / 4 / 5e9;
  const auto ll = core::collective_call(nccl, TaskKind::AllGather, small, 8, 4);
  CHECK(ll.protocol == NcclProtocol::LL);
  CHECK(ll.seconds == Approx((3.6 + 6 * 0.47 * 1.8 + 2.7) * 1e-6 + 4 * small_transfer));
  // The profile's nccl section is checked.
  CHECK_THROWS_WITH(core::parse_hwprofile(text("nccl: {release: 2.9.9}\n"), "t.yaml"), Catch::Contains("release"));
  CHECK_THROWS_WITH(core::parse_hwprofile(text("nccl: {release: 2.7.8, proto: LL}\n"), "t.yaml"), Catch::Contains("proto"));
}
