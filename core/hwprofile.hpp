// HwProfile is a cluster described as data (hwprofiles/*.yaml, schema in hwprofiles/README.md):
// one node type repeated over a fabric. All rates are bytes/s or FLOP/s, sizes in bytes, times in
// seconds. The planner reads budgets from it; the simulator builds its platform and cost model from
// it. Plain value type.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/precision.hpp"

namespace zinf::core {

// y as a piecewise-linear function of x, clamped at both ends (efficiency curves).
struct Curve {
  std::vector<std::pair<double, double>> points;
  double at(double x) const;
};

struct GpuSpec {
  std::string name;
  double memory = 0;           // bytes of device memory
  double peak_flops = 0;       // dense bf16/fp16 tensor-core FLOP/s
  double memory_bandwidth = 0; // HBM bytes/s
  double kernel_launch = 0;    // seconds per kernel
  // Fraction of peak a GEMM reaches as a function of its shape: x = gemm_intensity_dim(m, n, k),
  // the side of the square GEMM that does as many FLOPs per element it moves; y = fraction of
  // peak_flops. A curve measured on square GEMMs (x = their side) is read as it is.
  // This curve is for backward GEMMs, and for forward ones too unless gemm_forward_efficiency is given.
  Curve gemm_efficiency;
  Curve gemm_forward_efficiency;
  double elementwise_efficiency = 0.8;  // fraction of memory_bandwidth for non-GEMM kernels
  // Arithmetic rate of non-GEMM kernels (layernorm, GELU, Adam), FLOP/s; 0: peak_flops. A CPU's
  // vector units reach a small fraction of its GEMM peak on transcendental-heavy elementwise code.
  double vector_flops = 0;
  // Fraction of peak_flops the attention core reaches, forward and backward, as a function of the
  // head size (the smallest dimension of its per-head GEMMs). No curve: 1.
  Curve attention_forward_efficiency;
  Curve attention_backward_efficiency;
  // CPU backend with OpenBLAS running several threads per process (measured_on.blas_threads > 1):
  // how many cores a kernel keeps busy, its time on one BLAS thread over its time as profiled, by
  // the same argument as the curves above (gemm_intensity_dim for a linear's forward and backward
  // together; the head size for the attention core). OpenBLAS splits a GEMM only above a size, so
  // small ones stay on one core. No curve: one core (one BLAS thread, or a GPU). Every other kernel
  // runs on one thread.
  Curve gemm_threads;
  Curve attention_threads;
  // How many times longer each kind of kernel runs inside a training step than alone in a loop
  // (caches shared with the step's other work, operands evicted between uses, the backend's own
  // work around the kernel), keyed "<op kind>_forward" or "<op kind>_backward" (the op kinds of
  // core/graph.hpp; a recompute is a forward) and "optimizer". Measured by profile-hw on the CPU
  // backend; a kernel not listed: 1 (the curves above describe it as it runs in a step).
  std::map<std::string, double> in_step_slowdown;
  double in_step(const std::string& key) const;
  // Bytes per element of what the device holds while it computes: activations and their
  // gradients, gathered parameters, gradients before their reduction. 2 (`working_precision:
  // bf16`, the default): a GPU's bf16 kernels, activations counted by the paper's formula. 4
  // (`fp32`): the CPU backend, whose kernels keep fp32 working copies and every intermediate of a
  // block; the planner then counts the tensors those kernels keep (core/kernel_activations.hpp).
  int working_bytes = 2;
  // The 16-bit formats peak_flops is the rate of (`half_precisions`, default both). A format not
  // listed runs emulated, at the fp32 rate: bf16 on a V100 (PyTorch upcasts it).
  bool bf16_native = true;
  bool fp16_native = true;
  // Dense fp32 GEMM FLOP/s, without tensor cores (`peak_flops_fp32`); 0: not given, and an fp32
  // run cannot be costed. A profile whose working precision is fp32 (the CPU backend) has it in
  // peak_flops.
  double peak_flops_fp32 = 0;
  // GPU-to-GPU variability: identical GPUs of one model sustain different rates (manufacturing and
  // power management). The distribution of one GPU's kernel time over the median GPU's: a normal
  // core whose whisker range (Q3 + 1.5 IQR minus Q1 - 1.5 IQR, i.e. 4 IQR) over the median is
  // `variability_spread`, plus a fraction `variability_outliers` of GPUs slower than the upper
  // whisker, spread evenly up to `variability_slowest` times the median. 0, 0: every GPU alike.
  double variability_spread = 0;
  double variability_outliers = 0;
  double variability_slowest = 1;
  bool has_variability() const { return variability_spread > 0 || variability_outliers > 0; }
};

// The 16-bit format the GPU runs natively (bf16 where it has both), or bf16 for the CPU backend.
Precision native_precision(const GpuSpec& g);

// `hw` as a run in `p` sees it: peak_flops at the rate of that format (fp32: peak_flops_fp32; a
// 16-bit format the GPU does not run natively: the fp32 rate too). Appends to `notes` what changed.
// Throws ConfigError naming node.gpu.peak_flops_fp32 when a rate it needs is not in the profile.
struct HwProfile;
// Unset: the GPU's native format, `hw` unchanged.
HwProfile for_precision(const HwProfile& hw, std::optional<Precision> p, std::vector<std::string>* notes = nullptr);

// 3 / (1/m + 1/n + 1/k): the side of the square GEMM with the arithmetic intensity of an m x n x k
// one (2mnk FLOPs over mk + kn + mn elements). Packing the operands and writing the result cost in
// proportion to those elements, so two GEMMs of equal intensity reach about the same fraction of
// peak: a tile of a linear (n cut by the tiling factor, m and k whole) keeps most of the layer's
// rate, where its smallest dimension alone would place it among much smaller GEMMs.
double gemm_intensity_dim(double m, double n, double k);

// The keys in_step_slowdown may hold.
const std::vector<std::string>& in_step_keys();

// What a device kernel is, for its cost.
enum class Kernel { Elementwise, GemmForward, GemmBackward, AttentionForward, AttentionBackward };

// Seconds of one device kernel: launch latency plus the larger of its arithmetic time (GEMMs and
// attention at their efficiency curves' value for `curve_dim`: gemm_intensity_dim for a GEMM, the
// head size for attention;
// anything else at vector_flops) and its memory time at elementwise_efficiency of the bandwidth,
// the latter times `slowdown` (the kernel's in_step_slowdown, when it runs in a training step).
// The one kernel cost the simulator and the idealized scheduler share.
double kernel_seconds(const GpuSpec& g, Kernel kernel, double flops, double bytes, int64_t curve_dim, double slowdown = 1.0);

// The cores one such kernel keeps busy (GpuSpec::gemm_threads, attention_threads; at least 1).
double kernel_threads(const GpuSpec& g, Kernel kernel, int64_t curve_dim);

struct NodeSpec {
  int gpus = 1;
  GpuSpec gpu;
  double host_memory = 0;            // bytes of DRAM
  double host_memory_bandwidth = 0;  // bytes/s, whole node
  int cpu_sockets = 1;
  int cpu_cores = 1;
  double cpu_adam_rate = 0;          // parameters/s of CPU Adam for the whole node
  // The "GPU" is the host's own cores (the CPU backend): compute, CPU Adam and host copies all run
  // as threads on one pool of cpu_cores cores, which the simulator shares among them. Off for real
  // GPUs, whose kernels do not take a host core.
  bool device_shares_host_cores = false;
  // Runnable threads of other processes on those cores, on average, when the profile was measured
  // (a shared machine). Only read when device_shares_host_cores.
  double background_threads = 0;
  // With device_shares_host_cores: how many one-thread rates the cores deliver together when each
  // runs a compute thread (measured; 0: cpu_cores). Below cpu_cores where virtual cores share a
  // physical one (SMT siblings) or the host throttles: then N busy threads each run slower.
  double parallel_throughput = 0;
  // With device_shares_host_cores: how long a collective waits for its slowest rank, per second of
  // compute each rank did since its previous collective, as a curve over the ranks on the node.
  // Ranks sharing cores drift apart (the scheduler runs some while others wait) and every
  // collective waits for the last one. Measured by profile-hw under mpirun; empty: no drift.
  Curve rank_skew;
  // With device_shares_host_cores: the BLAS threads each rank of a run gets, when fewer than the
  // profile measured its kernels with (0: as profiled). Not read from a profile: core::colocate sets
  // it where the profile's count was zinf's default (its cores, for one rank), which it splits
  // among the ranks on the node as a run does. A kernel keeps that many cores at most, doing the
  // same work.
  int rank_blas_threads = 0;
  double core_capacity() const { return parallel_throughput > 0 ? parallel_throughput : double(std::max(1, cpu_cores)); }
  // The share of one core a single thread got while the profile measured its rates (with
  // background_threads competing): every rate above is that of one thread at this share.
  // A kernel on `threads` threads got min(threads, capacity · threads / (threads + background))
  // cores: this share of one core per thread.
  double profiled_core_share(double threads = 1) const;
  double nvme_capacity = 0;          // bytes, whole node
  int nvme_drives = 1;
  double nvme_read_bandwidth = 0;    // bytes/s, whole node
  double nvme_write_bandwidth = 0;   // bytes/s, whole node
  double pcie_bandwidth = 0;         // bytes/s per GPU, one direction, when it moves data alone
  int gpus_per_pcie_switch = 1;      // GPUs sharing one switch uplink to the host
  double pcie_switch_uplink = 0;     // bytes/s of that uplink, one direction
  double pcie_latency = 0;           // seconds per transfer
  // GPUDirect Storage (`node.gds`, optional): NVMe <-> GPU peer to peer through the PCIe switch,
  // not through host memory. Bytes/s one direction per PCIe switch, shared by the switch's GPUs;
  // the drives' own bandwidth still bounds it. 0: no GDS path, NVMe traffic goes through the host.
  double gds_bandwidth = 0;
  bool has_gds() const { return gds_bandwidth > 0; }
  // One GPU's share of the GDS path when every GPU of its switch uses it.
  double gds_bandwidth_all_active() const;
  double nvlink_bandwidth = 0;       // bytes/s per GPU, one direction, into the NVLink/NVSwitch fabric
  double nvlink_latency = 0;
  int nics = 1;
  double nic_bandwidth = 0;          // bytes/s per NIC, one direction
  double nvme_latency = 0;
  // The drive serves one request at a time (a virtual disk, a single queue): a request's latency
  // occupies the drive, so concurrent reads and writes queue behind each other instead of
  // overlapping their latencies. Measured by profile-hw; false for NVMe with deep queues.
  bool nvme_serial_requests = false;
  // How many times longer a read or write request takes inside a training step than the store
  // alone gives it (latency + bytes / bandwidth, queued as above): the lane threads' wake-ups on
  // busy cores, the drive's own jitter. Measured by profile-hw on the CPU backend; default 1.
  double nvme_read_in_step = 1.0;
  double nvme_write_in_step = 1.0;

  // Host↔device bandwidth per GPU when every GPU of the node moves data at once.
  double pcie_bandwidth_all_active() const;
  double nic_bandwidth_total() const { return nics * nic_bandwidth; }
};

// The NCCL the profile's runs used (its `nccl:` section; core/nccl.hpp prices a call with it).
struct NcclSpec {
  std::string release;   // "2.7.8" | "2.8.3" | "2.18.3"; empty: no NCCL model (the simulator's per-hop latencies)
  int sm = 70;           // the GPUs' compute capability x 10 (NCCL's tree caps and ring plateau differ by it)
  bool ll128 = false;    // NCCL enables LL128 here (Volta/Ampere/Hopper with NVLink and the NIC on the GPU's switch)
  bool amd_cpu = false;  // 2.8.3 on: an AMD host (NCCL's LL cap across nodes and its network post overhead differ)
  bool enabled() const { return !release.empty(); }
};

// How the nodes' NICs are joined. `full`: a non-blocking crossbar, every NIC reaches every other
// at its own bandwidth. `fat-tree`: the NIC ports hang from the leaves of a multi-stage tree with
// static (destination-mod-k) routing, whose shared cables the transfers contend for
// (sim/fat_tree.hpp): XGFT(h; children; parents), children[i] ports down per switch of level i+1,
// parents[i] switches above each element of level i (parents[0] = 1: a NIC has one leaf).
struct FabricSpec {
  std::string topology = "full";       // full | fat-tree
  double latency = 0;                  // seconds, one hop end to end
  std::vector<int> tree_children;      // fat-tree: m_1..m_h
  std::vector<int> tree_parents;       // fat-tree: w_1..w_h
  double tree_link_bandwidth = 0;      // bytes/s of a switch-to-switch cable, one direction (0: a NIC's)
  // Where the job's nodes sit among the tree's ports: `packed` (node n's NIC c at port n x NICs + c)
  // or `scattered` (nodes at random free places of the tree, drawn from the simulation's seed, as
  // a scheduler hands out nodes of a busy cluster).
  std::string placement = "packed";
  bool is_tree() const { return topology == "fat-tree"; }
};

// Memory that the planner never hands out: allocator fragmentation, the CUDA context, the OS,
// page cache. Fractions of each tier.
struct Reserve {
  double gpu = 0.0;
  double host = 0.0;
  double nvme = 0.0;
};

// The machine a measured profile was taken on (its `measured_on:` section, written by profile-hw):
// a profile's rates describe that machine only. Empty for hand-written profiles of machines
// described from their data sheets.
struct MachineRecord {
  std::string cpu;                     // the CPU's model name
  std::vector<std::string> cpu_flags;  // the features zinf's paths depend on, sorted (see engine/machine_info)
  int cores = 0;                       // cores this process could run on
  double memory = 0;                   // bytes of RAM
  std::string disk;                    // the block device and file system under the NVMe directory
  std::string blas;                    // OpenBLAS's kernel set the rates were taken with (OPENBLAS_CORETYPE
                                       // can force one; GEMM rates follow it); empty when not recorded
  int blas_threads = 0;                // OpenBLAS threads per process the rates were taken with; 0: not recorded
  // Who chose blas_threads: "cores" (zinf's default: the cores this process could use, for one
  // rank), "OPENBLAS_NUM_THREADS" or "--threads" (a count every rank of a run takes); empty: not recorded.
  std::string blas_threads_from;
  // Seconds for a cache line to go between two cores and back at each phase of the profile, in the
  // order taken (round_trip_phases(); several BLAS threads and two cores only, empty otherwise). On
  // a machine whose cores share data at two costs a shared GEMM runs at two rates, and the profile
  // holds the one of its moments; `zinf validate` compares its run's own.
  std::vector<std::pair<std::string, double>> round_trips;
  bool empty() const { return cpu.empty(); }
};

// The phases of `zinf profile-hw` at which MachineRecord::round_trips are taken: before and after
// the kernels alone, before and after the training steps its in-step factors come from.
const std::vector<std::string>& round_trip_phases();

// How `here` differs from the machine a profile was measured on, one line per difference that
// changes what the profile predicts (CPU model, features, cores, memory beyond 5 %, disk, OpenBLAS
// kernels and threads where both record them); empty when they match.
std::vector<std::string> machine_differences(const MachineRecord& profiled, const MachineRecord& here);

struct HwProfile {
  std::string name;
  std::string description;
  MachineRecord measured_on;
  NodeSpec node;
  FabricSpec fabric;
  NcclSpec nccl;
  Reserve reserve;

  double gpu_budget() const { return node.gpu.memory * (1.0 - reserve.gpu); }
  double host_budget() const { return node.host_memory * (1.0 - reserve.host); }
  double nvme_budget() const { return node.nvme_capacity * (1.0 - reserve.nvme); }
};

}  // namespace zinf::core
