// `zinf profile-hw`: measures this machine through the engine's own code paths and writes a
// hwprofile the simulator reads. What the CPU backend calls the "device" is an arena in host
// memory, so the figures are those of the engine's parts as they run here: GEMM and elementwise
// kernels (engine/cpu), the host<->device copy as the GPT backend does it (a fresh buffer filled by
// a copy), the NVMe store (io_uring, O_DIRECT, the run config's block size and queue depth), CPU
// Adam, MPI collectives between two local ranks (mpirun on this binary), and the Executor's cost
// per task (lane threads waking on dependencies). Each figure is the median of several repetitions;
// latencies and bandwidths are least-squares fits of t = latency + bytes / bandwidth.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/statvfs.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "core/validation.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/cpu/kernels.hpp"
#include "engine/exec/executor.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/machine_info.hpp"
#include "engine/memory/device_arena.hpp"
#include "engine/memory/staging_cache.hpp"
#include "engine/optim/cpu_adam.hpp"
#include "engine/train/trainer.hpp"
#include "sim/calibration.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "models/gpt.hpp"

namespace zinf::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ProfileArgs {
  std::string out = "hwprofiles/local.yaml";
  std::string nvme_dir = ".";
  std::string name = "local";
  std::string device_memory = "2 GiB";
  bool quick = false;
  bool no_mpi = false;
  int calibration_steps = 30;  // measured steps per calibration run (after 3 warm-up steps); --quick: 3
  std::string comm_worker;  // internal: run as one rank of the collective measurement
  std::string check;        // --check: compare this profile's measured_on with this machine, measure nothing
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median wall time of `fn` over `reps` runs after one warm-up run.
double time_median(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

struct LinearFit {
  double latency = 0;    // seconds
  double bandwidth = 0;  // bytes/s
};

// Least squares of t = latency + bytes / bandwidth in relative terms (each point weighted by 1/t^2,
// so a small request's latency is not drowned by a large one's noise); a negative intercept (noise)
// is clamped to 0.
LinearFit fit(const std::vector<std::pair<double, double>>& points) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : points) {
    const double w = 1.0 / (y * y);
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  const double icept = (sy - slope * sx) / sw;
  LinearFit f;
  f.bandwidth = slope > 0 ? 1.0 / slope : points.back().first / points.back().second;
  f.latency = std::max(0.0, icept);
  return f;
}

std::vector<float> touched(size_t n, float value = 0.5f) { return std::vector<float>(n, value); }

// ---- the measurements ---------------------------------------------------------------------------

struct GemmPoint {
  int64_t dim;      // core::gemm_intensity_dim of the shape measured
  double forward;   // FLOP/s of the forward alone
  double backward;  // FLOP/s of the backward alone
};

// Linear layers (what a compute task of a linear runs) of x inputs and outputs over max(x, 512)
// tokens, keyed by their intensity dimension (the curves' argument, core::gemm_intensity_dim), forward
// and backward timed apart (a forward is one GEMM plus the bias, a backward two GEMMs plus the bias
// gradient; they reach different rates at the same shape).
std::vector<GemmPoint> measure_gemm(bool quick) {
  std::vector<int64_t> dims = {8, 16, 32, 64, 128, 256, 512, 1024};
  if (quick) dims = {16, 64, 256};
  std::vector<GemmPoint> out;
  for (int64_t x : dims) {
    const int64_t T = std::max<int64_t>(x, 512), in = x, outd = x;
    auto X = touched(size_t(T * in)), W = touched(size_t(outd * in)), B = touched(size_t(outd));
    auto Y = touched(size_t(T * outd)), dY = touched(size_t(T * outd)), dX = touched(size_t(T * in));
    auto dW = touched(size_t(outd * in)), dB = touched(size_t(outd));
    const double flops = 2.0 * double(T) * double(in) * double(outd);
    const int reps = std::clamp(int(3e8 / flops), 5, quick ? 5 : 60);
    const double fwd = time_median(reps, [&] {
      engine::cpu::linear_forward(Y.data(), X.data(), W.data(), B.data(), T, in, outd);
    });
    const double bwd = time_median(reps, [&] {
      engine::cpu::linear_backward(dX.data(), dW.data(), dB.data(), dY.data(), X.data(), W.data(), T, in, outd);
    });
    out.push_back({std::lround(core::gemm_intensity_dim(double(T), double(outd), double(in))), flops / fwd, 2.0 * flops / bwd});
  }
  return out;
}

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
Elementwise measure_elementwise(bool quick) {
  const int64_t T = 512, C = quick ? 256 : 512, n = T * C;
  auto x = touched(size_t(n)), y = touched(size_t(n)), z = touched(size_t(n));
  auto g = touched(size_t(C), 1.0f), b = touched(size_t(C), 0.0f), mean = touched(size_t(T)), rstd = touched(size_t(T));
  const double ln = time_median(21, [&] {
    engine::cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), T, C);
  });
  const double gelu = time_median(21, [&] { engine::cpu::gelu_forward(y.data(), x.data(), n); });
  const double res = time_median(21, [&] { engine::cpu::residual_forward(z.data(), x.data(), y.data(), n); });
  Elementwise e;
  e.bandwidth = 2.0 * 3 * double(n) / res;
  e.vector_flops = std::sqrt(8.0 * double(n) / ln * 10.0 * double(n) / gelu);
  return e;
}

// The attention core (what an attention task runs), forward and backward timed apart, per head
// size, against the FLOPs the graph counts for it: 4·T·S·h forward, twice that backward. Sequence
// 128, two sequences, four heads.
struct AttentionPoint {
  int64_t head;
  double forward, backward;  // FLOP/s
};
std::vector<AttentionPoint> measure_attention(bool quick) {
  std::vector<AttentionPoint> out;
  for (int64_t hd : quick ? std::vector<int64_t>{32, 64} : std::vector<int64_t>{16, 32, 64, 128}) {
    const int64_t B = 2, S = 128, NH = 4, C = hd * NH, T = B * S;
    auto qkv = touched(size_t(T * 3 * C)), o = touched(size_t(T * C)), dout = touched(size_t(T * C));
    auto att = touched(size_t(B * NH * S * S)), dqkv = touched(size_t(T * 3 * C));
    const int reps = quick ? 5 : 15;
    const double fwd = time_median(reps, [&] { engine::cpu::attention_forward(o.data(), att.data(), qkv.data(), B, S, C, NH); });
    const double bwd = time_median(reps, [&] {
      engine::cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, S, C, NH);
    });
    const double flops = 4.0 * double(T) * double(S) * double(C);
    out.push_back({hd, flops / fwd, 2.0 * flops / bwd});
  }
  return out;
}

// STREAM-style copy: bytes read plus bytes written per second, on memory touched beforehand, of
// 4 MiB buffers (the working-set size of the kernels above; the CPU "device" is its caches).
double measure_memory_bandwidth(bool) {
  const size_t n = 1u << 20;  // floats
  auto a = touched(n), b = touched(n);
  const double t = time_median(41, [&] { std::memcpy(b.data(), a.data(), n * sizeof(float)); });
  return 2.0 * double(n * sizeof(float)) / t;
}

// The GPT backend's host-to-device copy: a staged shard copied into a buffer of the device arena
// (both from the engine's reused huge-page cache, as in a training step).
LinearFit measure_copy(bool quick) {
  engine::DeviceArena arena(1e12);
  engine::Staging<uint16_t> src(size_t(8) << 20, 1);
  std::vector<std::pair<double, double>> pts;
  for (size_t bytes : {size_t(16) << 10, size_t(256) << 10, size_t(4) << 20, size_t(quick ? 4 : 16) << 20}) {
    const size_t n = std::min(bytes / 2, src.size());
    const double t = time_median(7, [&] {
      engine::DeviceVector<uint16_t> dst(n, engine::DeviceAllocator<uint16_t>(&arena));
      std::copy_n(src.data(), n, dst.data());
      if (dst.empty()) std::abort();
    });
    pts.push_back({double(n * 2), t});
  }
  return fit(pts);
}

struct DiskFit {
  LinearFit read, write;
  double overlap = 0;  // small requests moved by a reader and a writer together over a reader alone
};

// The NVMe store with the default aio settings, as the GPT backend's tasks use it: page-aligned
// spans (shards and sub-groups start at aligned offsets, core::kShardAlignment) in staging buffers
// from the engine's huge-page cache; the file is written before it is read (recently written data
// reads at the speed an engine's own swap files see).
DiskFit measure_nvme(const std::string& dir_root, bool quick) {
  const fs::path dir = fs::path(dir_root) / fmt::format("zinf-profile-{}", ::getpid());
  engine::NvmeStoreOptions o;
  o.dir = dir.string();
  DiskFit f;
  {
    engine::NvmeStore store(o);
    const uint64_t file = uint64_t(quick ? 32 : 128) << 20;
    auto id = store.create("bench", file);
    engine::Staging<char> buf(file, 7);
    store.write(id, 0, buf.data(), file).wait_or_throw();
    std::vector<std::pair<double, double>> rd, wr;
    // From one page (a small model's shard) to half the file: the fit's latency comes from the small ones.
    for (uint64_t bytes : {uint64_t(4) << 10, uint64_t(16) << 10, uint64_t(64) << 10, uint64_t(1) << 20, uint64_t(8) << 20, file / 2}) {
      const int reps = bytes >= (uint64_t(16) << 20) ? 3 : 7;
      uint64_t off = 0;
      auto next = [&] {
        const uint64_t at = off;
        off = off + 2 * bytes + 4096 > file ? 0 : off + bytes + 4096;
        return at;
      };
      wr.push_back({double(bytes), time_median(reps, [&] { store.write(id, next(), buf.data(), bytes).wait_or_throw(); })});
      rd.push_back({double(bytes), time_median(reps, [&] { store.read(id, next(), buf.data(), bytes).wait_or_throw(); })});
    }
    f.read = fit(rd);
    f.write = fit(wr);
    // Do a read and a write in flight together overlap their latencies (a drive with deep queues)
    // or queue behind each other (a single-queue virtual disk)? 16 KiB requests, latency-bound: a
    // reader alone, then a reader and a writer on the two halves of the file.
    const uint64_t req = uint64_t(16) << 10;
    const double window = quick ? 0.1 : 0.3;
    auto stream = [&](bool write, uint64_t base) {
      uint64_t n = 0;
      const auto t0 = Clock::now();
      while (seconds_since(t0) < window) {
        const uint64_t at = base + (n * req) % (file / 2 - req);
        (write ? store.write(id, at, buf.data() + base, req) : store.read(id, at, buf.data() + base, req)).wait_or_throw();
        ++n;
      }
      return double(n) / seconds_since(t0);
    };
    const double alone = stream(false, 0);
    double reads = 0, writes = 0;
    std::thread writer([&] { writes = stream(true, file / 2); });
    reads = stream(false, 0);
    writer.join();
    f.overlap = (reads + writes) / alone;
    store.remove(id);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return f;
}

double measure_adam(bool quick) {
  const size_t n = quick ? (1u << 20) : (4u << 20);
  auto master = touched(n), m = touched(n, 0.0f), v = touched(n, 0.0f);
  std::vector<engine::bf16> g(n, engine::to_bf16(0.01f)), p(n);
  engine::CpuAdam adam(engine::AdamOptions{}, 1);
  int64_t step = 0;
  const double t = time_median(5, [&] { adam.step(++step, n, master.data(), m.data(), v.data(), g.data(), p.data()); });
  return double(n) / t;
}

// The Executor's own cost per task: a real Program (gpt-tiny, states on the host) run with a
// backend that does nothing, so the time is lane threads waking on their dependencies.
double measure_task_overhead(const core::HwProfile& hw) {
  struct Noop : engine::TaskBackend {
    void run(const core::Task&) override {}
  } noop;
  auto spec = models::find_model("gpt-tiny", source_dir());
  auto graph = models::build_gpt(spec);
  core::RunConfig cfg;
  cfg.params = {false, core::Tier::Host};
  cfg.optimizer = {false, core::Tier::Host};
  auto planned = core::make_plan(graph, hw, cfg, 1);
  engine::Executor ex(planned.program, 0, noop);
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const auto tl = ex.run_step();
    t.push_back(tl.makespan());
  }
  size_t active = 0;
  for (const auto& task : planned.program.tasks())
    if (task.kind != core::TaskKind::Alloc && task.kind != core::TaskKind::Free) ++active;
  return median(t) / double(std::max<size_t>(1, active));
}

// How many one-thread rates `cores` threads deliver together, each running the linear fwd+bwd of
// a mid-sized GEMM (512 x 256 x 256) on buffers of its own: the sum of their rates over the rate of the
// same loop run alone just before. `cores` on a machine whose cores are independent; less when
// virtual cores share a physical one (SMT) or the host throttles. OpenBLAS must run one thread per
// caller (OPENBLAS_NUM_THREADS=1) for this to mean anything.
double measure_parallel_throughput(unsigned cores, bool quick) {
  const int64_t T = 512, x = 256;
  const double flops = 6.0 * double(T) * double(x) * double(x);
  auto rate_of = [&](double seconds) {
    auto X = touched(size_t(T * x)), W = touched(size_t(x * x)), B = touched(size_t(x));
    auto Y = touched(size_t(T * x)), dY = touched(size_t(T * x)), dX = touched(size_t(T * x));
    auto dW = touched(size_t(x * x)), dB = touched(size_t(x));
    const auto t0 = Clock::now();
    int64_t n = 0;
    while (seconds_since(t0) < seconds) {
      engine::cpu::linear_forward(Y.data(), X.data(), W.data(), B.data(), T, x, x);
      engine::cpu::linear_backward(dX.data(), dW.data(), dB.data(), dY.data(), X.data(), W.data(), T, x, x);
      ++n;
    }
    return double(n) * flops / seconds_since(t0);
  };
  const double seconds = quick ? 0.1 : 0.4;
  const double alone = rate_of(seconds);
  std::vector<double> rates(cores, 0.0);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < cores; ++i) threads.emplace_back([&rates, &rate_of, i, seconds] { rates[i] = rate_of(seconds); });
  for (auto& t : threads) t.join();
  const double together = std::accumulate(rates.begin(), rates.end(), 0.0);
  return std::clamp(together / alone, 1.0, double(cores));
}

// What a Trainer's steps show, over `steps` steps after `warmup` ones: each task's durations on
// the chosen lanes (by task id), and per step the mean dispatch delay of its tasks: from the
// moment a task could start (its dependencies and the task before it on its lane ended) to its
// start. Alone, that delay is the Executor's hand-off; in a step it includes waiting for a core.
struct StepTasks {
  std::vector<std::vector<double>> durations;
  std::vector<double> dispatch;  // seconds, mean per task, one per step
};
StepTasks step_tasks(engine::Trainer& trainer, int warmup, int steps, const std::vector<core::Lane>& lanes) {
  const core::Program& program = trainer.program();
  StepTasks r;
  r.durations.resize(program.tasks().size());
  for (int i = 0; i < warmup + steps; ++i) {
    auto st = trainer.step();
    if (i < warmup) continue;
    std::vector<double> end(program.tasks().size(), -1.0);
    for (const auto& e : st.timeline.events) {
      end[size_t(e.task)] = e.end;
      if (std::find(lanes.begin(), lanes.end(), e.lane) != lanes.end()) r.durations[size_t(e.task)].push_back(e.end - e.start);
    }
    auto events = st.timeline.events;
    std::sort(events.begin(), events.end(), [](const auto& x, const auto& y) { return x.start < y.start; });
    std::array<double, core::kLaneCount> lane_free{};
    double delay = 0;
    for (const auto& e : events) {
      double ready = lane_free[size_t(e.lane)];
      for (int32_t d : program.deps(program.task(e.task))) ready = std::max(ready, end[size_t(d)]);
      delay += std::max(0.0, e.start - ready);
      lane_free[size_t(e.lane)] = e.end;
    }
    if (!events.empty()) r.dispatch.push_back(delay / double(events.size()));
  }
  return r;
}

core::ModelSpec profile_small_model() {
  return core::ModelSpec{.name = "profile-small", .layers = 3, .hidden = 96, .heads = 3, .seq = 96, .vocab = 256, .micro_batch = 2};
}

// A calibration run: `model` trained on this machine with `config` (zinf YAML) for `warmup` and
// then `steps` steps; its Program and what those steps show on `lanes`.
struct Calibration {
  core::Program program;
  StepTasks seen;
};
Calibration calibrate(const core::ModelSpec& model, const std::string& config, const core::HwProfile& hw,
                      const std::string& nvme_dir, int warmup, int steps, const std::vector<core::Lane>& lanes) {
  engine::TrainerOptions o;
  o.model = model;
  o.hw = hw;
  o.nvme_dir = nvme_dir;
  o.config = core::parse_run_config(config, "profile-hw");
  engine::LocalCollectives comm;
  engine::Trainer trainer(o, comm);
  Calibration c;
  c.program = trainer.program();
  c.seen = step_tasks(trainer, warmup, steps, lanes);
  return c;
}

// Kernels as they run inside a training step, against the same kernels alone (the curves above):
// two models trained with every state on the device, so their steps are compute-bound, through
// the GPT backend: gpt-overlap (hidden 384, large GEMMs) and a small GPT built here (hidden 96,
// short tasks); neither is a model the validation suite trains. For each kind of kernel
// (core::in_step_key: an op kind and direction, or the optimizer) the slowdown is the sum of its
// tasks' median durations over the measured steps divided by the sum of their times alone. It
// takes in what a kernel pays for sharing the caches with the rest of the step and the backend's
// own work per task (bookkeeping, arena and staging allocations); the Executor's hand-off between
// tasks is the no-op run's figure.
struct InStep {
  std::map<std::string, double> slowdown;
  std::map<std::string, size_t> tasks;  // tasks behind each figure
};

InStep measure_in_step(const core::HwProfile& hw, int steps) {
  core::HwProfile alone = hw;
  alone.node.gpu.kernel_launch = 0;
  alone.node.gpu.in_step_slowdown.clear();
  std::map<std::string, std::pair<double, double>> sums;  // key -> (measured, alone)
  InStep r;
  for (const auto& model : {models::find_model("gpt-overlap", source_dir()), profile_small_model()}) {
    const auto run = calibrate(model, "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n", hw, "", 3,
                               steps, {core::Lane::Compute});
    const core::Program& program = run.program;
    const auto& durations = run.seen.durations;
    for (const auto& t : program.tasks()) {
      if (durations[size_t(t.id)].empty()) continue;
      if (!core::is_compute(t.kind) && t.kind != core::TaskKind::OptimizerStep) continue;
      const std::string key = core::in_step_key(program, t);
      sums[key].first += median(durations[size_t(t.id)]);
      sums[key].second += core::task_kernel_seconds(alone.node.gpu, program, t);
      ++r.tasks[key];
    }
  }
  for (const auto& [key, s] : sums)
    if (s.second > 0) r.slowdown[key] = std::clamp(s.first / s.second, 0.1, 20.0);
  return r;
}

// NVMe requests and the Executor's hand-off as they run inside a training step: the small GPT
// above with its parameters and optimizer on NVMe, 3 + 30 steps (the per-step figures scatter by 2x).
// - The hand-off: the mean dispatch delay of its tasks (StepTasks), median over the steps. Alone
//   (the no-op backend) it is a few microseconds; in a step the woken lane thread often waits for
//   one of the cores the compute thread and the other lanes keep busy.
// - The requests: per direction, the sum of their median durations over the sum of those the
//   simulator gives the same Program on `hw` with that hand-off (latency + bytes / bandwidth,
//   queued behind the other lane's requests when the drive serves one at a time). A virtual disk
//   has its own jitter, which the store alone does not show.
struct NvmeInStep {
  double read = 1, write = 1;
  double dispatch = 0;  // seconds per task
};
NvmeInStep measure_nvme_in_step(core::HwProfile hw, double disk_latency, double copy_latency, const std::string& nvme_root,
                                int steps) {
  const fs::path dir = fs::path(nvme_root) / fmt::format("zinf-profile-step-{}", ::getpid());
  fs::create_directories(dir);
  const auto [program, seen] =
      calibrate(profile_small_model(),
                "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: device}\n", hw,
                dir.string(), 3, steps, {core::Lane::NvmeRead, core::Lane::NvmeWrite});
  std::error_code ec;
  fs::remove_all(dir, ec);
  NvmeInStep r;
  r.dispatch = seen.dispatch.empty() ? hw.node.gpu.kernel_launch : median(seen.dispatch);
  hw.node.gpu.kernel_launch = r.dispatch;
  hw.node.nvme_latency = disk_latency + r.dispatch;
  hw.node.pcie_latency = copy_latency + r.dispatch;
  const auto predicted = nlohmann::json::parse(sim::run_isolated([&] {
    const auto report = sim::simulate(program, hw, sim::SimOptions{});
    nlohmann::json j = nlohmann::json::object();
    for (const auto& e : report.timeline.events)
      if (e.rank == 0 && (e.lane == core::Lane::NvmeRead || e.lane == core::Lane::NvmeWrite))
        j[std::to_string(e.task)] = e.end - e.start;
    return j.dump();
  }));
  double measured[2] = {0, 0}, simulated[2] = {0, 0};  // read, write
  for (const auto& t : program.tasks()) {
    const auto key = std::to_string(t.id);
    if (seen.durations[size_t(t.id)].empty() || !predicted.contains(key)) continue;
    const int w = t.kind == core::TaskKind::NvmeWrite ? 1 : 0;
    measured[w] += median(seen.durations[size_t(t.id)]);
    simulated[w] += predicted[key].get<double>();
  }
  auto ratio = [](double m, double p) { return p > 0 && m > 0 ? std::clamp(m / p, 0.1, 20.0) : 1.0; };
  r.read = ratio(measured[0], simulated[0]);
  r.write = ratio(measured[1], simulated[1]);
  return r;
}

// Runnable threads of other processes on this machine's cores: `cores` threads spin for a while
// and each reads its own CPU time; with b other threads competing, each gets cores / (cores + b)
// of a core (the scheduler is fair per thread), so b = cores / share - cores. Zero on an idle
// machine. The simulator puts that load beside the ranks' threads on the shared core pool.
double measure_background_threads(unsigned cores, double seconds) {
  std::vector<double> share(cores, 1.0);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < cores; ++i)
    threads.emplace_back([&share, i, seconds] {
      timespec c0{}, c1{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      const auto t0 = Clock::now();
      volatile uint64_t spin = 0;
      while (seconds_since(t0) < seconds)
        for (int k = 0; k < 1000; ++k) spin = spin + 1;
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      const double cpu = double(c1.tv_sec - c0.tv_sec) + 1e-9 * double(c1.tv_nsec - c0.tv_nsec);
      share[i] = std::clamp(cpu / seconds_since(t0), 1e-3, 1.0);
    });
  for (auto& t : threads) t.join();
  return std::max(0.0, double(cores) / median(share) - double(cores));
}

// One rank of the collective measurement (under mpirun): all-gathers of small and large buffers.
void comm_worker(const std::string& out_path) {
  auto comm = engine::make_collectives();
  const int p = comm->size();
  std::vector<std::pair<double, double>> pts;
  for (size_t shard : {size_t(4) << 10, size_t(256) << 10, size_t(2) << 20, size_t(8) << 20}) {
    std::vector<char> mine(shard, 1), full(shard * size_t(p));
    comm->barrier("profile");
    const double t = time_median(9, [&] { comm->all_gather(mine.data(), shard, full.data(), "profile"); });
    pts.push_back({double(shard) * (p - 1), t});  // ring: (p-1)/p of the gathered bytes cross each link
  }
  std::vector<double> tt;
  for (auto& pt : pts) tt.push_back(pt.second);
  comm->all_reduce(tt.data(), tt.size(), "profile");
  for (size_t i = 0; i < pts.size(); ++i) pts[i].second = tt[i] / p;
  if (comm->rank() == 0) {
    auto f = fit(pts);
    std::ofstream(out_path) << f.latency / (p - 1) << " " << f.bandwidth << "\n";
  }
}

std::optional<LinearFit> measure_collectives() {
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return std::nullopt;
  self[len] = 0;
  const std::string out = fmt::format("/tmp/zinf-profile-comm-{}.txt", ::getpid());
  const std::string cmd = fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 '{}' profile-hw "
      "--comm-worker '{}' >/dev/null 2>&1",
      self, out);
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  LinearFit f;
  if (rc != 0 || !(in >> f.latency >> f.bandwidth)) return std::nullopt;
  std::remove(out.c_str());
  return f;
}

// How far ranks sharing these cores drift apart: two GPTs with parameters and optimizer in host
// memory (the small one above, and one of hidden 192 with about three times its compute per
// collective), each trained by `zinf validate` on 1 rank and under mpirun on 2 and 4 ranks for
// 3 + `steps` steps, and simulated on `profile_yaml` (this profile without the drift). For N ranks,
// rank_skew (seconds a collective waits per second of compute since the previous one) is the value
// at which the two models' simulated steps match their measured medians (sim::fit_rank_skew), each
// measured step first scaled by the same model's simulated over measured step on one rank, so that
// the skew carries only what N ranks add to one. Fitting steps rather than the comm lane's busy
// time takes in what the waiting costs the other lanes: a rank that polls in a collective holds a
// core the others need.
core::ModelSpec profile_medium_model() {
  return core::ModelSpec{.name = "profile-medium", .layers = 2, .hidden = 192, .heads = 4, .seq = 128, .vocab = 256, .micro_batch = 2};
}

std::vector<sim::RankSkewFit> measure_rank_skew(const std::string& profile_yaml, const std::string& scratch_root, bool quick,
                                                  int steps) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("zinf-profile-skew-{}", ::getpid());
  const fs::path scratch = fs::path(scratch_root) / fmt::format("zinf-profile-skew-{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "profile.yaml") << profile_yaml;
  const std::string config = "zero_stage: 3\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: host}\n";
  std::ofstream(dir / "config.yaml") << config;
  std::vector<sim::RankSkewFit> fits;
  char self[4096];
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return fits;
  self[len] = 0;
  const std::vector<int> rank_counts = quick ? std::vector<int>{2} : std::vector<int>{2, 4};
  const std::vector<core::ModelSpec> specs =
      quick ? std::vector<core::ModelSpec>{profile_small_model()} : std::vector<core::ModelSpec>{profile_small_model(), profile_medium_model()};
  std::vector<core::ModelGraph> graphs;
  for (const auto& m : specs) graphs.push_back(models::build_gpt(m));
  // measured[model][rank count], each scaled by the model's one-rank simulated / measured step.
  std::vector<std::vector<double>> measured(specs.size());
  bool ok = true;
  for (size_t mi = 0; mi < specs.size() && ok; ++mi) {
    const auto& m = specs[mi];
    const fs::path model = dir / (m.name + ".yaml");
    std::ofstream(model) << fmt::format("name: {}\nlayers: {}\nhidden: {}\nheads: {}\nseq: {}\nvocab: {}\nmicro_batch: {}\n", m.name,
                                        m.layers, m.hidden, m.heads, m.seq, m.vocab, m.micro_batch);
    double one_rank_ratio = 0;  // simulated over measured step on one rank
    std::vector<int> runs{1};
    runs.insert(runs.end(), rank_counts.begin(), rank_counts.end());
    for (int ranks : runs) {
      const fs::path out = dir / fmt::format("{}-ranks{}", m.name, ranks);
      const std::string cmd = fmt::format(
          "'{}' validate --model '{}' --hw '{}' --config '{}' --ranks {} --steps {} --warmup 3 --out-dir '{}' --nvme-dir '{}' "
          "--json > '{}.log' 2>&1 < /dev/null",
          self, model.string(), (dir / "profile.yaml").string(), (dir / "config.yaml").string(), ranks, 3 + steps, out.string(),
          scratch.string(), out.string());
      ok = std::system(cmd.c_str()) == 0;
      std::ifstream in(out / "validate.json");
      double meas = 0, pred = 0;
      if (ok && in) {
        const auto j = nlohmann::json::parse(in);
        meas = j["measured"]["median"], pred = j["predicted"];
      }
      if (!(ok = meas > 0 && pred > 0)) {
        fmt::print(stderr, "profile-hw: rank skew not measured: `zinf validate` of {} on {} rank(s) failed; its log is {}.log\n",
                   m.name, ranks, out.string());
        break;
      }
      if (ranks == 1) one_rank_ratio = pred / meas;
      else measured[mi].push_back(meas * one_rank_ratio);
    }
  }
  if (ok) {
    // What `zinf validate` simulates: the profile as written (rounded as it is in the file).
    const auto hw = core::load_hwprofile((dir / "profile.yaml").string());
    const auto run_config = core::parse_run_config(config, "profile-hw");
    for (size_t ri = 0; ri < rank_counts.size(); ++ri) {
      std::vector<sim::SkewCase> cases;
      for (size_t mi = 0; mi < specs.size(); ++mi) cases.push_back({&graphs[mi], run_config, measured[mi][ri]});
      fits.push_back(sim::fit_rank_skew(hw, cases, rank_counts[ri]));
    }
  }
  std::error_code ec;
  if (ok) fs::remove_all(dir, ec);  // kept on failure, for its logs
  fs::remove_all(scratch, ec);
  return fits;
}

// ---- the profile --------------------------------------------------------------------------------

std::string num(double v) { return fmt::format("{:.4g}", v); }

void run_profile(const ProfileArgs& a) {
  if (!a.comm_worker.empty()) return comm_worker(a.comm_worker);
  const auto t_start = Clock::now();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double host_memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  struct statvfs sv {};
  double nvme_capacity = 0;
  if (::statvfs(a.nvme_dir.c_str(), &sv) == 0) nvme_capacity = double(sv.f_blocks) * double(sv.f_frsize);
  const auto device_memory = core::parse_quantity(a.device_memory, core::UnitKind::Bytes);
  if (!device_memory) throw CLI::ValidationError("--device-memory", "expected a size such as '2 GiB'");
  const char* blas_threads = std::getenv("OPENBLAS_NUM_THREADS");

  fmt::print("zinf profile-hw: {} core(s), {} of memory; OPENBLAS_NUM_THREADS={}\n", cores, core::format_bytes(host_memory),
             blas_threads ? blas_threads : "(unset)");
  std::fflush(stdout);
  const double load_before = measure_background_threads(cores, a.quick ? 0.05 : 0.25);
  // The cores' parallel throughput is read three times, seconds apart (here, after the disk, and
  // after the calibration runs), and the best reading kept: on this shared host a window in which
  // something else ran gave 1.02 once, and 1.24 as the median of three back-to-back readings,
  // among readings of 1.83..2.00. What other processes take is background_threads' to model.
  std::vector<double> throughput_readings{measure_parallel_throughput(cores, a.quick)};
  auto gemm = measure_gemm(a.quick);
  double peak = 0;
  for (const auto& g : gemm) peak = std::max({peak, g.forward, g.backward});
  fmt::print("  GEMM (linear fwd, bwd) peak {}  at intensity dim {}..{}\n", core::format_flops(peak), gemm.front().dim,
             gemm.back().dim);
  const double membw = measure_memory_bandwidth(a.quick);
  const auto elementwise = measure_elementwise(a.quick);
  const double elem = elementwise.bandwidth;
  fmt::print("  memory copy            {}   elementwise kernels {} ({:.2f} of it), {} of arithmetic\n",
             core::format_bandwidth(membw), core::format_bandwidth(elem), elem / membw,
             core::format_flops(elementwise.vector_flops));
  const auto attention = measure_attention(a.quick);
  fmt::print("  attention core         {:.2f} / {:.2f} of the GEMM peak forward / backward at head size {}\n",
             attention.back().forward / peak, attention.back().backward / peak, attention.back().head);
  const auto copy = measure_copy(a.quick);
  fmt::print("  host->device copy      {} + {} per copy\n", core::format_bandwidth(copy.bandwidth), core::format_seconds(copy.latency));
  std::fflush(stdout);
  const auto disk = measure_nvme(a.nvme_dir, a.quick);
  fmt::print("  NVMe store read        {} + {} per request\n", core::format_bandwidth(disk.read.bandwidth),
             core::format_seconds(disk.read.latency));
  fmt::print("  NVMe store write       {} + {} per request\n", core::format_bandwidth(disk.write.bandwidth),
             core::format_seconds(disk.write.latency));
  // Below 1.5 the second stream mostly waited: requests are served one at a time.
  const bool serial_requests = disk.overlap < 1.5;
  fmt::print("  NVMe, read + write     {:.2f} x one stream's requests per second: {}\n", disk.overlap,
             serial_requests ? "served one at a time" : "served in parallel");
  throughput_readings.push_back(measure_parallel_throughput(cores, a.quick));
  const double adam = measure_adam(a.quick);
  fmt::print("  CPU Adam (1 thread)    {:.3g} params/s\n", adam);
  // The rates above were measured under this load: its mean over the measurements.
  const double background = 0.5 * (load_before + measure_background_threads(cores, a.quick ? 0.05 : 0.25));
  fmt::print("  other processes        {:.2f} runnable threads on {} cores\n", background, cores);
  std::optional<LinearFit> coll;
  if (!a.no_mpi && engine::mpi_available()) coll = measure_collectives();
  if (coll)
    fmt::print("  all-gather, 2 ranks    {} + {} per hop\n", core::format_bandwidth(coll->bandwidth), core::format_seconds(coll->latency));
  else
    fmt::print("  all-gather             not measured (no MPI or --no-mpi): the memory copy rate stands in\n");
  const LinearFit link = coll ? *coll : LinearFit{copy.latency, copy.bandwidth};

  // Plan a small Program against what is known so far to time the Executor itself.
  core::HwProfile hw;
  hw.name = a.name;
  hw.node.gpus = 1;
  hw.node.gpu.memory = *device_memory;
  hw.node.gpu.peak_flops = peak;
  hw.node.gpu.memory_bandwidth = membw;
  hw.node.host_memory = host_memory;
  hw.node.host_memory_bandwidth = membw;
  hw.node.cpu_cores = int(cores);
  hw.node.cpu_adam_rate = adam;
  hw.node.device_shares_host_cores = true;
  hw.node.background_threads = background;
  double throughput = *std::max_element(throughput_readings.begin(), throughput_readings.end());
  hw.node.parallel_throughput = throughput;
  hw.node.nvme_capacity = nvme_capacity;
  hw.node.nvme_read_bandwidth = disk.read.bandwidth;
  hw.node.nvme_write_bandwidth = disk.write.bandwidth;
  hw.node.nvme_serial_requests = serial_requests;
  hw.node.pcie_bandwidth = copy.bandwidth;
  hw.reserve.host = 0.25;
  hw.reserve.nvme = 0.05;
  const double executor_task = measure_task_overhead(hw);
  hw.node.gpu.kernel_launch = executor_task;
  auto of_peak = [peak](double x, double rate) { return std::pair{x, std::clamp(rate / peak, 0.001, 1.0)}; };
  for (const auto& g : gemm) {
    hw.node.gpu.gemm_efficiency.points.push_back(of_peak(double(g.dim), g.backward));
    hw.node.gpu.gemm_forward_efficiency.points.push_back(of_peak(double(g.dim), g.forward));
  }
  for (const auto& p : attention) {
    hw.node.gpu.attention_forward_efficiency.points.push_back(of_peak(double(p.head), p.forward));
    hw.node.gpu.attention_backward_efficiency.points.push_back(of_peak(double(p.head), p.backward));
  }
  hw.node.gpu.elementwise_efficiency = std::clamp(elem / membw, 0.001, 1.0);
  hw.node.gpu.vector_flops = elementwise.vector_flops;
  std::fflush(stdout);
  const int calibration_steps = a.quick ? 3 : a.calibration_steps;
  const InStep in_step = measure_in_step(hw, calibration_steps);
  hw.node.gpu.in_step_slowdown = in_step.slowdown;
  const NvmeInStep nvme_step =
      measure_nvme_in_step(hw, std::max(disk.read.latency, disk.write.latency), copy.latency, a.nvme_dir, calibration_steps);
  const double nvme_read_in_step = nvme_step.read, nvme_write_in_step = nvme_step.write;
  const double per_task = nvme_step.dispatch;
  throughput_readings.push_back(measure_parallel_throughput(cores, a.quick));
  throughput = *std::max_element(throughput_readings.begin(), throughput_readings.end());
  hw.node.parallel_throughput = throughput;
  fmt::print("  {} compute threads      {:.2f} one-thread rates together (best of {:.2f}, {:.2f}, {:.2f})\n", cores, throughput,
             throughput_readings[0], throughput_readings[1], throughput_readings[2]);
  fmt::print("  Executor, per task     {} alone (no-op backend), {} in a step (a small GPT with states on NVMe)\n",
             core::format_seconds(executor_task), core::format_seconds(per_task));
  {
    std::string line;
    for (const auto& [key, f] : in_step.slowdown) line += fmt::format("{}{} {:.2f}", line.empty() ? "" : ", ", key, f);
    fmt::print("  kernels in a step      x their time alone: {}\n", line);
  }
  fmt::print("  NVMe in a step         x the store's time: read {:.2f}, write {:.2f}\n", nvme_read_in_step, nvme_write_in_step);

  // The curves as the profile holds them (filled above for the backend measurement).
  auto curve = [](const core::Curve& c) {
    std::string s;
    for (const auto& [x, y] : c.points) s += fmt::format("{}[{}, {:.3f}]", s.empty() ? "" : ", ", x, y);
    return s;
  };
  const auto& gpu = hw.node.gpu;
  const double nvme_latency = std::max(disk.read.latency, disk.write.latency);
  const core::MachineRecord machine = engine::this_machine(a.nvme_dir);
  auto render = [&](const core::Curve& skew) {
    std::string y;
    y += "# This machine as zinf's CPU backend sees it, measured by `zinf profile-hw` through the engine's own\n";
    y += "# code paths: the \"device\" is a budgeted arena in host memory, compute is engine/cpu's kernels, NVMe\n";
    y += "# is the NvmeStore (io_uring, O_DIRECT), copies are the GPT backend's, collectives are MPI between\n";
    y += "# local ranks. Medians of repeated runs; latencies and bandwidths are fits of t = latency + bytes/bw.\n";
    y += fmt::format("name: {}\n", a.name);
    y += fmt::format("description: measured by zinf profile-hw ({} cores, OPENBLAS_NUM_THREADS={}){}\n", cores,
                     blas_threads ? blas_threads : "unset", a.quick ? ", quick mode" : "");
    y += "sources:\n  - zinf profile-hw\n";
    y += "measured_on:                   # the machine these figures describe (zinf validate warns on another)\n";
    y += fmt::format("  cpu: \"{}\"\n  cpu_flags: \"{}\"\n  cores: {}\n  memory: {}\n  disk: \"{}\"\n", machine.cpu,
                     fmt::join(machine.cpu_flags, " "), machine.cores, num(machine.memory), machine.disk);
    y += "node:\n  gpus: 1\n  gpu:\n    name: cpu-arena\n";
    y += fmt::format("    memory: {}                # the CPU backend's device budget (--device-memory), not measured\n", num(*device_memory));
    y += fmt::format("    peak_flops: {}            # best rate of a linear's forward or backward over the shapes below\n", num(peak));
    y += fmt::format("    memory_bandwidth: {}      # memcpy, bytes read + written per second\n", num(membw));
    y += fmt::format("    kernel_launch: {}         # the Executor's hand-off per task in a step ({} alone, with a no-op backend)\n",
                     num(per_task), num(executor_task));
    y += "    # GEMMs by the side of the square GEMM of the same FLOPs per element moved (3 / (1/m + 1/n + 1/k))\n";
    y += fmt::format("    gemm_efficiency: [{}]   # backward\n", curve(gpu.gemm_efficiency));
    y += fmt::format("    gemm_forward_efficiency: [{}]\n", curve(gpu.gemm_forward_efficiency));
    y += fmt::format("    elementwise_efficiency: {:.3f}  # residual add, bf16-counted bytes, of memory_bandwidth\n",
                     gpu.elementwise_efficiency);
    y += fmt::format("    vector_flops: {}          # layernorm and GELU, graph-counted FLOPs (geometric mean)\n",
                     num(elementwise.vector_flops));
    y += "    # attention core by head size, graph-counted FLOPs, of peak_flops\n";
    y += fmt::format("    attention_forward_efficiency: [{}]\n", curve(gpu.attention_forward_efficiency));
    y += fmt::format("    attention_backward_efficiency: [{}]\n", curve(gpu.attention_backward_efficiency));
    y += "    # each kind of kernel inside a training step over the same kernel alone (gpt-overlap and a small GPT,\n";
    y += "    # every state on the device; the backend's own work per task included)\n";
    y += "    in_step_slowdown:\n";
    for (const auto& [key, f] : gpu.in_step_slowdown)
      y += fmt::format("      {}: {:.3f}{}# {} tasks\n", key, f, std::string(std::max<size_t>(1, 20 - key.size()), ' '), in_step.tasks.at(key));
    y += "  host:\n";
    y += fmt::format("    memory: {}\n    memory_bandwidth: {}\n    sockets: 1\n    cores: {}\n", num(host_memory), num(membw), cores);
    y += fmt::format("    adam_params_per_s: {}     # CpuAdam, 1 thread, bf16 gradients\n", num(adam));
    y += "    device_shares_cores: true        # the CPU backend: compute, Adam and copies share these cores\n";
    y += fmt::format("    parallel_throughput: {:.2f}      # one-thread GEMM rates that {} busy threads deliver together\n",
                     throughput, cores);
    y += fmt::format("    background_threads: {:.2f}       # other processes' runnable threads while measuring (spinning threads' CPU share)\n",
                     background);
    if (!skew.points.empty())
      y += fmt::format("    rank_skew: [{}]   # [ranks, s a collective waits per s of compute since the last one] (fitted to two GPTs' steps under mpirun)\n",
                       curve(skew));
    y += "  nvme:\n";
    y += fmt::format("    capacity: {}\n    drives: 1\n", num(nvme_capacity));
    y += fmt::format("    read_bandwidth: {}\n    write_bandwidth: {}\n", num(disk.read.bandwidth), num(disk.write.bandwidth));
    y += fmt::format("    latency: {}               # per request (read {}, write {})\n", num(nvme_latency + per_task),
                     num(disk.read.latency), num(disk.write.latency));
    y += fmt::format("    serial_requests: {}          # a reader and a writer of 16 KiB requests together: {:.2f} x one alone\n",
                     serial_requests ? "true" : "false", disk.overlap);
    y += "    # requests inside a training step (a small GPT, parameters and optimizer on NVMe) over the simulated ones\n";
    y += fmt::format("    in_step_slowdown: {{read: {:.3f}, write: {:.3f}}}\n", nvme_read_in_step, nvme_write_in_step);
    y += "  pcie:\n";
    y += fmt::format("    bandwidth_per_gpu: {}     # fresh buffer filled by a copy, as the GPT backend stages shards\n",
                     num(copy.bandwidth));
    y += fmt::format("    latency: {}\n", num(copy.latency + per_task));
    y += "  nvlink:                      # ranks on this machine exchange through MPI shared memory\n";
    y += fmt::format("    bandwidth_per_gpu: {}\n    latency: {}\n", num(link.bandwidth), num(link.latency + per_task));
    y += "  nic:\n    count: 1\n";
    y += fmt::format("    bandwidth: {}             # no network: the local MPI rate\n", num(link.bandwidth));
    y += fmt::format("fabric:\n  topology: full\n  latency: {}\n", num(link.latency + per_task));
    y += "reserve:\n  gpu: 0.0\n  host: 0.25\n  nvme: 0.05\n";
    return y;
  };

  // Ranks drifting apart: measured against a simulation on the profile so far (without it).
  core::Curve skew;
  if (coll) {
    const auto fits = measure_rank_skew(render(skew), a.nvme_dir, a.quick, calibration_steps);
    std::string line;
    for (const auto& f : fits) {
      skew.points.push_back({double(f.ranks), f.skew});
      line += fmt::format("\n    {} ranks: {:.2f} (steps", f.ranks, f.skew);
      for (size_t c = 0; c < f.measured.size(); ++c)
        line += fmt::format("{} {} measured, {} simulated without, {} with", c ? ";" : "", core::format_seconds(f.measured[c]),
                            core::format_seconds(f.without[c]), core::format_seconds(f.fitted[c]));
      line += ")";
    }
    fmt::print("  ranks drifting apart   {}\n",
               line.empty() ? "not measured" : "s waited per s of compute between collectives, fitted to two GPTs' steps:" + line);
  }
  const std::string y = render(skew);

  // What we write must load.
  core::parse_hwprofile(y, a.out);
  const fs::path out(a.out);
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  std::ofstream f(a.out);
  if (!f) throw std::runtime_error("cannot write " + a.out);
  f << y;
  if (!f) throw std::runtime_error("error writing " + a.out);
  fmt::print("wrote {} in {}\n", a.out, core::format_seconds(seconds_since(t_start)));
}

Registration reg(60, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("profile-hw", "Measure this machine through the engine's code paths and write a hwprofile");
  auto a = std::make_shared<ProfileArgs>();
  cmd->add_option("--out,-o", a->out, "Where to write the profile")->capture_default_str();
  cmd->add_option("--nvme-dir", a->nvme_dir, "Directory on the disk to measure (a scratch file is written and removed)")
      ->capture_default_str();
  cmd->add_option("--name", a->name, "Profile name")->capture_default_str();
  cmd->add_option("--device-memory", a->device_memory, "The CPU backend's device budget to record")->capture_default_str();
  cmd->add_flag("--quick", a->quick, "Fewer shapes and smaller buffers (seconds; for tests)");
  cmd->add_flag("--no-mpi", a->no_mpi, "Skip the collective measurement under mpirun");
  cmd->add_option("--calibration-steps", a->calibration_steps,
                  "Steps measured per calibration run (kernels and NVMe inside training steps); more steps, steadier figures")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--check", a->check,
                  "Measure nothing: say whether the hwprofile at this path was measured on this machine (exit 1 if not)");
  cmd->add_option("--comm-worker", a->comm_worker, "(internal) one rank of the collective measurement")->group("");
  cmd->callback([a] {
    if (a->check.empty()) return run_profile(*a);
    const std::string mismatch = profile_machine_mismatch(core::load_hwprofile(a->check), a->check, a->nvme_dir);
    if (mismatch.empty()) {
      fmt::print("{} was measured on this machine\n", a->check);
      return;
    }
    fmt::print(stderr, "{}\n", mismatch);
    throw CLI::RuntimeError(1);
  });
});

}  // namespace
}  // namespace zinf::cli