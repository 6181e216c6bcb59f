#include "sim/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_map>

#include "sim/cost_model.hpp"
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
  std::vector<sg4::Semaphore*> waiting;
};

struct RankState {
  std::vector<int32_t> pending;                 // dependencies not yet ended, per task
  std::vector<uint8_t> done;                    // 1 once the task has ended (for the deadlock report)
  // A lane whose next task is not ready blocks on its semaphore until the task's last dependency
  // ends (cheaper than suspending the actor, which walks all its activities in SimGrid 3.32).
  std::array<sg4::SemaphorePtr, kLanes> wake{};
  std::array<int32_t, kLanes> waiting_for{};    // task a blocked lane waits for, or -1
  std::array<double, kLanes> busy{};            // seconds each lane spent running tasks
  // A lane of several slots (Program::lane_slots) runs one actor per slot. Its tasks start in id
  // order: an actor whose task is not next waits on its own semaphore in `turn` until it is.
  struct SlotLane {
    size_t claimed = 0, started = 0;
    int running = 0;
    double busy_since = 0;
    std::vector<std::pair<size_t, sg4::Semaphore*>> turn;
  };
  std::array<SlotLane, kLanes> slot_lanes{};
  std::array<double, kTiers> live{};
  std::array<double, kTiers> peak{};
  double flops = 0;
  double compute_since_sync = 0;                // kernel seconds since the rank's last collective
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
              program.partitioning() == core::Partitioning::BandwidthCentric),
        sim_ranks_(fold_ ? hw.node.gpus : ranks_),
        platform_(hw, fold_ ? 2 : nodes_),
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
    node_live_.assign(static_cast<size_t>(platform_.nodes()), {});
    node_peak_.assign(static_cast<size_t>(platform_.nodes()), {});
    for (int r = 0; r < sim_ranks_; ++r)
      for (int k = 0; k < kTiers; ++k) {
        auto n = static_cast<size_t>(platform_.node_of(r));
        node_live_[n][static_cast<size_t>(k)] += ranks_state_[static_cast<size_t>(r)].live[static_cast<size_t>(k)];
        node_peak_[n][static_cast<size_t>(k)] = node_live_[n][static_cast<size_t>(k)];
      }
  }

  SimReport run() {
    for (int r = 0; r < sim_ranks_; ++r)
      for (int l = 0; l < kLanes; ++l) {
        if (lane_tasks_[static_cast<size_t>(l)].empty()) continue;
        auto* host = static_cast<Lane>(l) == Lane::CpuOptim ? platform_.cpu_of(r) : platform_.gpu(r);
        ranks_state_[static_cast<size_t>(r)].wake[static_cast<size_t>(l)] = sg4::Semaphore::create(0);
        const int slots = std::max(1, program_.lane_slots(static_cast<Lane>(l)));
        if (slots == 1) {
          ++lanes_running_;
          sg4::Actor::create(core::to_string(static_cast<Lane>(l)), host, [this, r, l] {
            run_lane(r, static_cast<Lane>(l));
            --lanes_running_;
          });
          continue;
        }
        for (int k = 0; k < slots; ++k) {
          ++lanes_running_;
          sg4::Actor::create(core::to_string(static_cast<Lane>(l)), host, [this, r, l] {
            run_lane_slot(r, static_cast<Lane>(l));
            --lanes_running_;
          });
        }
      }
    start_background();
    platform_.engine().run();
    // Lanes still waiting when the engine stops (SimGrid reports a deadlock), or a clock past what
    // a double resolves, mean the simulation did not finish: an error, never a step time.
    if (lanes_running_ != 0 || !std::isfinite(sg4::Engine::get_clock()))
      throw std::runtime_error(fmt::format(
          "the simulation did not finish ({} lanes still waiting, clock {} s): the hardware profile's rates are "
          "too small for SimGrid to resolve, or the Program has a cycle{}",
          int(lanes_running_), sg4::Engine::get_clock(), describe_waits()));
    return report();
  }

private:
  void run_lane(int rank, Lane lane) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    const auto li = static_cast<size_t>(lane);
    for (int32_t id : lane_tasks_[li]) {
      if (rs.pending[static_cast<size_t>(id)] > 0) {
        rs.waiting_for[li] = id;
        block(rs.wake[li].get());
      }
      const double start = sg4::Engine::get_clock();
      const double end = run_task(rank, id);
      rs.busy[li] += end - start;
    }
  }

  // One actor of a lane with several slots: it claims the lane's next task, waits until the task
  // before it has started and its dependencies have ended, and runs it while the lane's other
  // actors run theirs (NVMe transfers in flight together share the drive's bandwidth).
  void run_lane_slot(int rank, Lane lane) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    const auto li = static_cast<size_t>(lane);
    auto& L = rs.slot_lanes[li];
    const auto& ids = lane_tasks_[li];
    auto my_turn = sg4::Semaphore::create(0);
    while (L.claimed < ids.size()) {
      const size_t mine = L.claimed++;
      const int32_t id = ids[mine];
      if (L.started != mine) {
        L.turn.emplace_back(mine, my_turn.get());
        block(my_turn.get());
      }
      if (rs.pending[static_cast<size_t>(id)] > 0) {
        rs.waiting_for[li] = id;
        block(rs.wake[li].get());
      }
      ++L.started;
      // Out of `turn` before the release: releasing is a simcall, during which another slot of the
      // lane may run and append to `turn` (an iterator held across it would be stale).
      for (auto it = L.turn.begin(); it != L.turn.end(); ++it)
        if (it->first == L.started) {
          auto* next = it->second;
          L.turn.erase(it);
          unblock(next);
          break;
        }
      const double start = sg4::Engine::get_clock();
      if (L.running++ == 0) L.busy_since = start;
      const double end = run_task(rank, id);
      if (--L.running == 0) rs.busy[li] += end - L.busy_since;
    }
  }

  // Runs task `id` on `rank` now: its memory events, its work, its timeline event. Returns its end.
  double run_task(int rank, int32_t id) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    const Task& t = program_.task(id);
    const double start = sg4::Engine::get_clock();
    memory(rank, program_.allocs(t, rank), +1);
    if (program_.active(t, rank)) execute(t, rank);
    const double end = sg4::Engine::get_clock();
    memory(rank, program_.frees(t, rank), -1);
    last_end_ = std::max(last_end_, end);
    ++tasks_run_;
    if (core::is_compute(t.kind) && program_.active(t, rank)) rs.flops += t.flops;
    if (rs.record && t.kind != TaskKind::Alloc && t.kind != TaskKind::Free && program_.active(t, rank))
      timeline_.events.push_back({rank, t.lane, t.id, t.kind, program_.label(t), start, end, t.bytes, t.flops});
    complete(rank, id);
    return end;
  }

  void complete(int rank, int32_t id) {
    auto& rs = ranks_state_[static_cast<size_t>(rank)];
    rs.done[static_cast<size_t>(id)] = 1;
    const auto b = static_cast<size_t>(dependents_begin_[static_cast<size_t>(id)]);
    const auto e = static_cast<size_t>(dependents_begin_[static_cast<size_t>(id) + 1]);
    for (size_t i = b; i < e; ++i) {
      const int32_t d = dependents_[i];
      if (--rs.pending[static_cast<size_t>(d)] == 0) {
        const auto l = static_cast<size_t>(program_.task(d).lane);
        if (rs.waiting_for[l] == d) {
          rs.waiting_for[l] = -1;
          unblock(rs.wake[l].get());
        }
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

  // A lane actor waits on `s`; whoever releases it calls unblock(). `blocked_` counts the waiting,
  // so that lanes_running_ == blocked_ means no lane can ever move again.
  void block(sg4::Semaphore* s) {
    ++blocked_;
    s->acquire();
  }
  void unblock(sg4::Semaphore* s) {
    --blocked_;
    s->release();
  }

  // For an unfinished simulation: on the first rank with a blocked lane, the task each lane waits
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
  // ceil(b) actors that keep an exec running, each weighing b / ceil(b) of a thread in SimGrid's
  // max-min share of the cores, until the last lane ends: the ranks' threads get what a fair
  // scheduler gives them beside b other threads, as while the profile was measured.
  void start_background() {
    const double b = platform_.hw().node.background_threads;
    if (b <= 0 || !platform_.cores(0)) return;
    background_ = true;
    const int actors = static_cast<int>(std::ceil(b));
    for (int n = 0; n < platform_.nodes(); ++n) {
      auto* pool = platform_.cores(n);
      if (!pool) continue;
      for (int i = 0; i < actors; ++i)
        sg4::Actor::create("background", pool, [this, pool, weight = b / actors] {
          // Short execs back to back: the share is continuous, and the last one ends at most a
          // millisecond after the step (whose time is the last task's end). They stop too once
          // every lane is blocked on another (a deadlock), so that SimGrid sees it and run() says so.
          while (lanes_running_ > blocked_)
            sg4::Exec::init()->set_host(pool)->set_flops_amount(1e-3)->set_priority(weight)->set_bound(weight)->start()->wait();
        });
    }
  }

  // Work a thread of the rank does on its node's shared core pool: `seconds` as the profile
  // measured it (one thread at the profiled core share), run as an exec SimGrid time-shares with
  // every other thread on those cores. Without a shared pool, on `fallback` for `seconds`.
  void host_work(int rank, sg4::Host* fallback, double seconds) {
    if (auto* pool = platform_.cores(platform_.node_of(rank))) {
      if (seconds <= 0) return;
      ++activities_;
      sg4::Exec::init()->set_host(pool)->set_flops_amount(seconds * core_share_)->set_bound(1.0)->start()->wait();
      return;
    }
    wait_exec(fallback, seconds);
  }

  void wait_exec(sg4::Host* host, double seconds) {
    if (seconds <= 0) return;
    ++activities_;
    sg4::Exec::init()->set_host(host)->set_flops_amount(seconds * host->get_speed())->start()->wait();
  }

  void latency(double seconds) {
    if (seconds <= 0) return;
    ++activities_;
    sg4::this_actor::sleep_for(seconds);
  }

  void flow(sg4::Host* from, sg4::Host* to, double bytes, double lat) {
    if (bytes <= 0) return;
    latency(lat);
    ++activities_;
    sg4::Comm::sendto_async(from, to, static_cast<uint64_t>(bytes))->wait();
  }

  // NVMe <-> GPU over GPUDirect Storage: the drives' I/O and the PCIe flow to the GPU run together
  // (the transfer streams in chunks), so it takes the longer of the two; host memory is not touched.
  void gds_transfer(const Task& t, int rank) {
    auto* endpoint = platform_.gds_endpoint(platform_.node_of(rank));
    if (!endpoint)
      throw std::runtime_error(fmt::format("{}: moves NVMe <-> device directly, but the profile has no node.gds path",
                                           program_.label(t)));
    const bool read = t.kind == TaskKind::NvmeRead;
    auto* disk = platform_.nvme(platform_.node_of(rank));
    latency(cost_.nvme_in_step(read) * cost_.nvme_latency());
    activities_ += 2;
    const auto bytes = static_cast<sg_size_t>(t.bytes * cost_.nvme_in_step(read));
    auto io = read ? disk->read_async(bytes) : disk->write_async(bytes);
    auto comm = read ? sg4::Comm::sendto_async(endpoint, platform_.gpu(rank), static_cast<uint64_t>(t.bytes))
                     : sg4::Comm::sendto_async(platform_.gpu(rank), endpoint, static_cast<uint64_t>(t.bytes));
    io->wait();
    comm->wait();
  }

  void execute(const Task& t, int rank) {
    switch (t.kind) {
      case TaskKind::Forward:
      case TaskKind::Recompute:
      case TaskKind::Backward: {
        const double seconds = cost_.kernel_seconds(program_, t);
        ranks_state_[static_cast<size_t>(rank)].compute_since_sync += seconds;
        host_work(rank, platform_.gpu(rank), seconds);
        break;
      }
      case TaskKind::CopyH2D:
      case TaskKind::CopyD2H:
        // A host<->device copy on the CPU backend is a memcpy by the lane's thread, not a DMA.
        if (platform_.cores(platform_.node_of(rank))) {
          if (t.bytes > 0) host_work(rank, nullptr, cost_.pcie_latency() + t.bytes / platform_.pcie_bandwidth());
        } else if (t.kind == TaskKind::CopyH2D) {
          flow(platform_.cpu_of(rank), platform_.gpu(rank), t.bytes, cost_.pcie_latency());
        } else {
          flow(platform_.gpu(rank), platform_.cpu_of(rank), t.bytes, cost_.pcie_latency());
        }
        break;
      case TaskKind::NvmeRead:
      case TaskKind::NvmeWrite: {
        if (t.bytes <= 0) break;
        if (t.from == core::Tier::Device || t.to == core::Tier::Device) {
          gds_transfer(t, rank);
          break;
        }
        auto* disk = platform_.nvme(platform_.node_of(rank));
        const bool read = t.kind == TaskKind::NvmeRead;
        const double slowdown = cost_.nvme_in_step(read);
        double amount = t.bytes * slowdown;
        if (cost_.nvme_serial_requests())  // the latency occupies the drive: as many bytes as it could move meanwhile
          amount += slowdown * cost_.nvme_latency() * (read ? disk->get_read_bandwidth() : disk->get_write_bandwidth());
        else
          latency(slowdown * cost_.nvme_latency());
        ++activities_;
        auto bytes = static_cast<sg_size_t>(amount);
        (t.kind == TaskKind::NvmeRead ? disk->read_async(bytes) : disk->write_async(bytes))->wait();
        break;
      }
      case TaskKind::AllGather:
      case TaskKind::ReduceScatter:
      case TaskKind::AllReduce:
      case TaskKind::Broadcast:
      case TaskKind::Reduce:
        collective(t, rank);
        // A CPU-backend device's widening or scaling beside the transfer (0 on a GPU profile).
        if (const double s = core::collective_host_seconds(program_, t, rank, platform_.hw()); s > 0)
          host_work(rank, platform_.gpu(rank), s);
        // The copies the Program states beside the transfer (a DeepSpeed release's list collectives),
        // on the collective's stream.
        latency(core::collective_device_seconds(program_, t, platform_.hw()));
        break;
      case TaskKind::GradNorm:
        if (t.lane == Lane::CpuOptim)
          host_work(rank, platform_.cpu_of(rank), cost_.cpu_stream_seconds(t.bytes));
        else
          host_work(rank, platform_.gpu(rank), cost_.device_stream_seconds(t.bytes));
        break;
      case TaskKind::OptimizerStep:
        if (t.lane == Lane::CpuOptim)  // the fused update, then any further passes over host memory
          host_work(rank, platform_.cpu_of(rank),
                    cost_.cpu_adam_seconds(static_cast<double>(t.sg_count)) +
                        cost_.cpu_stream_seconds(core::optimizer_extra_host_bytes(t)));
        else
          host_work(rank, platform_.gpu(rank), cost_.kernel_seconds(program_, t));
        break;
      case TaskKind::Alloc:
      case TaskKind::Free: break;
    }
  }

  void collective(const Task& t, int rank) {
    if (t.participants > 1 && t.participants < ranks_ && t.owner < 0) return group_collective(t, rank);
    const int members = t.owner >= 0 ? 1 : sim_ranks_;
    if (members < 2 || t.participants < 2 || t.bytes <= 0) return;
    if (t.participants != ranks_)
      throw std::runtime_error("collective task " + std::to_string(t.id) + " has " + std::to_string(t.participants) +
                               " participants; the simulator supports collectives over all " +
                               std::to_string(ranks_) + " ranks or over groups of consecutive ranks inside a node");
    auto& rv = rendezvous_[int64_t{t.id} << 20];
    auto* wake = ranks_state_[static_cast<size_t>(rank)].wake[static_cast<size_t>(t.lane)].get();
    if (++rv.arrived < members) {
      rv.waiting.push_back(wake);
      block(wake);
      return;
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
      latency(skew * since);
    }
    // Under tensor parallelism T, ZeRO's collectives run in T strided data-parallel groups at once.
    const int stride = program_.tensor_parallel();
    auto phases = collective_phases({t.kind, ranks_, G, t.bytes, std::max(0, t.root), stride}, options_.algorithm,
                                    {cost_.nvlink_latency(), cost_.fabric_latency()});
    // With the profile's NCCL: the call's latency and protocol as NCCL's tuning model prices them,
    // over the data-parallel group (ranks / T) with G / T members in each node.
    if (platform_.hw().nccl.enabled())
      apply_nccl_call(phases, core::collective_call(platform_.hw(), t.kind, t.bytes, ranks_ / stride,
                                                    ranks_ > G ? G / stride : ranks_ / stride));
    if (fold_) phases = fold(phases, G);
    for (const auto& p : phases) {
      const double begin = sg4::Engine::get_clock();
      activities_ += execute_phase(platform_, p);
      if (p.crosses_nodes) fabric_busy_ += sg4::Engine::get_clock() - begin;
    }
    auto waiting = std::move(rv.waiting);
    rendezvous_.erase(int64_t{t.id} << 20);
    for (auto* w : waiting) unblock(w);
  }

  // A collective among `participants` consecutive ranks inside one node (a tensor-parallel group):
  // every group of the node runs its own, at the same time, over the node's NVLink.
  void group_collective(const Task& t, int rank) {
    const int k = t.participants;
    const int G = platform_.gpus_per_node();
    if (G % k != 0 || ranks_ % k != 0)
      throw std::runtime_error("collective task " + std::to_string(t.id) + ": a group of " + std::to_string(k) +
                               " ranks must divide the node's " + std::to_string(G) + " GPUs and the " +
                               std::to_string(ranks_) + " ranks");
    if (t.bytes <= 0) return;
    const int group = rank / k;
    auto& rv = rendezvous_[(int64_t{t.id} << 20) + 1 + group];
    auto* wake = ranks_state_[static_cast<size_t>(rank)].wake[static_cast<size_t>(t.lane)].get();
    if (++rv.arrived < k) {
      rv.waiting.push_back(wake);
      block(wake);
      return;
    }
    auto phases = collective_phases({t.kind, k, k, t.bytes, std::max(0, t.root)}, options_.algorithm,
                                    {cost_.nvlink_latency(), cost_.fabric_latency()});
    if (platform_.hw().nccl.enabled()) apply_nccl_call(phases, core::collective_call(platform_.hw(), t.kind, t.bytes, k, k));
    const int base = group * k;
    for (auto& p : phases) {
      for (auto& f : p.flows) {
        f.src += base;
        f.dst += base;
      }
      activities_ += execute_phase(platform_, p);
    }
    auto waiting = std::move(rv.waiting);
    rendezvous_.erase((int64_t{t.id} << 20) + 1 + group);
    for (auto* w : waiting) unblock(w);
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
      for (const auto& rs : ranks_state_) s += rs.busy[static_cast<size_t>(l)];
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
  int sim_ranks_;  // ranks with actors: all, or node 0's when folded
  Platform platform_;
  CostModel cost_;
  bool background_ = false;
  int lanes_running_ = 0;
  int blocked_ = 0;  // lane actors waiting on a semaphore
  double last_end_ = 0;
  double core_share_;  // of one core, per thread, when the profile was measured (1: no shared pool)
  std::vector<int32_t> dependents_begin_, dependents_;
  std::array<std::vector<int32_t>, kLanes> lane_tasks_;
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
  r.activities = j.at("activities");
  r.tasks_run = j.at("tasks_run");
  return r;
}

}  // namespace zinf::sim
