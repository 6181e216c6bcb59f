#include "sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <coroutine>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "sim/cost_model.hpp"
#include "sim/events.hpp"
#include "sim/gpu_variability.hpp"
#include "sim/flows.hpp"
#include "sim/platform.hpp"

namespace zinf::sim {

using core::Lane;
using core::Task;
using core::TaskKind;
using core::Tier;

namespace {

constexpr int kLanes = core::kLaneCount;
constexpr int kTiers = 3;

// A collective waiting for its participants: the last to arrive runs the flows for all of them.
struct Rendezvous {
  int arrived = 0;
  std::vector<std::coroutine_handle<>> waiting;
};

struct RankState {
  std::vector<int32_t> pending;                 // dependencies not yet ended, per task
  std::vector<uint8_t> done;                    // 1 once the task has ended (for the deadlock report)
  // Each lane starts its tasks in lane order, at most `slots` at once (Program::lane_slots); a lane
  // whose next task is not ready waits for it: the task that ends its last dependency starts it.
  struct LaneRun {
    size_t next = 0;       // index in the lane's task list of the next task to start
    int running = 0;       // tasks of the lane running now
    double busy_since = 0;  // when `running` last went from 0 to 1
    double busy = 0;        // seconds with at least one task running
  };
  std::array<LaneRun, kLanes> lanes{};
  std::array<int32_t, kLanes> waiting_for{};    // task a lane waits to start, or -1
  std::array<double, kTiers> live{};
  std::array<double, kTiers> peak{};
  double flops = 0;
  double compute_since_sync = 0;                // kernel seconds since the rank's last collective
  double gpu_time_factor = 1;                   // this GPU's kernel time relative to the profile's
  bool record = false;
};

class Simulation {
public:
  Simulation(const core::Program& program, const core::HwProfile& hw, const SimOptions& options)
      : program_(program),
        options_(options),
        ranks_(program.ranks()),
        nodes_((program.ranks() + hw.node.gpus - 1) / hw.node.gpus),
        fold_(options.fold_symmetric_nodes && nodes_ > 1 && program.ranks() % hw.node.gpus == 0 &&
              program.partitioning() == core::Partitioning::BandwidthCentric && !hw.fabric.is_tree()),
        sim_ranks_(fold_ ? hw.node.gpus : ranks_),
        platform_(hw, fold_ ? 2 : nodes_, options.seed == 0 ? 1 : options.seed),
        flows_(events_, platform_),
        cost_(hw),
        core_share_(hw.node.profiled_core_share()) {
    if (program.ranks() < 1) throw std::invalid_argument("the Program has no ranks");
    if (program.gpus_per_node() != hw.node.gpus && program.ranks() > std::min(program.gpus_per_node(), hw.node.gpus))
      throw std::invalid_argument("the Program was planned for " + std::to_string(program.gpus_per_node()) +
                                  " GPUs per node but the hwprofile '" + hw.name + "' has " +
                                  std::to_string(hw.node.gpus));
    const auto& tasks = program.tasks();
    // Dependents of each task (the same DAG on every rank), as compressed rows.
    std::vector<int32_t> count(tasks.size() + 1, 0);
    for (const auto& t : tasks)
      for (int32_t d : program.deps(t)) ++count[static_cast<size_t>(d) + 1];
    for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
    dependents_begin_ = count;
    dependents_.resize(static_cast<size_t>(count.back()));
    std::vector<int32_t> fill(count.begin(), count.end() - 1);
    for (const auto& t : tasks)
      for (int32_t d : program.deps(t)) dependents_[static_cast<size_t>(fill[static_cast<size_t>(d)]++)] = t.id;
    for (const auto& t : tasks) lane_tasks_[static_cast<size_t>(t.lane)].push_back(t.id);
    for (int l = 0; l < kLanes; ++l) slots_[static_cast<size_t>(l)] = std::max(1, program.lane_slots(static_cast<Lane>(l)));
    gpu_exclusive_ = !platform_.cores(0) && gpu_work_on_one_lane();
    nvlink_exclusive_ = collectives_on_one_lane();

    std::vector<int32_t> initial(tasks.size());
    for (const auto& t : tasks) initial[static_cast<size_t>(t.id)] = static_cast<int32_t>(t.deps_count);
    ranks_state_.resize(static_cast<size_t>(sim_ranks_));
    for (int r = 0; r < sim_ranks_; ++r) {
      auto& rs = ranks_state_[static_cast<size_t>(r)];
      rs.pending = initial;
      rs.done.assign(tasks.size(), 0);
      rs.waiting_for.fill(-1);
      const auto& st = program.static_bytes(r);
      for (int k = 0; k < kTiers; ++k) rs.live[static_cast<size_t>(k)] = rs.peak[static_cast<size_t>(k)] = st[static_cast<size_t>(k)];
      rs.record = options.timeline_all_ranks ||
                  std::find(options.timeline_ranks.begin(), options.timeline_ranks.end(), r) != options.timeline_ranks.end();
    }
    assign_gpu_rates(hw.node.gpu);
    node_live_.assign(static_cast<size_t>(platform_.nodes()), {});
    node_peak_.assign(static_cast<size_t>(platform_.nodes()), {});
    for (int r = 0; r < sim_ranks_; ++r)
      for (int k = 0; k < kTiers; ++k) {
        auto n = static_cast<size_t>(platform_.node_of(r));
        node_live_[n][static_cast<size_t>(k)] += ranks_state_[static_cast<size_t>(r)].live[static_cast<size_t>(k)];
        node_peak_[n][static_cast<size_t>(k)] = node_live_[n][static_cast<size_t>(k)];
      }
  }

  ~Simulation() {
    for (auto& [key, rv] : rendezvous_)  // parked on a collective that never ran (an unfinished step)
      for (auto h : rv.waiting) h.destroy();
  }

  SimReport run() {
    for (int r = 0; r < sim_ranks_; ++r)
      for (int l = 0; l < kLanes; ++l) start_ready(r, static_cast<Lane>(l));
    start_background();
    platform_.engine().run();
    if (auto e = events_.failure()) std::rethrow_exception(e);
    // Tasks not run when the engine stops (nothing left that could start them), or a clock past
    // what a double resolves, mean the simulation did not finish: an error, never a step time.
    const int64_t unfinished = int64_t(program_.tasks().size()) * sim_ranks_ - int64_t(tasks_run_);
    if (unfinished != 0 || !std::isfinite(sg4::Engine::get_clock()))
      throw std::runtime_error(fmt::format(
          "the simulation did not finish ({} tasks not run, clock {} s): the hardware profile's rates are "
          "too small for SimGrid to resolve, or the Program has a cycle{}",
          unfinished, sg4::Engine::get_clock(), describe_waits()));
    return report();
  }

private:
  // Each simulated rank's kernel-time factor (SimOptions::seed).
  void assign_gpu_rates(const core::GpuSpec& gpu) {
    if (!gpu.has_variability()) return;
    const uint64_t seed = options_.seed;
    const double all = seed == 0 ? expected_slowest_gpu(gpu, ranks_) : fold_ ? slowest_gpu(gpu, seed, ranks_) : 0.0;
    for (int r = 0; r < sim_ranks_; ++r)
      ranks_state_[static_cast<size_t>(r)].gpu_time_factor = all > 0 ? all : gpu_time_factor(gpu, seed, r);
  }

  // Whether every task that works on a GPU runs on the compute lane: then the GPU's host never has
  // two execs at once, and a kernel takes its time exactly, as a timer instead of an Exec.
  bool gpu_work_on_one_lane() const {
    for (const auto& t : program_.tasks()) {
      if (t.lane == Lane::Compute) continue;
      if (core::is_compute(t.kind)) return false;
      if ((t.kind == TaskKind::GradNorm || t.kind == TaskKind::OptimizerStep) && t.lane != Lane::CpuOptim) return false;
    }
    return true;
  }

  // Whether every collective runs on one lane: then a rank takes part in one collective at a time
  // (its task ends when the collective's last phase does), and since only collectives use NVLink,
  // a phase's flows have their GPUs' NVLink ports to themselves.
  bool collectives_on_one_lane() const {
    int lane = -1;
    for (const auto& t : program_.tasks()) {
      if (!core::is_collective(t.kind)) continue;
      if (lane >= 0 && lane != static_cast<int>(t.lane)) return false;
      lane = static_cast<int>(t.lane);
    }
    return true;
  }

  // Starts the lane's next tasks while they are ready and the lane has a free slot.
  void start_ready(int rank, Lane lane) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    const auto li = static_cast<size_t>(lane);
    auto& L = rs.lanes[li];
    const auto& ids = lane_tasks_[li];
    while (L.next < ids.size() && L.running < slots_[li]) {
      const int32_t id = ids[L.next];
      if (rs.pending[static_cast<size_t>(id)] > 0) {
        rs.waiting_for[li] = id;
        return;
      }
      rs.waiting_for[li] = -1;
      ++L.next;
      if (L.running++ == 0) L.busy_since = sg4::Engine::get_clock();
      ++active_;
      events_.spawn(run_task(rank, lane, id));
    }
  }

  // Runs task `id` on `rank`: its memory events, its work, its timeline event; then starts what
  // its end made ready.
  Job run_task(int rank, Lane lane, int32_t id) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    const Task& t = program_.task(id);
    const double start = sg4::Engine::get_clock();
    const bool active = program_.active(t, rank);
    memory(rank, program_.allocs(t, rank), +1);
    if (active) co_await execute(t, rank);
    const double end = sg4::Engine::get_clock();
    memory(rank, program_.frees(t, rank), -1);
    last_end_ = std::max(last_end_, end);
    ++tasks_run_;
    --active_;
    if (core::is_compute(t.kind) && active) rs.flops += t.flops;
    if (rs.record && t.kind != TaskKind::Alloc && t.kind != TaskKind::Free && active)
      timeline_.events.push_back({rank, t.lane, t.id, t.kind, program_.label(t), start, end, t.bytes, t.flops});
    auto& L = rs.lanes[static_cast<size_t>(lane)];
    if (--L.running == 0) L.busy += end - L.busy_since;
    complete(rank, id);
    start_ready(rank, lane);
  }

  void complete(int rank, int32_t id) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    rs.done[static_cast<size_t>(id)] = 1;
    const auto b = static_cast<size_t>(dependents_begin_[static_cast<size_t>(id)]);
    const auto e = static_cast<size_t>(dependents_begin_[static_cast<size_t>(id) + 1]);
    for (size_t i = b; i < e; ++i) {
      const int32_t d = dependents_[i];
      if (--rs.pending[static_cast<size_t>(d)] == 0) {
        const auto l = program_.task(d).lane;
        if (rs.waiting_for[static_cast<size_t>(l)] == d) start_ready(rank, l);
      }
    }
  }

  void memory(int rank, std::span<const core::MemEvent> events, int sign) {
    if (events.empty()) return;
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    auto& node_live = node_live_[static_cast<size_t>(platform_.node_of(rank))];
    auto& node_peak = node_peak_[static_cast<size_t>(platform_.node_of(rank))];
    for (const auto& ev : events) {
      const auto k = static_cast<size_t>(ev.tier);
      rs.live[k] += sign * ev.bytes;
      node_live[k] += sign * ev.bytes;
      rs.peak[k] = std::max(rs.peak[k], rs.live[k]);
      node_peak[k] = std::max(node_peak[k], node_live[k]);
    }
  }

  // For an unfinished simulation: on the first rank with a waiting lane, the task each lane waits
  // to start and those of its dependencies that have not ended, so that the cycle can be traced.
  std::string describe_waits() const {
    for (int r = 0; r < sim_ranks_; ++r) {
      const auto& rs = ranks_state_[static_cast<size_t>(r)];
      std::string out;
      for (int l = 0; l < kLanes; ++l) {
        const int32_t id = rs.waiting_for[static_cast<size_t>(l)];
        if (id < 0) continue;
        const Task& t = program_.task(id);
        out += fmt::format("; lane {} waits to start task {} ({}) for", core::to_string(static_cast<Lane>(l)), id,
                           program_.label(t));
        int shown = 0;
        for (int32_t d : program_.deps(t))
          if (!rs.done[static_cast<size_t>(d)] && shown++ < 3)
            out += fmt::format(" task {} ({}, lane {})", d, program_.label(program_.task(d)),
                               core::to_string(program_.task(d).lane));
      }
      if (!out.empty()) return fmt::format(". On rank {}{}", r, out);
    }
    return "";
  }

  // Other processes' threads on a shared core pool (the profile's background_threads, measured):
  // ceil(b) loops that keep an exec running, each weighing b / ceil(b) of a thread in SimGrid's
  // max-min share of the cores, while any task is running: the ranks' threads get what a fair
  // scheduler gives them beside b other threads, as while the profile was measured.
  void start_background() {
    const double b = platform_.hw().node.background_threads;
    if (b <= 0 || !platform_.cores(0)) return;
    background_ = true;
    const int loops = static_cast<int>(std::ceil(b));
    for (int n = 0; n < platform_.nodes(); ++n)
      if (auto* pool = platform_.cores(n))
        for (int i = 0; i < loops; ++i) events_.spawn(background(pool, b / loops));
  }

  // Short execs back to back: the share is continuous, and the last one ends at most a
  // millisecond after the step (whose time is the last task's end). It stops too when no task is
  // running (nothing is left, or every lane waits on another: a deadlock, which run() reports).
  Job background(sg4::Host* pool, double weight) {
    while (active_ > 0 && !events_.failure()) {
      const sg4::ActivityPtr e = start_exec(pool, 1e-3, weight, weight);
      co_await events_.wait(e);
    }
  }

  // An exec started now (bound 0: none). Activities awaited are named variables, never temporaries
  // of the co_await expression, which GCC 12 destroys twice.
  static sg4::ActivityPtr start_exec(sg4::Host* host, double flops, double bound = 0, double priority = 1) {
    auto e = sg4::Exec::init();
    e->set_host(host)->set_flops_amount(flops)->set_priority(priority);
    if (bound > 0) e->set_bound(bound);
    e->start();
    return e;
  }

  // Work the rank does on its node's shared core pool: `seconds` as the profile measured it, on
  // `threads` threads (a multi-threaded BLAS kernel keeps several cores busy) at the share of a core
  // each got while profiled, run as an exec SimGrid time-shares with every other thread on those
  // cores: bounded at `threads` cores, weighted as that many threads. Without a shared pool, on
  // `fallback` for `seconds`.
  Job host_work(int rank, sg4::Host* fallback, double seconds, double threads = 1) {
    if (seconds <= 0) co_return;
    ++activities_;
    if (auto* pool = platform_.cores(platform_.node_of(rank))) {
      const double share = threads == 1 ? core_share_ : platform_.hw().node.profiled_core_share(threads);
      // A rank with fewer BLAS threads than the profile's does the same work on fewer cores.
      const int cap = platform_.hw().node.rank_blas_threads;
      const double cores = cap > 0 ? std::min(threads, double(cap)) : threads;
      const sg4::ActivityPtr e = start_exec(pool, seconds * threads * share, cores, cores);
      co_await events_.wait(e);
    } else if (gpu_exclusive_ && fallback == platform_.gpu(rank)) {
      co_await events_.delay(seconds);
    } else {
      const sg4::ActivityPtr e = start_exec(fallback, seconds * fallback->get_speed());
      co_await events_.wait(e);
    }
  }

  Job flow(sg4::Host* from, sg4::Host* to, double bytes, double lat) {
    if (bytes <= 0) co_return;
    activities_ += lat > 0 ? 2 : 1;
    co_await events_.delay(lat);
    Flows::Group transfer;
    flows_.start(from, to, bytes, transfer);
    co_await flows_.wait(transfer);
  }

  // NVMe <-> GPU over GPUDirect Storage: the drives' I/O and the PCIe flow to the GPU run together
  // (the transfer streams in chunks), so it takes the longer of the two; host memory is not touched.
  Job gds_transfer(const Task& t, int rank) {
    auto* endpoint = platform_.gds_endpoint(platform_.node_of(rank));
    if (!endpoint)
      throw std::runtime_error(fmt::format("{}: moves NVMe <-> device directly, but the profile has no node.gds path",
                                           program_.label(t)));
    const bool read = t.kind == TaskKind::NvmeRead;
    const int node = platform_.node_of(rank);
    activities_ += 3;
    co_await events_.delay(cost_.nvme_in_step(read) * cost_.nvme_latency());
    const double bytes = t.bytes * cost_.nvme_in_step(read);
    Flows::Group both;
    if (read) {
      flows_.start(platform_.nvme(node), platform_.cpu(node, 0), bytes, both);
      flows_.start(endpoint, platform_.gpu(rank), t.bytes, both);
    } else {
      flows_.start(platform_.cpu(node, 0), platform_.nvme(node), bytes, both);
      flows_.start(platform_.gpu(rank), endpoint, t.bytes, both);
    }
    co_await flows_.wait(both);
  }

  Job nvme_transfer(const Task& t, int rank) {
    if (t.bytes <= 0) co_return;
    if (t.from == core::Tier::Device || t.to == core::Tier::Device) {
      co_await gds_transfer(t, rank);
      co_return;
    }
    const int node = platform_.node_of(rank);
    const bool read = t.kind == TaskKind::NvmeRead;
    const double slowdown = cost_.nvme_in_step(read);
    double amount = t.bytes * slowdown;
    const auto& n = platform_.hw().node;
    if (cost_.nvme_serial_requests()) {  // the latency occupies the drive: as many bytes as it could move meanwhile
      amount += slowdown * cost_.nvme_latency() * (read ? n.nvme_read_bandwidth : n.nvme_write_bandwidth);
    } else {
      ++activities_;
      co_await events_.delay(slowdown * cost_.nvme_latency());
    }
    ++activities_;
    Flows::Group io;
    if (read)
      flows_.start(platform_.nvme(node), platform_.cpu(node, 0), amount, io);
    else
      flows_.start(platform_.cpu(node, 0), platform_.nvme(node), amount, io);
    co_await flows_.wait(io);
  }

  Job execute(const Task& t, int rank) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    switch (t.kind) {
      case TaskKind::Forward:
      case TaskKind::Recompute:
      case TaskKind::Backward: {
        const double seconds = cost_.kernel_seconds(program_, t) * rs.gpu_time_factor;
        rs.compute_since_sync += seconds;
        co_await host_work(rank, platform_.gpu(rank), seconds, cost_.kernel_threads(program_, t));
        break;
      }
      case TaskKind::CopyH2D:
      case TaskKind::CopyD2H:
        // A host<->device copy on the CPU backend is a memcpy by the lane's thread, not a DMA.
        if (platform_.cores(platform_.node_of(rank))) {
          if (t.bytes > 0) co_await host_work(rank, nullptr, cost_.pcie_latency() + t.bytes / platform_.pcie_bandwidth());
        } else if (t.kind == TaskKind::CopyH2D) {
          co_await flow(platform_.cpu_of(rank), platform_.gpu(rank), t.bytes, cost_.pcie_latency());
        } else {
          co_await flow(platform_.gpu(rank), platform_.cpu_of(rank), t.bytes, cost_.pcie_latency());
        }
        break;
      case TaskKind::NvmeRead:
      case TaskKind::NvmeWrite: co_await nvme_transfer(t, rank); break;
      case TaskKind::AllGather:
      case TaskKind::ReduceScatter:
      case TaskKind::AllReduce:
      case TaskKind::Broadcast:
      case TaskKind::Reduce:
      case TaskKind::AllToAll:
        co_await collective(t, rank);
        // A CPU-backend device's widening or scaling beside the transfer (0 on a GPU profile).
        if (const double s = core::collective_host_seconds(program_, t, rank, platform_.hw()); s > 0)
          co_await host_work(rank, platform_.gpu(rank), s);
        // The copies the Program states beside the transfer (a DeepSpeed release's list collectives),
        // on the collective's stream: a timer after the collective's flows.
        if (const double copies = core::collective_device_seconds(program_, t, platform_.hw()); copies > 0) {
          ++activities_;
          co_await events_.delay(copies);
        }
        break;
      case TaskKind::GradNorm:
        break;  // the squares were summed as each gradient shard became final (the stores'): no work here
      case TaskKind::OptimizerStep:
        if (t.lane == Lane::CpuOptim)  // the fused update, then any further passes over host memory
          co_await host_work(rank, platform_.cpu_of(rank),
                             cost_.cpu_adam_seconds(static_cast<double>(t.sg_count)) +
                                 cost_.cpu_stream_seconds(core::optimizer_extra_host_bytes(t)));
        else
          co_await host_work(rank, platform_.gpu(rank), cost_.kernel_seconds(program_, t) * rs.gpu_time_factor);
        break;
      case TaskKind::Alloc:
      case TaskKind::Free: break;
    }
  }

  // Parks the calling task at a rendezvous until the member that arrives last has run the
  // collective for all of them.
  auto park(Rendezvous& rv) {
    struct Awaiter {
      Rendezvous& rv;
      int& active;
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) {
        rv.waiting.push_back(h);
        --active;
      }
      void await_resume() const noexcept {}
    };
    return Awaiter{rv, active_};
  }

  void release(int64_t key) {
    auto waiting = std::move(rendezvous_[key].waiting);
    rendezvous_.erase(key);
    for (auto h : waiting) {
      ++active_;
      events_.resume_soon(h);
    }
  }

  // A phase inside one node whose flows each own their NVLink ports: every GPU sends at most one
  // flow and receives at most one, and no other traffic can be on those ports (nvlink_exclusive_),
  // so each flow runs at the port's full rate and the phase takes its largest flow's bytes over
  // it, exactly; -1 when the phase must be simulated as flows.
  double nvlink_alone_seconds(const CollectivePhase& p) {
    if (!nvlink_exclusive_ || p.crosses_nodes || p.flows.empty()) return -1;
    port_out_.resize(size_t(platform_.ranks()), 0);
    port_in_.resize(size_t(platform_.ranks()), 0);
    bool alone = true;
    double largest = 0;
    size_t marked = 0;
    for (; marked < p.flows.size() && alone; ++marked) {
      const auto& f = p.flows[marked];
      alone = platform_.node_of(f.src) == platform_.node_of(f.dst) && !port_out_[size_t(f.src)] && !port_in_[size_t(f.dst)];
      port_out_[size_t(f.src)] = port_in_[size_t(f.dst)] = 1;
      largest = std::max(largest, f.bytes);
    }
    for (size_t i = 0; i < marked; ++i) port_out_[size_t(p.flows[i].src)] = port_in_[size_t(p.flows[i].dst)] = 0;
    return alone ? std::floor(largest) / platform_.hw().node.nvlink_bandwidth : -1;
  }

  Job run_phases(const std::vector<CollectivePhase>& phases, bool fabric_time) {
    for (const auto& p : phases) {
      const double begin = sg4::Engine::get_clock();
      if (p.latency > 0) ++activities_;
      co_await events_.delay(p.latency);
      if (const double alone = nvlink_alone_seconds(p); alone >= 0) {
        ++activities_;
        co_await events_.delay(alone);
      } else {
        Flows::Group phase;
        for (const auto& f : p.flows) flows_.start(platform_.gpu(f.src), platform_.gpu(f.dst), f.bytes, phase);
        activities_ += p.flows.size();
        co_await flows_.wait(phase);
      }
      if (fabric_time && p.crosses_nodes) fabric_busy_ += sg4::Engine::get_clock() - begin;
    }
  }

  Job collective(const Task& t, int rank) {
    const core::CollectiveGroups groups = core::collective_groups(program_, t);
    if (groups.consecutive && groups.members > 1 && groups.members < ranks_ && t.owner < 0) {
      co_await group_collective(t, rank);
      co_return;
    }
    if (groups.members < 2) co_return;  // each rank its own group (an expert slice on one rank)
    const int members = t.owner >= 0 ? 1 : sim_ranks_;
    if (members < 2 || t.participants < 2 || t.bytes <= 0) co_return;
    if (t.participants != ranks_)
      throw std::runtime_error("collective task " + std::to_string(t.id) + " has " + std::to_string(t.participants) +
                               " participants; the simulator supports collectives over all " +
                               std::to_string(ranks_) + " ranks or over groups of consecutive ranks inside a node");
    const int64_t key = int64_t{t.id} << 20;
    auto& rv = rendezvous_[key];
    if (++rv.arrived < members) {
      co_await park(rv);
      co_return;
    }
    const int G = std::min(platform_.gpus_per_node(), ranks_);
    // Ranks that share cores drift apart between collectives: the last one arrives late by the
    // profile's share of the compute they did since the previous one.
    if (const double skew = cost_.rank_skew(G); skew > 0) {
      double since = 0;
      for (auto& rs : ranks_state_) {
        since += rs.compute_since_sync / double(ranks_state_.size());
        rs.compute_since_sync = 0;
      }
      ++activities_;
      co_await events_.delay(skew * since);
    }
    // Under tensor parallelism T, ZeRO's collectives run in T strided data-parallel groups at once
    // (an expert unit's in T x E expert-data-parallel groups).
    const int stride = groups.stride;
    auto phases = collective_phases({t.kind, ranks_, G, t.bytes, std::max(0, t.root), stride}, options_.algorithm,
                                    {cost_.nvlink_latency(), cost_.fabric_latency()});
    // With the profile's NCCL: the call's latency and protocol as NCCL's tuning model prices them,
    // over the data-parallel group (ranks / T) with G / T members in each node.
    if (platform_.hw().nccl.enabled() && t.kind != TaskKind::AllToAll)
      apply_nccl_call(phases, core::collective_call(platform_.hw(), t.kind, t.bytes, ranks_ / stride,
                                                    ranks_ > G ? G / stride : ranks_ / stride));
    if (fold_) phases = fold(phases, G);
    co_await run_phases(phases, true);
    release(key);
  }

  // A collective among `participants` consecutive ranks (a tensor-parallel group inside a node, an
  // expert-parallel group inside a node or over whole nodes): every group runs its own at once.
  Job group_collective(const Task& t, int rank) {
    const int k = t.participants;
    const int G = platform_.gpus_per_node();
    if ((G % k != 0 && k % G != 0) || ranks_ % k != 0)
      throw std::runtime_error("collective task " + std::to_string(t.id) + ": a group of " + std::to_string(k) +
                               " ranks must divide the node's " + std::to_string(G) + " GPUs (or fill whole nodes) and the " +
                               std::to_string(ranks_) + " ranks");
    if (t.bytes <= 0) co_return;
    const int group = rank / k;
    const int64_t key = (int64_t{t.id} << 20) + 1 + group;
    auto& rv = rendezvous_[key];
    if (++rv.arrived < k) {
      co_await park(rv);
      co_return;
    }
    auto phases = collective_phases({t.kind, k, std::min(k, G), t.bytes, std::max(0, t.root)}, options_.algorithm,
                                    {cost_.nvlink_latency(), cost_.fabric_latency()});
    if (platform_.hw().nccl.enabled() && t.kind != TaskKind::AllToAll)
      apply_nccl_call(phases, core::collective_call(platform_.hw(), t.kind, t.bytes, k, std::min(k, G)));
    const int base = group * k;
    for (auto& p : phases)
      for (auto& f : p.flows) {
        f.src += base;
        f.dst += base;
      }
    co_await run_phases(phases, false);
    release(key);
  }

  // Node 0's view of a collective over identical nodes: the flows node 0's GPUs send and receive,
  // with every other node's GPU standing in as the same local GPU of node 1 (the mirror). Every
  // link of node 0 carries exactly the flows it carries in the full simulation; flows among other
  // nodes only load links that node 0 never uses, and the latency term keeps the full ring length.
  static std::vector<CollectivePhase> fold(const std::vector<CollectivePhase>& phases, int G) {
    std::vector<CollectivePhase> out;
    auto mirror = [G](int r) { return r < G ? r : G + r % G; };
    for (const auto& p : phases) {
      CollectivePhase q;
      q.latency = p.latency;
      q.crosses_nodes = p.crosses_nodes;
      for (const auto& f : p.flows)
        if (f.src < G || f.dst < G) q.flows.push_back({mirror(f.src), mirror(f.dst), f.bytes});
      out.push_back(std::move(q));
    }
    return out;
  }

  SimReport report() {
    SimReport r;
    r.ranks = ranks_;
    r.nodes = nodes_;
    r.folded = fold_;
    r.slowest_gpu = 0;
    for (const auto& rs : ranks_state_) r.slowest_gpu = std::max(r.slowest_gpu, rs.gpu_time_factor);
    // The step ends with the last task, not with the background's last exec.
    r.step_time = background_ ? last_end_ : sg4::Engine::get_clock();
    r.activities = activities_;
    r.tasks_run = tasks_run_;
    const auto& hw = platform_.hw();
    for (const auto& rs : ranks_state_) r.flops_per_gpu = std::max(r.flops_per_gpu, rs.flops);
    if (r.step_time > 0) {
      r.tflops_per_gpu = r.flops_per_gpu / r.step_time / 1e12;
      r.fraction_of_peak = r.flops_per_gpu / r.step_time / hw.node.gpu.peak_flops;
      if (options_.samples_per_step > 0) r.samples_per_s = options_.samples_per_step / r.step_time;
    }
    auto lane_busy = [&](Lane l) {
      double s = 0;
      for (const auto& rs : ranks_state_) s += rs.lanes[static_cast<size_t>(l)].busy;
      return r.step_time > 0 ? s / sim_ranks_ / r.step_time : 0.0;
    };
    r.busy = {{"gpu", lane_busy(Lane::Compute)},         {"pcie_h2d", lane_busy(Lane::H2D)},
              {"pcie_d2h", lane_busy(Lane::D2H)},        {"nvme_read", lane_busy(Lane::NvmeRead)},
              {"nvme_write", lane_busy(Lane::NvmeWrite)}, {"comm", lane_busy(Lane::Comm)},
              {"nic", r.nodes > 1 && r.step_time > 0 ? fabric_busy_ / r.step_time : 0.0},
              {"cpu", lane_busy(Lane::CpuOptim)}};
    const auto& budget = program_.budget();
    for (const auto& rs : ranks_state_) {
      r.peak_device_per_gpu = std::max(r.peak_device_per_gpu, rs.peak[static_cast<size_t>(Tier::Device)]);
      for (int k = 0; k < kTiers; ++k)
        if (budget[static_cast<size_t>(k)] > 0 && rs.peak[static_cast<size_t>(k)] > budget[static_cast<size_t>(k)] * (1 + 1e-9))
          r.within_budget = false;
    }
    for (const auto& np : node_peak_) {
      r.peak_host_per_node = std::max(r.peak_host_per_node, np[static_cast<size_t>(Tier::Host)]);
      r.peak_nvme_per_node = std::max(r.peak_nvme_per_node, np[static_cast<size_t>(Tier::Nvme)]);
    }
    std::stable_sort(timeline_.events.begin(), timeline_.events.end(), [](const auto& a, const auto& b) {
      return a.rank != b.rank ? a.rank < b.rank : a.task < b.task;
    });
    r.timeline = std::move(timeline_);
    return r;
  }

  const core::Program& program_;
  SimOptions options_;
  int ranks_;
  int nodes_;
  bool fold_;
  int sim_ranks_;  // ranks simulated: all, or node 0's when folded
  Platform platform_;
  Events events_;  // after the platform: needs its engine
  Flows flows_;    // every transfer: over the platform's links, solved by sim/flows.hpp
  CostModel cost_;
  bool background_ = false;
  bool gpu_exclusive_ = false;  // kernels as timers (gpu_work_on_one_lane)
  bool nvlink_exclusive_ = false;  // NVLink phases as timers (collectives_on_one_lane)
  std::vector<uint8_t> port_out_, port_in_;  // scratch of nvlink_alone_seconds
  int active_ = 0;              // tasks running and not parked at a rendezvous
  double last_end_ = 0;
  double core_share_;  // of one core, per thread, when the profile was measured (1: no shared pool)
  std::vector<int32_t> dependents_begin_, dependents_;
  std::array<std::vector<int32_t>, kLanes> lane_tasks_;
  std::array<int, kLanes> slots_{};
  std::vector<RankState> ranks_state_;
  std::vector<std::array<double, kTiers>> node_live_, node_peak_;
  std::unordered_map<int64_t, Rendezvous> rendezvous_;  // task << 20, plus 1 + group for a group's
  core::Timeline timeline_;
  uint64_t activities_ = 0, tasks_run_ = 0;
  double fabric_busy_ = 0;
};

}  // namespace

SimReport simulate(const core::Program& program, const core::HwProfile& hw, const SimOptions& options) {
  Simulation s(program, hw, options);
  return s.run();
}

std::string report_to_json(const SimReport& r) {
  nlohmann::json j;
  j["step_time"] = r.step_time;
  j["ranks"] = r.ranks;
  j["nodes"] = r.nodes;
  j["samples_per_s"] = r.samples_per_s;
  j["flops_per_gpu"] = r.flops_per_gpu;
  j["tflops_per_gpu"] = r.tflops_per_gpu;
  j["fraction_of_peak"] = r.fraction_of_peak;
  for (const auto& b : r.busy) j["busy"][b.resource] = b.busy;
  j["peak_memory"] = {{"device_per_gpu", r.peak_device_per_gpu},
                      {"host_per_node", r.peak_host_per_node},
                      {"nvme_per_node", r.peak_nvme_per_node}};
  j["within_budget"] = r.within_budget;
  j["folded"] = r.folded;
  j["slowest_gpu"] = r.slowest_gpu;
  j["activities"] = r.activities;
  j["tasks_run"] = r.tasks_run;
  return j.dump();
}

SimReport report_from_json(const std::string& text) {
  auto j = nlohmann::json::parse(text);
  SimReport r;
  r.step_time = j.at("step_time");
  r.ranks = j.at("ranks");
  r.nodes = j.at("nodes");
  r.samples_per_s = j.at("samples_per_s");
  r.flops_per_gpu = j.at("flops_per_gpu");
  r.tflops_per_gpu = j.at("tflops_per_gpu");
  r.fraction_of_peak = j.at("fraction_of_peak");
  for (const char* name : {"gpu", "pcie_h2d", "pcie_d2h", "nvme_read", "nvme_write", "comm", "nic", "cpu"})
    if (j.contains("busy") && j["busy"].contains(name)) r.busy.push_back({name, j["busy"][name]});
  r.peak_device_per_gpu = j.at("peak_memory").at("device_per_gpu");
  r.peak_host_per_node = j.at("peak_memory").at("host_per_node");
  r.peak_nvme_per_node = j.at("peak_memory").at("nvme_per_node");
  r.within_budget = j.at("within_budget");
  r.folded = j.at("folded");
  r.slowest_gpu = j.value("slowest_gpu", 1.0);
  r.activities = j.at("activities");
  r.tasks_run = j.at("tasks_run");
  return r;
}

}  // namespace zinf::sim
