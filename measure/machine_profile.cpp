// zinf's machine profiler: measures this machine through the engine's own code paths
// (engine/probe) and returns a hwprofile the simulator reads. What the CPU backend calls the
// "device" is an arena in host memory, so the figures are those of the engine's parts as they run
// here: GEMM and elementwise kernels (engine/backend/cpu), the host<->device copy as the GPT backend does
// it (a fresh buffer filled by a copy), the NVMe store (io_uring, O_DIRECT, the run config's block
// size and queue depth), CPU Adam, MPI collectives between two local ranks (mpirun on the zinf
// executable), the Executor's cost per task, and kernels, NVMe requests and rank drift inside
// training steps of calibration models (engine::Trainer, fitted against sim::simulate). Each
// figure is the median of several repetitions; latencies and bandwidths are least-squares fits of
// t = latency + bytes / bandwidth. `zinf profile-hw` (cli/profile_hw.cpp) is its command.
#include "measure/machine_profile.hpp"

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
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "formats/bounded_input.hpp"
#include "core/plan.hpp"
#include "formats/hwprofile_writer.hpp"
#include "core/units.hpp"
#include "core/validation.hpp"
#include "engine/build_info.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/exec/executor.hpp"
#include "engine/io/output_file.hpp"
#include "engine/machine_info.hpp"
#include "engine/probe/machine_probe.hpp"
#include "engine/train/trainer.hpp"
#include "measure/calibration.hpp"
#include "measure/child_process.hpp"
#include "sim/isolate.hpp"
#include "sim/simulator.hpp"
#include "models/gpt.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::measure {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using namespace engine::probe;

// What a Trainer's steps show, over `steps` steps after `warmup` ones: each task's durations on
// the chosen lanes (by task id), and per step the mean dispatch delay of its tasks: from the
// moment a task could start (its dependencies and the task before it on its lane ended) to its
// start. Alone, that delay is the Executor's hand-off; in a step it includes waiting for a core.
struct StepTasks {
  std::vector<std::vector<double>> durations;
  std::vector<double> dispatch;       // seconds, mean per task, one per step
  std::vector<double> lane_dispatch;  // the same over the chosen lanes' tasks only
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
    double delay = 0, lane_delay = 0;
    size_t lane_events = 0;
    for (const auto& e : events) {
      double ready = lane_free[size_t(e.lane)];
      for (int32_t d : program.deps(program.task(e.task))) ready = std::max(ready, end[size_t(d)]);
      const double wait = std::max(0.0, e.start - ready);
      delay += wait;
      if (std::find(lanes.begin(), lanes.end(), e.lane) != lanes.end()) lane_delay += wait, ++lane_events;
      lane_free[size_t(e.lane)] = e.end;
    }
    if (!events.empty()) r.dispatch.push_back(delay / double(events.size()));
    if (lane_events) r.lane_dispatch.push_back(lane_delay / double(lane_events));
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
// own work per task (bookkeeping, arena and staging allocations). The same steps give the hand-off
// a compute task sees in a compute-bound step (StepTasks' dispatch delay over the compute lane's
// tasks, median over the steps of both models): the profile's kernel_launch, which the simulator adds to every compute task. The
// larger hand-off of a step whose lanes wake one another (the NVMe step below) goes into the
// transfer latencies, not into every kernel.
struct InStep {
  std::map<std::string, double> slowdown;
  std::map<std::string, size_t> tasks;  // tasks behind each figure
  double dispatch = 0;                  // seconds per task, compute-bound steps
};

InStep measure_in_step(const core::HwProfile& hw, int steps, const std::string& source_root) {
  core::HwProfile alone = hw;
  alone.node.gpu.kernel_launch = 0;
  alone.node.gpu.in_step_slowdown.clear();
  std::map<std::string, std::pair<double, double>> sums;  // key -> (measured, alone)
  std::vector<double> dispatch;
  InStep r;
  for (const auto& model : {models::find_model("gpt-overlap", source_root), profile_small_model()}) {
    const auto run = calibrate(model, "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n", hw, "", 3,
                               steps, {core::Lane::Compute});
    const core::Program& program = run.program;
    const auto& durations = run.seen.durations;
    dispatch.insert(dispatch.end(), run.seen.lane_dispatch.begin(), run.seen.lane_dispatch.end());
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
  r.dispatch = dispatch.empty() ? hw.node.gpu.kernel_launch : median(dispatch);
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
  const engine::PrivateDir private_dir("zinf-profile-step", nvme_root);
  const fs::path dir = private_dir.path();
  const auto [program, seen] =
      calibrate(profile_small_model(),
                "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: device}\n", hw,
                dir.string(), 3, steps, {core::Lane::NvmeRead, core::Lane::NvmeWrite});
  NvmeInStep r;
  r.dispatch = seen.dispatch.empty() ? hw.node.gpu.kernel_launch : median(seen.dispatch);
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

// All-gather bandwidth and latency between two local ranks: `self` (the zinf executable) under
// mpirun, each rank running collective_worker.
std::optional<LinearFit> measure_collectives(const std::string& self) {
  // The worker's answer goes through a directory of this process's own, never a guessable name in /tmp.
  const engine::PrivateDir scratch("zinf-profile-comm");
  const std::string out = scratch.path() + "/comm.txt";
  const std::string cmd = fmt::format(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 '{}' profile-hw "
      "--comm-worker '{}' >/dev/null 2>&1",
      self, out);
  const int rc = run_child(cmd, "");
  if (rc != 0) return std::nullopt;
  std::istringstream in(core::read_bounded_file(out, 4096, "collective measurement"));
  LinearFit f;
  if (!(in >> f.latency >> f.bandwidth)) return std::nullopt;
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

std::vector<sim::RankSkewFit> measure_rank_skew(const std::string& self, const std::string& profile_yaml, const std::string& scratch_root,
                                                  bool quick, int steps) {
  // The configs zinf validate reads back and its NVMe files, each in a directory of this process's
  // own: a guessable name in a shared directory could be a link someone planted.
  engine::PrivateDir private_dir("zinf-profile-skew"), private_scratch("zinf-profile-skew", scratch_root);
  const fs::path dir = private_dir.path(), scratch = private_scratch.path();
  auto& env = engine::default_io_env();
  engine::write_output_file(env, (dir / "profile.yaml").string(), profile_yaml, "profile-hw");
  const std::string config = "zero_stage: 3\noffload: {params: cpu, optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: host}\n";
  engine::write_output_file(env, (dir / "config.yaml").string(), config, "profile-hw");
  std::vector<sim::RankSkewFit> fits;
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
    engine::write_output_file(env, model.string(),
                              fmt::format("name: {}\nlayers: {}\nhidden: {}\nheads: {}\nseq: {}\nvocab: {}\nmicro_batch: {}\n",
                                          m.name, m.layers, m.hidden, m.heads, m.seq, m.vocab, m.micro_batch),
                              "profile-hw");
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
      ok = run_child(cmd, "") == 0;
      double meas = 0, pred = 0;
      if (ok) {
        const auto j = nlohmann::json::parse(core::read_bounded_file((out / "validate.json").string(), core::kMaxConfigBytes,
                                                                     "validate summary"));
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
  if (!ok) private_dir.keep();  // kept on failure, for its logs
  return fits;
}

// ---- the profile --------------------------------------------------------------------------------

// What profile_machine measures with each kernel, copy and disk request alone, before any
// training step.
struct Alone {
  unsigned cores = 1;
  double host_memory = 0, nvme_capacity = 0;
  engine::BlasThreads blas_threads;          // the threads a process takes, and who chose them
  int blas_thread_count = 1;                 // the threads OpenBLAS runs per process
  std::vector<PhaseRoundTrip> phase_trips;   // on several BLAS threads: how cheaply the cores shared data, phase by phase
                                             // (core::round_trip_phases(), those that could be timed)
  double load_before = 0;    // background_threads before the measurements
  // The cores' parallel throughput is read three times, seconds apart (before the kernels, after
  // the disk, and after the calibration runs), and the best reading kept: on this shared host a
  // window in which something else ran gave 1.02 once, and 1.24 as the median of three
  // back-to-back readings, among readings of 1.83..2.00. What other processes take is
  // background_threads' to model.
  std::vector<double> throughput_readings;
  std::vector<GemmPoint> gemm;
  double peak = 0;  // the best GEMM rate
  double membw = 0;
  Elementwise elementwise;
  std::vector<AttentionPoint> attention;
  KernelThreads kernel_threads;  // cores those kernels keep busy (several BLAS threads per process)
  BlasSteadiness steadiness;     // how steadily a shared GEMM keeps them busy: early and late in the profile
  LinearFit copy;
  DiskFit disk;
  bool serial_requests = false;
  double adam = 0;
  double background = 0;  // mean of background_threads before and after
  std::optional<LinearFit> coll;
};

// A cache line's round trip between two cores at this moment of the profile, on several BLAS
// threads and two usable cores: a machine whose cores share data at two costs runs shared GEMMs at
// two rates, and the phases whose figures are divided by one another should have seen the same.
void stamp_round_trip(Alone& m, const std::string& phase) {
  if (m.blas_thread_count <= 1 || engine::usable_cores() < 2) return;
  if (const auto t = cache_line_round_trip()) m.phase_trips.push_back({phase, *t});
}

// Kernels, memory, copies and the cores, printing each figure.
void measure_compute(const ProfileOptions& a, Alone& m) {
  m.load_before = measure_background_threads(m.cores, a.quick ? 0.05 : 0.25);
  m.throughput_readings.push_back(measure_parallel_throughput(m.cores, a.quick));
  stamp_round_trip(m, core::round_trip_phases()[0]);
  m.gemm = measure_gemm(a.quick);
  for (const auto& g : m.gemm) m.peak = std::max({m.peak, g.forward, g.backward});
  fmt::print("  GEMM (linear fwd, bwd) peak {}  at intensity dim {}..{}\n", core::format_flops(m.peak), m.gemm.front().dim,
             m.gemm.back().dim);
  m.membw = measure_memory_bandwidth(a.quick);
  m.elementwise = measure_elementwise(a.quick);
  const double elem = m.elementwise.bandwidth;
  fmt::print("  memory copy            {}   elementwise kernels {} ({:.2f} of it), {} of arithmetic\n",
             core::format_bandwidth(m.membw), core::format_bandwidth(elem), elem / m.membw,
             core::format_flops(m.elementwise.vector_flops));
  m.attention = measure_attention(a.quick);
  fmt::print("  attention core         {:.2f} / {:.2f} of the GEMM peak forward / backward at head size {}\n",
             m.attention.back().forward / m.peak, m.attention.back().backward / m.peak, m.attention.back().head);
  m.kernel_threads = measure_kernel_threads(m.gemm, m.attention, a.quick);
  if (!m.kernel_threads.gemm.empty() && !m.kernel_threads.attention.empty())
    fmt::print("  cores a kernel keeps   GEMM {:.2f}..{:.2f}, attention {:.2f}..{:.2f} (several BLAS threads per process)\n",
               m.kernel_threads.gemm.front().second, m.kernel_threads.gemm.back().second,
               m.kernel_threads.attention.front().second, m.kernel_threads.attention.back().second);
  stamp_round_trip(m, core::round_trip_phases()[1]);
  m.steadiness = measure_blas_steadiness(a.quick ? 0.4 : 1.6);
  m.copy = measure_copy(a.quick);
  fmt::print("  host->device copy      {} + {} per copy\n", core::format_bandwidth(m.copy.bandwidth),
             core::format_seconds(m.copy.latency));
  std::fflush(stdout);
}

// The disk, CPU Adam, the other processes' load and the collectives, printing each figure.
void measure_io(const ProfileOptions& a, Alone& m) {
  m.disk = measure_nvme(a.nvme_dir, a.quick);
  fmt::print("  NVMe store read        {} + {} per request\n", core::format_bandwidth(m.disk.read.bandwidth),
             core::format_seconds(m.disk.read.latency));
  fmt::print("  NVMe store write       {} + {} per request\n", core::format_bandwidth(m.disk.write.bandwidth),
             core::format_seconds(m.disk.write.latency));
  // Below 1.5 the second stream mostly waited: requests are served one at a time.
  m.serial_requests = m.disk.overlap < 1.5;
  fmt::print("  NVMe, read + write     {:.2f} x one stream's requests per second: {}\n", m.disk.overlap,
             m.serial_requests ? "served one at a time" : "served in parallel");
  m.throughput_readings.push_back(measure_parallel_throughput(m.cores, a.quick));
  m.adam = measure_adam(a.quick);
  fmt::print("  CPU Adam (1 thread)    {:.3g} params/s\n", m.adam);
  // The rates above were measured under this load: its mean over the measurements.
  m.background = 0.5 * (m.load_before + measure_background_threads(m.cores, a.quick ? 0.05 : 0.25));
  fmt::print("  other processes        {:.2f} runnable threads on {} cores\n", m.background, m.cores);
  if (!a.no_mpi && engine::mpi_available()) m.coll = measure_collectives(a.executable);
  if (m.coll)
    fmt::print("  all-gather, 2 ranks    {} + {} per hop\n", core::format_bandwidth(m.coll->bandwidth),
               core::format_seconds(m.coll->latency));
  else
    fmt::print("  all-gather             not measured (no MPI or --no-mpi): the memory copy rate stands in\n");
}

Alone measure_alone(const ProfileOptions& a) {
  Alone m;
  m.cores = std::max(1u, std::thread::hardware_concurrency());
  m.host_memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  struct statvfs sv {};
  if (::statvfs(a.nvme_dir.c_str(), &sv) == 0) m.nvme_capacity = double(sv.f_blocks) * double(sv.f_frsize);
  m.blas_thread_count = engine::this_machine("").blas_threads;
  // The count the runs it predicts take by default, or the one --threads or OPENBLAS_NUM_THREADS chose.
  m.blas_threads = engine::pinned_blas_threads();
  fmt::print("zinf profile-hw: {} core(s), {} of memory; {}\n", m.cores, core::format_bytes(m.host_memory),
             engine::describe(m.blas_threads));
  std::fflush(stdout);
  measure_compute(a, m);
  measure_io(a, m);
  return m;
}

// The profile of what was measured alone: enough to plan and simulate the calibration steps.
core::HwProfile profile_alone(const ProfileOptions& a, const Alone& m) {
  core::HwProfile hw;
  hw.name = a.name;
  hw.node.gpus = 1;
  hw.node.gpu.memory = a.device_memory;
  hw.node.gpu.peak_flops = m.peak;
  hw.node.gpu.memory_bandwidth = m.membw;
  hw.node.host_memory = m.host_memory;
  hw.node.host_memory_bandwidth = m.membw;
  hw.node.cpu_cores = int(m.cores);
  hw.node.cpu_adam_rate = m.adam;
  hw.node.device_shares_host_cores = true;
  hw.node.background_threads = m.background;
  hw.node.parallel_throughput = *std::max_element(m.throughput_readings.begin(), m.throughput_readings.end());
  hw.node.nvme_capacity = m.nvme_capacity;
  hw.node.nvme_read_bandwidth = m.disk.read.bandwidth;
  hw.node.nvme_write_bandwidth = m.disk.write.bandwidth;
  hw.node.nvme_serial_requests = m.serial_requests;
  hw.node.pcie_bandwidth = m.copy.bandwidth;
  hw.reserve.host = 0.25;
  hw.reserve.nvme = 0.05;
  const double peak = m.peak;
  auto of_peak = [peak](double x, double rate) { return std::pair{x, std::clamp(rate / peak, 0.001, 1.0)}; };
  for (const auto& g : m.gemm) {
    hw.node.gpu.gemm_efficiency.points.push_back(of_peak(double(g.dim), g.backward));
    hw.node.gpu.gemm_forward_efficiency.points.push_back(of_peak(double(g.dim), g.forward));
  }
  for (const auto& p : m.attention) {
    hw.node.gpu.attention_forward_efficiency.points.push_back(of_peak(double(p.head), p.forward));
    hw.node.gpu.attention_backward_efficiency.points.push_back(of_peak(double(p.head), p.backward));
  }
  hw.node.gpu.gemm_threads.points = m.kernel_threads.gemm;
  hw.node.gpu.attention_threads.points = m.kernel_threads.attention;
  hw.node.gpu.elementwise_efficiency = std::clamp(m.elementwise.bandwidth / m.membw, 0.001, 1.0);
  hw.node.gpu.vector_flops = m.elementwise.vector_flops;
  return hw;
}

// The shared GEMM's cores over the windows, and a warning when they moved while one thread held.
void print_steadiness(const BlasSteadiness& s, const KernelThreads& curve) {
  const Spread kept = spread(s.cores_kept), one = spread(s.one_thread);
  std::string trip;
  if (!s.round_trip.empty()) {
    const Spread t = spread(s.round_trip);
    trip = fmt::format("; a cache line between two cores {:.0f}..{:.0f} ns there and back", 1e9 * t.p10, 1e9 * t.p90);
  }
  fmt::print("  shared GEMM over time  {:.2f}..{:.2f} cores (p10..p90 of {} window pairs on {} BLAS threads); one thread's rate "
             "{:.0f} % apart{}\n", kept.p10, kept.p90, s.cores_kept.size(), s.threads, 100.0 * (one.ratio() - 1.0), trip);
  // Where the profile's own curve sits at the probe's shape: in a slow moment or a fast one.
  const double key = std::round(core::gemm_intensity_dim(512.0, double(s.width), double(s.width)));
  for (const auto& [x, cores] : curve.gemm)
    if (std::round(x) == key)
      fmt::print("  the profile's curve    {:.2f} cores at this shape (intensity {:.0f}): {}\n", cores, key,
                 cores < kept.p10 ? "below the range: measured in a slow moment"
                 : cores > kept.p90 ? "above the range: measured in a fast moment"
                                    : "within the range");
  const std::string w = steadiness_warning(s);
  if (!w.empty()) fmt::print("  warning: {}\n", w);
}

// The notes profile-hw writes beside the fields: where each figure comes from.
core::HwProfileNotes profile_notes(const Alone& m, double executor_task, double per_task, const InStep& in_step) {
  core::HwProfileNotes notes;
  notes.header = {
      "This machine as zinf's CPU backend sees it, measured by `zinf profile-hw` through the engine's own",
      "code paths: the \"device\" is a budgeted arena in host memory, compute is engine/backend/cpu's kernels, NVMe",
      "is the NvmeStore (io_uring, O_DIRECT), copies are the GPT backend's, collectives are MPI between",
      "local ranks. Medians of repeated runs; latencies and bandwidths are fits of t = latency + bytes/bw."};
  notes.sources = {"zinf profile-hw"};
  notes.significant_digits = 4;
  std::string in_step_tasks;
  for (const auto& [key, count] : in_step.tasks) in_step_tasks += fmt::format("{}{} {}", in_step_tasks.empty() ? "" : ", ", key, count);
  notes.fields = {
      {"measured_on", "the machine these figures describe (zinf validate warns on another)"},
      {"node.gpu.memory", "the CPU backend's device budget (--device-memory), not measured"},
      {"node.gpu.working_precision", "the CPU backend keeps fp32 activations, gathered parameters and gradients"},
      {"node.gpu.peak_flops", "best rate of a linear's forward or backward over the shapes below"},
      {"node.gpu.memory_bandwidth", "memcpy, bytes read + written per second"},
      {"node.gpu.kernel_launch",
       fmt::format("the Executor's hand-off per compute task in a compute-bound step ({} alone, with a no-op backend; {} in a step "
                   "whose lanes wake one another, in the latencies below)",
                   core::format_seconds(executor_task), core::format_seconds(per_task))},
      {"node.gpu.gemm_efficiency", "backward GEMMs by gemm_intensity_dim (3 / (1/m + 1/n + 1/k)), of peak_flops"},
      {"node.gpu.gemm_forward_efficiency", "forward GEMMs, the same"},
      {"node.gpu.elementwise_efficiency", "residual add, bf16-counted bytes, of memory_bandwidth"},
      {"node.gpu.vector_flops", "layernorm and GELU, graph-counted FLOPs (geometric mean)"},
      {"node.gpu.attention_forward_efficiency", "attention core by head size, graph-counted FLOPs, of peak_flops"},
      {"node.gpu.gemm_threads", "cores a linear's GEMMs keep busy: their time on one BLAS thread over their time above" +
                                    steadiness_note(m.steadiness)},
      {"node.gpu.attention_threads", "the same for the attention core, by head size"},
      {"node.gpu.in_step_slowdown", "each kind of kernel in a training step over it alone (tasks: " + in_step_tasks + ")" +
                                        (m.phase_trips.empty() ? std::string()
                                                               : "; a cache line's round trip between two cores " + phase_round_trips(m.phase_trips))},
      {"node.host.adam_params_per_s", "CpuAdam, 1 thread, bf16 gradients"},
      {"node.host.device_shares_cores", "the CPU backend: compute, Adam and copies share these cores"},
      {"node.host.parallel_throughput", fmt::format("one-thread GEMM rates that {} busy threads deliver together", m.cores)},
      {"node.host.background_threads", "other processes' runnable threads while measuring"},
      {"node.host.rank_skew", "[ranks, s a collective waits per s of compute since the last one] (two GPTs under mpirun)"},
      {"node.nvme.latency", fmt::format("per request (read {}, write {}) plus the hand-off",
                                        core::format_seconds(m.disk.read.latency), core::format_seconds(m.disk.write.latency))},
      {"node.nvme.serial_requests", fmt::format("a reader and a writer together: {:.2f} x one alone", m.disk.overlap)},
      {"node.nvme.in_step_slowdown", "requests in a training step (a small GPT, states on NVMe) over the simulated ones"},
      {"node.pcie.bandwidth_per_gpu", "fresh buffer filled by a copy, as the GPT backend stages shards"},
      {"node.nvlink", "ranks on this machine exchange through MPI shared memory"},
      {"node.nic.bandwidth", "no network: the local MPI rate"}};
  return notes;
}

// Ranks drifting apart: measured against a simulation on the profile so far (without it), printed.
core::Curve measure_and_print_rank_skew(const ProfileOptions& a, const std::string& profile_so_far, int calibration_steps) {
  core::Curve skew;
  const auto fits = measure_rank_skew(a.executable, profile_so_far, a.nvme_dir, a.quick, calibration_steps);
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
  return skew;
}

}  // namespace

// One rank of the collective measurement (under mpirun): all-gathers of small and large buffers.
void collective_worker(const std::string& out_path) {
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
    engine::write_output_file(engine::default_io_env(), out_path, fmt::format("{} {}\n", f.latency / (p - 1), f.bandwidth),
                              "profile-hw --comm-worker");
  }
}

std::string profile_machine(const ProfileOptions& a) {
  const auto t_start = Clock::now();
  Alone m = measure_alone(a);
  const LinearFit link = m.coll ? *m.coll : LinearFit{m.copy.latency, m.copy.bandwidth};

  // Plan a small Program against what is known so far to time the Executor itself.
  core::HwProfile hw = profile_alone(a, m);
  const double executor_task = measure_task_overhead(hw);
  hw.node.gpu.kernel_launch = executor_task;
  std::fflush(stdout);
  const int calibration_steps = a.quick ? 3 : a.calibration_steps;
  stamp_round_trip(m, core::round_trip_phases()[2]);
  const InStep in_step = measure_in_step(hw, calibration_steps, a.source_dir);
  hw.node.gpu.in_step_slowdown = in_step.slowdown;
  hw.node.gpu.kernel_launch = in_step.dispatch;
  const double nvme_latency = std::max(m.disk.read.latency, m.disk.write.latency);
  const NvmeInStep nvme_step = measure_nvme_in_step(hw, nvme_latency, m.copy.latency, a.nvme_dir, calibration_steps);
  stamp_round_trip(m, core::round_trip_phases()[3]);
  const double per_task = nvme_step.dispatch;
  m.throughput_readings.push_back(measure_parallel_throughput(m.cores, a.quick));
  const double throughput = *std::max_element(m.throughput_readings.begin(), m.throughput_readings.end());
  hw.node.parallel_throughput = throughput;
  fmt::print("  {} compute threads      {:.2f} one-thread rates together (best of {:.2f}, {:.2f}, {:.2f})\n", m.cores,
             throughput, m.throughput_readings[0], m.throughput_readings[1], m.throughput_readings[2]);
  if (m.steadiness.threads > 1) {  // a second look, some 20 s after the first
    const auto later = measure_blas_steadiness(a.quick ? 0.4 : 1.6);
    append_steadiness(m.steadiness, later);
    print_steadiness(m.steadiness, m.kernel_threads);
  }
  if (!m.phase_trips.empty()) {
    fmt::print("  round trip by phase    {}\n", phase_round_trips(m.phase_trips));
    const std::string w = phase_round_trip_warning(m.phase_trips, m.blas_thread_count);
    if (!w.empty()) fmt::print("  warning: {}\n", w);
  }
  fmt::print("  Executor, per task     {} alone (no-op backend), {} in a compute-bound step, {} in a step (a small GPT with states on NVMe)\n",
             core::format_seconds(executor_task), core::format_seconds(in_step.dispatch), core::format_seconds(per_task));
  std::string kernels;
  for (const auto& [key, f] : in_step.slowdown) kernels += fmt::format("{}{} {:.2f}", kernels.empty() ? "" : ", ", key, f);
  fmt::print("  kernels in a step      x their time alone: {}\n", kernels);
  fmt::print("  NVMe in a step         x the store's time: read {:.2f}, write {:.2f}\n", nvme_step.read, nvme_step.write);

  // The rest of the profile: what the measurements above give the simulator's other fields.
  hw.description = fmt::format("measured by zinf profile-hw ({} cores, {} BLAS threads from {}){}", m.cores, m.blas_threads.threads,
                               engine::to_string(m.blas_threads.source), a.quick ? ", quick mode" : "");
  hw.measured_on = engine::this_machine(a.nvme_dir);
  for (const auto& t : m.phase_trips) hw.measured_on.round_trips.push_back({t.phase, t.seconds});
  hw.node.gpu.name = "cpu-arena";
  hw.node.gpu.working_bytes = 4;  // the CPU backend keeps fp32 working tensors
  hw.node.nvme_latency = nvme_latency + per_task;
  hw.node.nvme_read_in_step = nvme_step.read;
  hw.node.nvme_write_in_step = nvme_step.write;
  hw.node.pcie_latency = m.copy.latency + per_task;
  hw.node.nvlink_bandwidth = link.bandwidth;  // ranks on this machine exchange through MPI shared memory
  hw.node.nvlink_latency = link.latency + per_task;
  hw.node.nic_bandwidth = link.bandwidth;
  hw.fabric = {"full", link.latency + per_task};
  const core::HwProfileNotes notes = profile_notes(m, executor_task, per_task, in_step);
  if (m.coll) hw.node.rank_skew = measure_and_print_rank_skew(a, core::hwprofile_to_yaml(hw, notes), calibration_steps);
  const std::string y = core::hwprofile_to_yaml(hw, notes);
  // What we return must load.
  core::parse_hwprofile(y, a.name + " (measured)");
  fmt::print("measured in {}\n", core::format_seconds(seconds_since(t_start)));
  return y;
}

std::string profile_machine_mismatch(const core::HwProfile& hw, const std::string& path, const std::string& disk_dir) {
  const std::string remedy = "measure this machine with `zinf profile-hw --out " + path + " --nvme-dir " +
                             (disk_dir.empty() ? std::string("DIR") : disk_dir) + "` (about 30 s)";
  if (hw.measured_on.empty())
    return "hwprofile " + path + " does not say which machine it measured (no measured_on section): its predictions may describe "
           "another machine; " + remedy;
  const auto diffs = core::machine_differences(hw.measured_on, engine::this_machine(disk_dir));
  std::string m;
  if (!diffs.empty()) {
    m = "hwprofile " + path + " was measured on another machine; its predictions describe that one:";
    for (const auto& d : diffs) m += "\n  - " + d;
    m += "\n  To predict this machine, " + remedy + ".";
  }
  // Measured on several BLAS threads by a profile-hw that did not yet measure the cores each kernel
  // keeps busy: its core pool counts a two-thread GEMM as one thread.
  if (hw.node.device_shares_host_cores && hw.measured_on.blas_threads > 1 && hw.node.gpu.gemm_threads.points.empty())
    m += (m.empty() ? "" : "\n") + fmt::format("hwprofile {} was measured on {} OpenBLAS threads per process without the cores "
                                                "each kernel keeps busy (node.gpu.gemm_threads): ranks that share the cores are "
                                                "predicted too long; {}", path, hw.measured_on.blas_threads, remedy);
  return m;
}

}  // namespace zinf::measure
