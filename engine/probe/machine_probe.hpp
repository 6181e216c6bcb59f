// Measurements of this machine through the engine's own code paths, for `zinf profile-hw`: GEMM,
// elementwise and attention kernels (engine/backend/cpu), the memory copy, the GPT backend's host-to-device
// copy, the NVMe store, CPU Adam, the Executor's cost per task, the cores' parallel throughput and
// other processes' load. Each figure is the median of several repetitions; latencies and
// bandwidths are least-squares fits of t = latency + bytes / bandwidth. What needs the simulator
// or other processes (in-step slowdowns, collectives under mpirun, rank skew) stays in
// measure/machine_profile.cpp. Not thread-safe: each call runs its own threads and owns the machine.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/hwprofile.hpp"

namespace zinf::engine::probe {

// The median of `v` (the mean of the middle two for an even count).
double median(std::vector<double> v);

// Median wall time of `fn` over `reps` runs after one warm-up run.
double time_median(int reps, const std::function<void()>& fn);

struct LinearFit {
  double latency = 0;    // seconds
  double bandwidth = 0;  // bytes/s
};

// Least squares of t = latency + bytes / bandwidth in relative terms (each point weighted by 1/t^2,
// so a small request's latency is not drowned by a large one's noise); a negative intercept (noise)
// is clamped to 0.
LinearFit fit(const std::vector<std::pair<double, double>>& points);

struct GemmPoint {
  int64_t dim;      // core::gemm_intensity_dim of the shape measured
  double forward;   // FLOP/s of the forward alone
  double backward;  // FLOP/s of the backward alone
};

// Linear layers (what a compute task of a linear runs) of x inputs and outputs over max(x, 512)
// tokens, keyed by their intensity dimension (the curves' argument, core::gemm_intensity_dim), forward
// and backward timed apart (a forward is one GEMM plus the bias, a backward two GEMMs plus the bias
// gradient; they reach different rates at the same shape).
std::vector<GemmPoint> measure_gemm(bool quick);

// Elementwise kernels as the Program counts them (models/gpt.cpp): bf16 activations (2 bytes) per
// element of each tensor read or written, although the CPU backend keeps them in fp32, and 8 / 10 / 1
// FLOPs per element for layernorm / GELU / residual. The residual add is pure memory traffic: its
// rate is the elementwise bandwidth. Layernorm and GELU are bound by arithmetic (GELU's tanh above
// all): the geometric mean of their FLOP rates is the vector rate. Tensors of 1 MiB: the size of the
// CPU backend's activations for the models it trains here, which stay in cache.
struct Elementwise {
  double bandwidth = 0;     // bytes/s, as counted
  double vector_flops = 0;  // FLOP/s, as counted
};
Elementwise measure_elementwise(bool quick);

// The attention core (what an attention task runs), forward and backward timed apart, per head
// size, against the FLOPs the graph counts for it: 4·T·S·h forward, twice that backward. Sequence
// 128, two sequences, four heads.
struct AttentionPoint {
  int64_t head;
  double forward, backward;  // FLOP/s
};

std::vector<AttentionPoint> measure_attention(bool quick);

// How many cores the GEMMs and the attention core keep busy at this process's OpenBLAS threads
// (core::GpuSpec::gemm_threads, attention_threads): each shape's time on one BLAS thread over its
// time in `gemm` and `attention` (measured at this process's count), clamped to [1, threads]; a
// linear's forward and backward together. Keyed as those points are. Empty when OpenBLAS runs one
// thread per process.
struct KernelThreads {
  std::vector<std::pair<double, double>> gemm, attention;
};
KernelThreads measure_kernel_threads(const std::vector<GemmPoint>& gemm, const std::vector<AttentionPoint>& attention,
                                     bool quick);
// The arithmetic of measure_kernel_threads: `many` measured on `threads` BLAS threads, `one` the
// same shapes on one thread.
KernelThreads kernel_threads_from(const std::vector<GemmPoint>& many_gemm, const std::vector<GemmPoint>& one_gemm,
                                  const std::vector<AttentionPoint>& many_attention,
                                  const std::vector<AttentionPoint>& one_attention, int threads);

// STREAM-style copy: bytes read plus bytes written per second, on memory touched beforehand, of
// 4 MiB buffers (the working-set size of the kernels above; the CPU "device" is its caches).
double measure_memory_bandwidth(bool);

// The GPT backend's host-to-device copy: a staged shard copied into a buffer of the device arena
// (both from the engine's reused huge-page cache, as in a training step).
LinearFit measure_copy(bool quick);

struct DiskFit {
  LinearFit read, write;
  double overlap = 0;  // small requests moved by a reader and a writer together over a reader alone
};

// The NVMe store with the default aio settings, as the GPT backend's tasks use it: page-aligned
// spans (shards and sub-groups start at aligned offsets, core::kShardAlignment) in staging buffers
// from the engine's huge-page cache; the file is written before it is read (recently written data
// reads at the speed an engine's own swap files see).
DiskFit measure_nvme(const std::string& dir_root, bool quick);

double measure_adam(bool quick);

// The Executor's own cost per task: a real Program (gpt-tiny, states on the host) run with a
// backend that does nothing, so the time is lane threads waking on their dependencies.
double measure_task_overhead(const core::HwProfile& hw);

// Whether a GEMM that several BLAS threads share runs at a steady rate here. The linear fwd+bwd of a
// GEMM of 512 tokens x `width` x `width` is run in windows of `window` seconds for `seconds` in all,
// alternating this process's BLAS threads with one thread: each pair gives the cores the shared
// GEMM kept busy in that moment (its rate over the one-thread rate of the window beside it), and the
// one-thread rates are the reference (a core's own speed in the same moments). Empty when OpenBLAS
// runs one thread per process. After each pair, on a machine of two cores or more, the round trip
// of a cache line between two threads (round_trip) says how cheaply the cores share data in that
// moment. On a virtual machine the shared rate was seen to move between two levels for seconds at a
// time while one thread's rate held, in step with that round trip (the virtual cores on physical
// cores that share a cache, or not). The round trip's two threads are placed by the scheduler, not on
// the BLAS threads' cores: it times the pair of cores they land on, on two cores the same pair. When
// a round trip cannot be timed (see cache_line_round_trip) round_trip is left empty for the whole
// measurement. Seconds, window and width must be positive.
struct BlasSteadiness {
  int threads = 1;
  int64_t width = 256;
  std::vector<double> cores_kept;  // per window pair: the shared rate over the one-thread rate
  std::vector<double> one_thread;  // per window pair: the one-thread rate, FLOP/s
  std::vector<double> round_trip;  // per window pair: seconds (empty on one core, or where it could not be timed)
};
// `more`'s window pairs after `into`'s; the round trips only where both have one beside every pair.
void append_steadiness(BlasSteadiness& into, const BlasSteadiness& more);
BlasSteadiness measure_blas_steadiness(double seconds, double window = 0.1, int64_t width = 256);

// Seconds for a cache line to go from this thread to another and back (each writes it in turn): the
// fastest of `batches` batches of `per_batch` round trips, the one the scheduler interrupted least (on
// a loaded machine a round trip can wait for the other thread's time slice). Needs two cores: on
// one, every round trip would. No batch starts after `deadline` seconds, and one still waiting for
// its round trips then is given up; nothing when no batch finished (the other thread never ran).
std::optional<double> cache_line_round_trip(int batches = 21, int per_batch = 200, double deadline = 1.0);

// The shared GEMM's cores split by the round trip beside them, when the round trip moved by more
// than 1.5x (p90 over p10) over the windows: the median cores of the windows below the geometric
// mean of p10 and p90 (near) and of those above (far), with the median round trip of each. Nothing
// unless each side has at least two window pairs.
struct CoresByRoundTrip {
  double near_cores = 0, far_cores = 0;
  double near_round_trip = 0, far_round_trip = 0;
};
std::optional<CoresByRoundTrip> cores_by_round_trip(const BlasSteadiness& s);

// The 10th and 90th percentiles of `v` (nearest rank) and its median (the mean of the middle two
// for an even count); zeros when empty.
struct Spread {
  double p10 = 0, median = 0, p90 = 0;
  // p90 over p10 (1 when empty): how far the figure moved over the windows.
  double ratio() const { return p10 > 0 ? p90 / p10 : 1.0; }
};
Spread spread(std::vector<double> v);

// What profile-hw says of a steadiness measurement: a warning when the shared GEMM's cores moved by
// more than 15 % (p90 over p10) over the windows, naming whether one thread's rate held meanwhile
// and, where the round trip split them, the cores at each round trip: as the explanation only where
// those differ by more than 15 % too, as a fact that explains nothing otherwise (empty when the cores
// held, and on one BLAS thread); the note written beside node.gpu.gemm_threads ("; over
// time ..."; empty on one BLAS thread).
std::string steadiness_warning(const BlasSteadiness& s);
std::string steadiness_note(const BlasSteadiness& s);

// A cache line's round trip between two cores (cache_line_round_trip) taken at a named moment of a
// longer measurement: profile-hw takes one before and after the kernels alone and before and after
// the training steps its in-step factors come from (core::round_trip_phases()), zinf validate one
// before and after its run.
struct PhaseRoundTrip {
  std::string phase;
  double seconds = 0;
};
// "before_kernels 110 ns, ..." in the order taken.
std::string phase_round_trips(const std::vector<PhaseRoundTrip>& trips);
// A warning when the longest round trip is over 2x the shortest: the figures of those phases were
// measured in two states of a machine whose cores share data at two costs, and a ratio between them
// (an in-step factor: a kernel in a step over the same kernel alone) compares the states, not the
// step with the kernel. Empty otherwise, with fewer than two, and on one BLAS thread (`blas_threads`),
// where nothing measured shares data between cores.
std::string phase_round_trip_warning(const std::vector<PhaseRoundTrip>& trips, int blas_threads);
// What `zinf validate` says when its run and the profile saw the cores share data at different costs
// (the longest of all their round trips over 2x the shortest), naming where the state changed:
// within the profile, within the run, or between the two; the error includes that change. Empty
// otherwise, when either side took none, and on one BLAS thread.
std::string run_state_note(const std::vector<PhaseRoundTrip>& profile, const std::vector<PhaseRoundTrip>& run, int blas_threads);

// How many one-thread rates `cores` threads deliver together, each running the linear fwd+bwd of
// a mid-sized GEMM (512 x 256 x 256) on buffers of its own: the sum of their rates over the rate of the
// same loop run alone just before. `cores` on a machine whose cores are independent; less when
// virtual cores share a physical one (SMT) or the host throttles. OpenBLAS runs one thread per caller
// meanwhile, whatever this process's count: the figure is one thread's rate, as the core pool counts it.
double measure_parallel_throughput(unsigned cores, bool quick);

// Runnable threads of other processes on this machine's cores: `cores` threads spin for a while
// and each reads its own CPU time; with b other threads competing, each gets cores / (cores + b)
// of a core (the scheduler is fair per thread), so b = cores / share - cores. Zero on an idle
// machine. The simulator puts that load beside the ranks' threads on the shared core pool.
double measure_background_threads(unsigned cores, double seconds);

}  // namespace zinf::engine::probe
