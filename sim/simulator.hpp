// The simulator: runs a core::Program — the one the engine runs — on the SimGrid platform of a
// hwprofile and reports what the engine reports: step time, throughput, busy fraction of each
// resource, peak memory per tier and a Timeline.
//
// Each lane of each rank is an actor that runs the lane's tasks in program order; a task starts
// when its dependencies have ended (an actor whose next task is not ready suspends and is resumed
// by the task that completes its last dependency, so only ready activities are ever submitted).
// Compute is an Exec on the rank's GPU host, CPU Adam an Exec on its CPU socket, copies are flows
// over PCIe (when the profile's device is the host's own cores, compute, optimizer work and copies
// are instead Execs on the node's shared core pool, beside other processes' measured load; see
// platform.hpp), NVMe tasks are disk I/O, and a collective waits for every participant and then runs
// the per-rank flows of its algorithm (collectives.hpp). Nothing here decides anything: the order,
// placement and overlap all come from the Program.
//
// One simulation per process (SimGrid's engine is a singleton): call simulate() once, or inside
// run_isolated() (isolate.hpp) to run several.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/program.hpp"
#include "core/timeline.hpp"
#include "sim/collectives.hpp"

namespace zinf::sim {

struct SimOptions {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::Hierarchical;
  // Ranks whose tasks are recorded in the Timeline (all ranks run regardless); empty: none.
  std::vector<int> timeline_ranks{0};
  bool timeline_all_ranks = false;
  double samples_per_step = 0;  // sequences per step over all ranks, for samples/s (0: not reported)
  // A bandwidth-centric Program runs the same tasks on every rank, so all nodes behave alike: run
  // node 0's ranks with every link of node 0 loaded exactly as in the full run, and the other
  // nodes' GPUs folded onto one mirror node as the ends of node 0's inter-node flows. Exact for
  // the ring and hierarchical algorithms on a full-bisection fabric; off: every rank is simulated.
  // Off as well on a fat-tree fabric, whose static routes make nodes differ.
  bool fold_symmetric_nodes = true;
  // GPU-to-GPU variability (the profile's node.gpu.variability) and the placement of nodes on a
  // scattered fat tree. 0: every simulated rank's kernels take the expected slowest of all ranks'
  // times (an order statistic: what a job that waits for its slowest GPU at every collective sees
  // on average). A seed: rank r's kernels take gpu_time_factor(seed, r) times the profile's time,
  // and a folded run gives node 0's ranks the slowest of all ranks' factors for that seed.
  uint64_t seed = 0;
};

// Busy fraction of one resource: the time it was in use divided by the step time, averaged over
// the GPUs (or nodes) that have one.
struct ResourceBusy {
  std::string resource;  // gpu, pcie_h2d, pcie_d2h, nvme_read, nvme_write, nvlink/nic (comm), nic, cpu
  double busy = 0;
};

struct SimReport {
  double step_time = 0;           // seconds
  int ranks = 0;
  int nodes = 0;
  double samples_per_s = 0;
  double flops_per_gpu = 0;       // FLOPs executed by one GPU in the step (forward, recompute, backward)
  double tflops_per_gpu = 0;      // flops_per_gpu / step_time / 1e12
  double fraction_of_peak = 0;    // of the GPU's peak_flops
  std::vector<ResourceBusy> busy;
  // Peaks of resident + live bytes: device per GPU (worst GPU), host and NVMe per node (worst node).
  double peak_device_per_gpu = 0;
  double peak_host_per_node = 0;
  double peak_nvme_per_node = 0;
  bool within_budget = true;      // every rank's peaks within the Program's per-rank budgets
  bool folded = false;            // identical nodes were folded (SimOptions::fold_symmetric_nodes)
  double slowest_gpu = 1;         // the largest kernel-time factor of the simulated ranks (GPU variability)
  core::Timeline timeline;
  uint64_t activities = 0;        // activities started: execs, transfers (sim/flows.hpp), timed waits
  uint64_t tasks_run = 0;         // task executions over all ranks
};

// Simulates one step of `program` on ceil(ranks / GPUs per node) nodes of `hw` (rank r is GPU
// r % G of node r / G; a Timeline records only simulated ranks: node 0's when folded). Creates this
// process's SimGrid engine: callable once per process.
SimReport simulate(const core::Program& program, const core::HwProfile& hw, const SimOptions& options = {});

// The report without the Timeline as JSON, and back (to cross process boundaries).
std::string report_to_json(const SimReport& r);
SimReport report_from_json(const std::string& json);

}  // namespace zinf::sim
