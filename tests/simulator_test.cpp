// The simulator runs planner Programs and reproduces closed forms: a compute-bound step, an
// NVMe-bound step; it matches the idealized list scheduler when no resource is shared and exceeds
// it when one is; efficiency against host bandwidth follows the paper's Fig. 3 trend; folding
// identical nodes changes nothing; Timelines pass the core's checker. Each simulation runs in a
// child process (one SimGrid engine per process).
#include <catch2/catch.hpp>
#include <string>
#include <tuple>

#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using core::TaskKind;

namespace {

struct Hw {
  int gpus = 1;
  std::string peak = "100 TFLOP/s";
  std::string hbm = "1000 GB/s";
  std::string gemm = "[[64, 0.5], [4096, 0.8]]";
  std::string launch = "5 us";
  std::string host_bw = "400 GB/s";
  std::string adam = "4e9";
  std::string nvme_read = "20 GB/s", nvme_write = "20 GB/s", nvme_latency = "20 us";
  bool nvme_serial = false;
  std::string nvme_in_step = "{read: 1, write: 1}";
  std::string pcie = "16 GB/s", pcie_latency = "2 us";
  int per_switch = 1;
  std::string uplink = "0";
  std::string yaml() const {
    return "name: test\nnode:\n  gpus: " + std::to_string(gpus) + "\n  gpu: {name: g, memory: 32 GB, peak_flops: " + peak +
           ", memory_bandwidth: " + hbm + ", kernel_launch: " + launch + ", gemm_efficiency: " + gemm +
           ", elementwise_efficiency: 1.0}\n  host: {memory: 1 TB, memory_bandwidth: " + host_bw +
           ", cores: 32, adam_params_per_s: " + adam + "}\n  nvme: {capacity: 10 TB, read_bandwidth: " + nvme_read +
           ", write_bandwidth: " + nvme_write + ", latency: " + nvme_latency + ", serial_requests: " + (nvme_serial ? "true" : "false") + ", in_step_slowdown: " + nvme_in_step + "}\n  pcie: {bandwidth_per_gpu: " + pcie +
           ", latency: " + pcie_latency + ", gpus_per_switch: " + std::to_string(per_switch) + ", switch_uplink: " + uplink +
           "}\n  nvlink: {bandwidth_per_gpu: 100 GB/s}\n  nic: {count: 1, bandwidth: 25 GB/s}\n";
  }
  core::HwProfile profile() const { return core::parse_hwprofile(yaml(), "test-hw.yaml"); }
};

core::ModelSpec model(int64_t micro_batch = 4) {
  return core::parse_model_spec("name: test-gpt\nlayers: 4\nhidden: 1024\nheads: 16\nseq: 512\nvocab: 1024\nmicro_batch: " +
                                    std::to_string(micro_batch) + "\n",
                                "test-model.yaml");
}

core::RunConfig config(const std::string& params, const std::string& optimizer, const std::string& checkpoints = "cpu") {
  return core::parse_run_config("zero_stage: 3\noffload: {params: " + params + ", optimizer: " + optimizer +
                                    "}\nactivation_checkpoint: {interval: 1, tier: " + checkpoints + "}\n",
                                "test-config.yaml");
}

core::RunConfig with_tasks_in_flight(core::RunConfig c, int slots) {
  c.aio_tasks_in_flight = slots;
  return c;
}

core::PlanResult plan(const core::HwProfile& hw, const core::RunConfig& c, int ranks, int64_t micro_batch = 4) {
  return core::make_plan(models::build_gpt(model(micro_batch)), hw, c, ranks);
}

sim::SimReport simulate_in_child(const core::Program& p, const core::HwProfile& hw, sim::SimOptions o = {}) {
  return sim::report_from_json(sim::run_isolated([&] { return sim::report_to_json(sim::simulate(p, hw, o)); }));
}

}  // namespace

TEST_CASE("a compute-bound step takes the FLOPs at the efficiency curve's rate") {
  Hw h;
  h.gemm = "[[1, 0.5]]";  // every GEMM at 50% of peak
  h.hbm = "1000 TB/s";
  h.launch = "0 us";
  const auto hw = h.profile();
  auto pr = plan(hw, config("none", "none", "none"), 1);
  double expected = 0;
  for (const auto& t : pr.program.tasks())
    if (core::is_compute(t.kind)) {
      // Attention has its own efficiency curves (none here: the peak), not the GEMM curve.
      const bool gemm = t.gemm_dim > 0 && pr.program.ops()[size_t(t.op)].kind != "attention";
      expected += t.flops / (100e12 * (gemm ? 0.5 : 1.0));
    }
  REQUIRE(expected > 0);
  auto r = simulate_in_child(pr.program, hw);
  CHECK(r.step_time == Approx(expected).epsilon(0.01));
  CHECK(r.busy[0].resource == "gpu");
  CHECK(r.busy[0].busy > 0.99);
}

TEST_CASE("an NVMe-bound step takes the bytes read and written at the drives' bandwidth") {
  Hw h;
  h.nvme_read = h.nvme_write = "0.5 GB/s";  // read and write share the drives' 0.5 GB/s
  h.nvme_latency = "0 us";
  h.pcie = "1000 GB/s";
  h.adam = "1e13";
  const auto hw = h.profile();
  auto pr = plan(hw, config("nvme", "nvme"), 1);
  double bytes = 0;
  for (const auto& t : pr.program.tasks())
    if (t.kind == TaskKind::NvmeRead || t.kind == TaskKind::NvmeWrite) bytes += t.bytes;
  REQUIRE(bytes > 0);
  auto r = simulate_in_child(pr.program, hw);
  CHECK(r.step_time == Approx(bytes / 0.5e9).epsilon(0.01));

  // Requests measured 3x slower inside a step than the store alone: the NVMe-bound step with them.
  h.nvme_in_step = "{read: 3, write: 3}";
  const auto slowed = h.profile();
  CHECK(slowed.node.nvme_read_in_step == 3.0);
  CHECK(simulate_in_child(pr.program, slowed).step_time == Approx(3 * bytes / 0.5e9).epsilon(0.01));
  h.nvme_in_step = "{read: 3, sideways: 2}";
  CHECK_THROWS_WITH(h.profile(), Catch::Contains("in_step_slowdown.sideways"));
}

TEST_CASE("a drive that serves one request at a time holds each request's latency against all others") {
  // Latency-bound NVMe traffic (a tiny bandwidth share per request, 5 ms each): with serial
  // requests every read and write waits for the one before it, so the step takes at least the
  // sum of their latencies; with queued requests the read and write lanes overlap theirs where they
  // run together.
  Hw h;
  h.nvme_latency = "5 ms";
  h.pcie = "1000 GB/s";
  h.adam = "1e13";
  auto run = [&](bool serial) {
    h.nvme_serial = serial;
    const auto hw = h.profile();
    auto pr = plan(hw, config("nvme", "nvme"), 1);
    double latency = 0, bytes = 0;
    for (const auto& t : pr.program.tasks())
      if ((t.kind == TaskKind::NvmeRead || t.kind == TaskKind::NvmeWrite) && t.bytes > 0) {
        latency += 5e-3;
        bytes += t.bytes;
      }
    REQUIRE(latency > 0.1);
    return std::tuple{simulate_in_child(pr.program, hw).step_time, latency, bytes / 20e9};
  };
  const auto [serial, latency, transfer] = run(true);
  const auto [queued, latency2, transfer2] = run(false);
  CHECK(serial >= latency + transfer - 1e-6);
  CHECK(serial == Approx(latency + transfer).epsilon(0.05));
  CHECK(queued < 0.97 * serial);
}

TEST_CASE("with no shared resource the simulated step equals the idealized list schedule") {
  Hw h;  // one GPU per node: nothing is shared
  const auto hw = h.profile();
  for (const char* where : {"none", "cpu"}) {
    auto pr = plan(hw, config(where, where), 1);
    const double ideal = core::estimate_step_time(pr.program, hw);
    auto r = simulate_in_child(pr.program, hw);
    INFO("params and optimizer on " << where);
    CHECK(r.step_time == Approx(ideal).epsilon(0.01));
  }
}

TEST_CASE("GPUs sharing host memory make the simulated step longer than the idealized one") {
  Hw h;
  h.gpus = 8;
  h.host_bw = "20 GB/s";  // 8 GPUs x 16 GB/s of PCIe through 20 GB/s of host memory
  const auto hw = h.profile();
  auto pr = plan(hw, config("cpu", "cpu"), 8);
  const double ideal = core::estimate_step_time(pr.program, hw);
  auto r = simulate_in_child(pr.program, hw);
  CHECK(r.step_time > 1.2 * ideal);
}

TEST_CASE("efficiency against host bandwidth for parameter traffic follows the paper's Fig. 3 trend") {
  // Params, gradients and optimizer states on the host; only the PCIe bandwidth changes. The
  // efficiency is the compute-only step time over the simulated step time.
  auto efficiency_at = [](const std::string& pcie, int64_t micro_batch) {
    Hw h;
    h.pcie = pcie;
    h.adam = "1e12";
    h.host_bw = "10000 GB/s";
    const auto hw = h.profile();
    auto pr = plan(hw, config("cpu", "cpu"), 1, micro_batch);
    double compute = 0;
    for (const auto& t : pr.program.tasks())
      if (core::is_compute(t.kind)) compute += core::nominal_duration(pr.program, t, 0, hw);
    return compute / simulate_in_child(pr.program, hw).step_time;
  };
  std::vector<double> eff;
  for (const char* bw : {"0.25 GB/s", "1 GB/s", "4 GB/s", "16 GB/s", "64 GB/s"}) eff.push_back(efficiency_at(bw, 2));
  for (size_t i = 1; i < eff.size(); ++i) CHECK(eff[i] >= eff[i - 1] - 1e-9);
  CHECK(eff.front() < 0.35);
  CHECK(eff.back() > 0.89);  // 0.8999 at 64 GB/s (0.9001 while the loss had a backward task of its own)
  // More work per byte (a larger batch) needs less bandwidth for the same efficiency.
  CHECK(efficiency_at("1 GB/s", 8) > eff[1] + 0.05);
}

TEST_CASE("folding identical nodes onto a mirror gives the full simulation's step") {
  Hw h;
  h.gpus = 2;
  const auto hw = h.profile();
  auto pr = plan(hw, config("cpu", "cpu"), 8);  // 4 nodes of 2 GPUs
  sim::SimOptions full;
  full.fold_symmetric_nodes = false;
  auto a = simulate_in_child(pr.program, hw);
  auto b = simulate_in_child(pr.program, hw, full);
  CHECK(a.folded);
  CHECK_FALSE(b.folded);
  CHECK(a.step_time == Approx(b.step_time).epsilon(1e-6));
  CHECK(a.peak_host_per_node == Approx(b.peak_host_per_node));
}

TEST_CASE("the simulated Timeline respects the Program: dependencies, serial lanes, memory budgets") {
  Hw h;
  h.gpus = 4;
  h.per_switch = 2;
  h.uplink = "16 GB/s";
  const auto hw = h.profile();
  auto pr = plan(hw, config("nvme", "nvme"), 4);
  std::string out = sim::run_isolated([&] {
    sim::SimOptions o;
    o.timeline_all_ranks = true;
    auto r = sim::simulate(pr.program, hw, o);
    auto check = core::check_timeline(pr.program, r.timeline, 1e-9);
    std::string s = std::to_string(r.timeline.events.size()) + " " + (r.within_budget ? "1" : "0") + "\n";
    for (const auto& e : check.errors) s += e + "\n";
    return s;
  });
  INFO(out);
  CHECK(out.rfind(" 1\n") == out.find('\n') - 2);
  CHECK(out.find('\n') == out.size() - 1);  // no checker errors
}

TEST_CASE("a tensor-parallel group's all-reduce takes the ring's closed form on NVLink, inside the step", "[tensor-parallel]") {
  // Two GPUs in a node, one group of two, nothing offloaded: the step is compute plus the group's
  // all-reduces on the compute stream, each 2(k-1)/k S over the GPU's NVLink (100 GB/s) plus latency.
  Hw h;
  h.gpus = 2;
  const auto hw = h.profile();
  auto c = config("none", "none", "device");
  c.tensor_parallel = 2;
  const auto pr = core::make_plan(models::build_gpt(model(), 2), hw, c, 2);
  double ar_bytes = 0;
  int ars = 0;
  for (const auto& t : pr.program.tasks())
    if (t.kind == TaskKind::AllReduce && t.participants == 2) {
      ar_bytes += t.bytes;
      ++ars;
    }
  REQUIRE(ars > 0);
  auto r = simulate_in_child(pr.program, hw);
  const double ideal = core::estimate_step_time(pr.program, hw);
  CHECK(r.step_time == Approx(ideal).epsilon(0.02));
  // The list schedule charges each group all-reduce its closed form (above), so equality means the
  // simulator's group collective took it too; together they are a visible part of the step.
  const double closed_form = ar_bytes * 2.0 * (2 - 1) / 2 / 100e9;
  CHECK(closed_form > 0.01 * r.step_time);
  // 16 ranks in 8 groups of 2 over 8 nodes of 2 GPUs: groups stay inside their node.
  Hw h8;
  h8.gpus = 2;
  c.tensor_parallel = 2;
  const auto pr8 = core::make_plan(models::build_gpt(model(), 2), h8.profile(), c, 16);
  auto r8 = simulate_in_child(pr8.program, h8.profile());
  CHECK(r8.step_time >= r.step_time * 0.99);
}

TEST_CASE("GDS moves offloaded activations NVMe <-> GPU past host memory: faster where host memory is the bottleneck",
          "[activation][gds]") {
  Hw h;
  h.host_bw = "3 GB/s";  // the host path's bottleneck: every host<->device copy crosses host memory
  h.pcie = "32 GB/s";
  const auto c = core::parse_run_config("zero_stage: 3\nactivation_offload: {policy: offload_all, tier: nvme}\n", "c.yaml");
  const auto via_host_hw = h.profile();
  const auto gds_hw = core::parse_hwprofile(h.yaml() + "  gds: {bandwidth_per_switch: 32 GB/s}\n", "test-gds.yaml");
  const auto via_host = plan(via_host_hw, c, 1);
  const auto gds = plan(gds_hw, c, 1);
  REQUIRE(!via_host.program.activations().empty());
  REQUIRE(gds.program.activations().front().gds);
  const auto a = simulate_in_child(via_host.program, via_host_hw);
  const auto b = simulate_in_child(gds.program, gds_hw);
  auto busy = [](const sim::SimReport& r, const std::string& name) {
    for (const auto& x : r.busy)
      if (x.resource == name) return x.busy;
    return 0.0;
  };
  CHECK(busy(a, "pcie_d2h") > 0);
  CHECK(busy(b, "pcie_d2h") == 0);  // no copy to the host at all
  CHECK(busy(b, "nvme_write") > 0);
  CHECK(b.step_time < a.step_time);
  // The idealized scheduler the planner uses sees the same.
  CHECK(core::estimate_step_time(gds.program, gds_hw) < core::estimate_step_time(via_host.program, via_host_hw));
}

TEST_CASE("NVMe tasks in flight together share the drive's bandwidth: an NVMe-bound step takes bytes / bandwidth",
          "[slots]") {
  // K tasks on an NVMe lane overlap, but the drive moves its bandwidth's worth of bytes whatever
  // the number of requests: the step is the bytes at 0.5 GB/s for every K, in the simulator and in
  // the list scheduler's model of the lane.
  Hw h;
  h.nvme_read = h.nvme_write = "0.5 GB/s";
  h.nvme_latency = "0 us";
  h.pcie = "1000 GB/s";
  h.adam = "1e13";
  const auto hw = h.profile();
  for (int slots : {1, 2, 4}) {
    INFO("tasks_in_flight " << slots);
    auto pr = plan(hw, with_tasks_in_flight(config("nvme", "nvme"), slots), 1);
    REQUIRE(pr.program.lane_slots(core::Lane::NvmeRead) == slots);
    double bytes = 0;
    for (const auto& t : pr.program.tasks())
      if (t.kind == TaskKind::NvmeRead || t.kind == TaskKind::NvmeWrite) bytes += t.bytes;
    CHECK(simulate_in_child(pr.program, hw).step_time == Approx(bytes / 0.5e9).epsilon(0.01));
  }
}

TEST_CASE("NVMe tasks in flight together overlap their latencies on a queued drive, not on a serial one", "[slots]") {
  // Latency-bound NVMe traffic (5 ms per request): K tasks in flight on a drive with a deep queue
  // overlap their latencies, so the step shrinks, and the list scheduler (latency overlapped,
  // transfers first come first served) agrees with the simulator; a drive that serves one request
  // at a time holds every latency against all others, so the step stays at least their sum.
  Hw h;
  h.nvme_latency = "5 ms";
  h.pcie = "1000 GB/s";
  h.adam = "1e13";
  auto run = [&](bool serial, int slots) {
    h.nvme_serial = serial;
    const auto hw = h.profile();
    auto pr = plan(hw, with_tasks_in_flight(config("nvme", "nvme"), slots), 1);
    double latency = 0, bytes = 0;
    for (const auto& t : pr.program.tasks())
      if ((t.kind == TaskKind::NvmeRead || t.kind == TaskKind::NvmeWrite) && t.bytes > 0) {
        latency += 5e-3;
        bytes += t.bytes;
      }
    return std::tuple{simulate_in_child(pr.program, hw).step_time, core::estimate_step_time(pr.program, hw), latency,
                      bytes / 20e9};
  };
  const auto [one, one_ideal, latency, transfer] = run(false, 1);
  const auto [four, four_ideal, latency4, transfer4] = run(false, 4);
  CHECK(four < 0.8 * one);
  CHECK(four_ideal < 0.8 * one_ideal);
  CHECK(four == Approx(four_ideal).epsilon(0.1));
  const auto [serial4, serial_ideal, latency_s, transfer_s] = run(true, 4);
  CHECK(serial4 >= latency_s + transfer_s - 1e-6);
}

TEST_CASE("two checkpoints per block, copied synchronously, add their bytes over PCIe both ways to the step",
          "[checkpoints]") {
  // One GPU, every state on it, checkpoints in host memory with DeepSpeed's blocking copies. Splitting
  // each block in two (Megatron's --split-transformers) keeps a second checkpoint of tokens x hidden
  // per block: copied out in forward and back before the recompute, on the compute stream, so the step
  // grows by 2 x layers x tokens x hidden x working bytes / PCIe bandwidth.
  Hw h;
  const auto hw = h.profile();
  auto c = config("none", "none", "cpu");
  c.checkpoint_copies_synchronous = true;
  const auto one = plan(hw, c, 1);
  c.checkpoints_per_block = 2;
  const auto two = plan(hw, c, 1);
  auto copied = [](const core::Program& p) {
    double b = 0;
    for (const auto& t : p.tasks())
      if (t.data == core::Data::Checkpoint && (t.kind == TaskKind::CopyD2H || t.kind == TaskKind::CopyH2D)) b += t.bytes;
    return b;
  };
  const auto m = model();
  const double extra = 2.0 * double(m.layers) * double(m.seq * m.micro_batch) * double(m.hidden) * hw.node.gpu.working_bytes;
  CHECK(copied(two.program) - copied(one.program) == Approx(extra));
  const double t1 = simulate_in_child(one.program, hw).step_time, t2 = simulate_in_child(two.program, hw).step_time;
  CHECK(t2 - t1 == Approx(extra / 16e9).epsilon(0.1));
}

TEST_CASE("DeepSpeed's host path moves fp32 gradients and parameters and adds host passes, by their closed forms",
          "[optimizer]") {
  // ZeRO-2 with a host optimizer on one GPU, the optimizer after backward in one sub-group. DeepSpeed's
  // path (optimizer.host_path: deepspeed-0.3) copies each gradient to the host in fp32 (2 more bytes
  // per parameter over PCIe), unscales it in a host pass and has Adam write the fp32 master into a
  // pinned buffer (40 bytes of host traffic per parameter against the fused update's 28), which goes
  // back to the device in fp32 (2 more bytes per parameter). Adam and the copy back follow backward,
  // so the step grows by 12 P / the socket's memory bandwidth + 2 P / PCIe, and by the part of the
  // gradient copies backward does not hide: at micro-batch 16 only the last layer's (at 4 they would
  // hold backward back: gradient stores in flight are bounded).
  Hw h;
  const auto hw = h.profile();
  const std::string base = "zero_stage: 2\noffload: {optimizer: cpu, gradients: cpu}\nactivation_checkpoint: {interval: 1, tier: device}\n";
  const auto fused = plan(hw, core::parse_run_config(base, "fused.yaml"), 1, 16);
  const auto ds = plan(hw, core::parse_run_config(base + "optimizer: {host_path: deepspeed-0.3}\n", "ds.yaml"), 1, 16);
  struct Sums {
    double grads_d2h = 0, params_h2d = 0, adam = 0, params = 0;
  };
  auto sums = [](const core::Program& p) {
    Sums s;
    for (const auto& t : p.tasks()) {
      if (t.kind == TaskKind::CopyD2H && t.data == core::Data::Grad) s.grads_d2h += t.bytes;
      if (t.kind == TaskKind::CopyH2D && t.data == core::Data::Param && t.phase == core::Phase::Optimizer) s.params_h2d += t.bytes;
      if (t.kind == TaskKind::OptimizerStep) {
        s.adam += t.bytes;
        s.params += double(t.sg_count);
      }
    }
    return s;
  };
  const Sums f = sums(fused.program), d = sums(ds.program);
  const double P = f.params;
  REQUIRE(P > 0);
  CHECK(d.params == P);
  CHECK(f.adam == Approx(core::kAdamHostBytesPerParam * P));
  CHECK(d.adam == Approx(40.0 * P));
  CHECK(d.grads_d2h == Approx(2.0 * f.grads_d2h));
  CHECK(f.params_h2d == Approx(2.0 * P));
  CHECK(d.params_h2d == Approx(4.0 * P));
  const double host_bw = hw.node.host_memory_bandwidth / hw.node.cpu_sockets;
  const double expected = 12.0 * P / host_bw + 2.0 * P / 16e9;
  const double t_fused = simulate_in_child(fused.program, hw).step_time, t_ds = simulate_in_child(ds.program, hw).step_time;
  CHECK(t_ds - t_fused == Approx(expected).epsilon(0.15));
  // Stage 3 with the optimizer and gradients on NVMe: the gradients go to NVMe in fp32 (DeepSpeed
  // swaps them with the optimizer states) and each update also copies the fp32 master to fp16 (42).
  const std::string s3 = "zero_stage: 3\noffload: {params: cpu, gradients: nvme, optimizer: nvme}\n"
                         "activation_checkpoint: {interval: 1, tier: cpu}\n";
  const auto f3 = plan(hw, core::parse_run_config(s3, "f3.yaml"), 1);
  const auto d3 = plan(hw, core::parse_run_config(s3 + "optimizer: {host_path: deepspeed-0.3}\n", "d3.yaml"), 1);
  auto nvme_grads = [](const core::Program& p) {
    double b = 0;
    for (const auto& t : p.tasks())
      if (t.data == core::Data::Grad && (t.kind == TaskKind::NvmeWrite || t.kind == TaskKind::NvmeRead)) b += t.bytes;
    return b;
  };
  CHECK(nvme_grads(d3.program) == Approx(2.0 * nvme_grads(f3.program)));
  const double P3 = sums(f3.program).params;
  CHECK(sums(d3.program).adam == Approx(42.0 * P3));
  CHECK(at(d3.plan.static_bytes, core::Tier::Nvme) - at(f3.plan.static_bytes, core::Tier::Nvme) == Approx(2.0 * P3));
  // The path describes a host optimizer: with the optimizer on the device the plan says so.
  CHECK_THROWS_WITH(plan(hw, core::parse_run_config("zero_stage: 2\noptimizer: {host_path: deepspeed-0.3}\n", "dev.yaml"), 1),
                    Catch::Matchers::Contains("host_path") && Catch::Matchers::Contains("offload.optimizer"));
}
