// A Timeline is what one step did, measured (engine) or predicted (simulator, idealized list
// scheduler), in one schema: rank, lane, task id, kind, label, start, end, bytes, flops. It is
// written as CSV and as Chrome trace JSON (opens in Perfetto). `check_timeline` validates a
// Timeline against the Program it ran (dependencies respected, lanes serial, memory within budget);
// both executors record Timelines; the Trainer checks its first step with it, the tests the rest. Plain value types; functions are thread-safe.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/nccl.hpp"
#include "core/program.hpp"

namespace zinf::core {

struct TimelineEvent {
  int rank = 0;
  Lane lane = Lane::Compute;
  int32_t task = 0;          // Program task id
  TaskKind kind = TaskKind::Forward;
  std::string label;
  double start = 0;          // seconds from the start of the step
  double end = 0;
  double bytes = 0;
  double flops = 0;
};

struct Timeline {
  std::vector<TimelineEvent> events;

  double makespan() const;  // latest end
  // Header "rank,lane,task,kind,label,start,end,bytes,flops"; labels are quoted.
  void write_csv(std::ostream& out) const;
  // Chrome trace event format: one process per rank, one thread per lane, "X" events in µs.
  void write_chrome_trace(std::ostream& out) const;
};

struct TimelineCheck {
  std::vector<std::string> errors;   // empty: the Timeline is valid for the Program
  std::vector<PerTier> peak_bytes;   // per checked rank: static + live bytes at the worst moment
  bool ok() const { return errors.empty(); }
};

// Checks, for every rank that appears in `timeline`: each task of the Program appears once (no-op
// tasks of other owners may be absent), no task starts before all its dependencies ended, a lane
// runs one task at a time, and static + live bytes per tier (allocs at start, frees at end) never
// exceed the Program's budget. `tolerance` (seconds) absorbs clock noise of measured runs.
TimelineCheck check_timeline(const Program& program, const Timeline& timeline, double tolerance = 0.0);

// Nominal duration of one task on `rank` at the hwprofile's rates: compute from flops /
// (peak · GEMM efficiency) (or memory traffic / HBM bandwidth for non-GEMM kernels, whichever is
// longer); copies from bytes / per-GPU PCIe bandwidth with all GPUs active; NVMe from the node's
// bandwidth shared by its GPUs; collectives as collective_seconds gives; CPU Adam from the node's
// Adam rate shared by its GPUs.
double nominal_duration(const Program& program, const Task& task, int rank, const HwProfile& hw);
// Seconds of a collective of `bytes` (the whole gathered or reduced buffer) over a group of `parts`
// ranks with `per_node` of them in each node, at nominal rates, as the simulator's default
// hierarchical algorithm moves it (sim/collectives.hpp): inside one node a ring over NVLink (a
// chain for broadcast and reduce); across N = parts / per_node nodes, a ring inside each node and
// rings of one local index across nodes, each GPU sending its 1 / per_node of the buffer at its
// share of the node's NICs (nic_bandwidth_total / gpus; PCIe if slower; a broadcast's chains, one
// sender per group, their NICs). A node thus takes about
// the buffer once from the fabric per all-gather, not once per GPU. A group that does not fill
// whole nodes alike is a flat ring at the GPU's NIC share. With the profile's `nccl` section the
// latency and the protocol are NCCL's (core/nccl.hpp: the call NCCL's tuning model picks, its
// transfer scaled from the ring's at full bandwidth); without it, the per-step latencies of the
// profile's NVLink and fabric.
double collective_seconds(const HwProfile& hw, TaskKind kind, double bytes, int parts, int per_node);
// The call collective_seconds prices: NCCL's algorithm, protocol, latency and transfer scale (without
// an `nccl` section: ring, Simple, the per-step latencies, scale 1).
NcclCall collective_call(const HwProfile& hw, TaskKind kind, double bytes, int parts, int per_node);
// A compute task (or a device-side optimizer step) as one kernel of `gpu`: core::kernel_seconds with
// the kernel class its kind and operator give (forward or backward GEMM or attention, elementwise),
// at the kernel's in_step_slowdown.
double task_kernel_seconds(const GpuSpec& gpu, const Program& program, const Task& task);
// The cores that kernel keeps busy (core::kernel_threads: more than 1 only for a CPU backend's GEMMs
// and attention under several OpenBLAS threads).
double task_kernel_threads(const GpuSpec& gpu, const Program& program, const Task& task);
// The GpuSpec::in_step_slowdown key of a compute or optimizer task ("linear_backward", "optimizer").
std::string in_step_key(const Program& program, const Task& task);
// The host-memory work a collective of a CPU-backend device (node.device_shares_host_cores) does
// beside its transfer, in seconds at the device's memory_bandwidth (bytes read + written per
// second): a parameter's all-gather or broadcast widens the bf16 unit into the working copy
// (gpu.working_bytes per element), a gradient's reduce-scatter scales the shard `rank` keeps (a
// reduce: the root the whole unit); with one participant an all-gather or a reduction is itself a
// copy (of the bf16 shard; of the working-precision gradient). 0 for a GPU profile, and for other data.
double collective_host_seconds(const Program& program, const Task& task, int rank, const HwProfile& hw);

// The device's own work beside a collective's transfer, in seconds at its memory bandwidth (x its
// elementwise efficiency): the passes over the whole buffer (at the working precision) the
// Program states for each parameter all-gather and gradient reduce-scatter
// (Program::gather_device_passes, reduce_device_passes: a DeepSpeed release's list copies and
// zero fill). 0 for other tasks and for zinf's engine.
double collective_device_seconds(const Program& program, const Task& task, const HwProfile& hw);

// The idealized list scheduler: each lane of each rank a serial resource running its tasks in
// program order at nominal rates, a task starting when its dependencies (for collectives: on all
// participants) have ended. Bandwidth-centric programs are symmetric, so one rank is scheduled and
// `ranks` (default: rank 0 only) are copies of it; owner-based programs schedule every rank.
Timeline schedule_ideal(const Program& program, const HwProfile& hw, const std::vector<int>& ranks = {0});

// Static + live bytes per tier of each of `ranks` at the worst moment of `schedule_ideal`'s
// schedule (what check_timeline reports for it, without building the Timeline).
std::vector<PerTier> ideal_peak_bytes(const Program& program, const HwProfile& hw, const std::vector<int>& ranks = {0});

// One tier's worst moment on one rank: static + live bytes, and the live bytes by what their
// buffers hold (MemUse) at that moment (they sum to `bytes` less the rank's static bytes).
struct TierPeak {
  double bytes = 0;
  std::array<double, kMemUseCount> live{};
  int rank = 0;
};
using PeakComposition = std::array<TierPeak, 3>;  // indexed by Tier
// ideal_peak_bytes with each tier's peak taken apart.
std::vector<PeakComposition> ideal_peak_composition(const Program& program, const HwProfile& hw,
                                                    const std::vector<int>& ranks = {0});

// Makespan of `schedule_ideal`: the step time the simulator's tests compare against.
double estimate_step_time(const Program& program, const HwProfile& hw);

}  // namespace zinf::core
