#include "core/timeline.hpp"

#include "core/json_text.hpp"
#include "core/nccl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <ostream>
#include <unordered_map>

namespace zinf::core {

double Timeline::makespan() const {
  double m = 0;
  for (const auto& e : events) m = std::max(m, e.end);
  return m;
}

namespace {

std::string csv_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

void Timeline::write_csv(std::ostream& out) const {
  out << "rank,lane,task,kind,label,start,end,bytes,flops\n";
  for (const auto& e : events)
    out << fmt::format("{},{},{},{},{},{},{},{},{}\n", e.rank, to_string(e.lane), e.task, to_string(e.kind),
                       csv_quoted(e.label), e.start, e.end, e.bytes, e.flops);
}

void Timeline::write_chrome_trace(std::ostream& out) const {
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  std::map<int, bool> ranks;
  for (const auto& e : events) ranks[e.rank] = true;
  bool first = true;
  auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  for (const auto& [rank, unused] : ranks) {
    (void)unused;
    sep();
    out << fmt::format("{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{},\"args\":{{\"name\":\"rank {}\"}}}}", rank,
                       rank);
    for (int l = 0; l < kLaneCount; ++l) {
      sep();
      out << fmt::format("{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
                         rank, l, to_string(static_cast<Lane>(l)));
      sep();
      out << fmt::format(
          "{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{\"sort_index\":{}}}}}", rank, l,
          l);
    }
  }
  for (const auto& e : events) {
    sep();
    out << fmt::format(
        "{{\"name\":{},\"cat\":\"{}\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
        "\"args\":{{\"task\":{},\"bytes\":{},\"flops\":{}}}}}",
        json_quoted(e.label), to_string(e.kind), e.rank, static_cast<int>(e.lane), e.start * 1e6,
        (e.end - e.start) * 1e6, e.task, e.bytes, e.flops);
  }
  out << "\n]}\n";
}

namespace {

// Static + live bytes per tier of `rank` at the worst moment, allocations at a task's start and
// frees at its end (frees first at equal times), with the live bytes by what the buffers hold at
// that moment.
PeakComposition composition_of(const Program& p, int rank, const std::vector<double>& start, const std::vector<double>& end) {
  struct Point {
    double time;
    int order;  // 0 free, 1 alloc
    Tier tier;
    MemUse use;
    double bytes;
  };
  std::vector<Point> pts;
  // A free names its buffer; its allocation says what it holds. The planner numbers buffers from
  // 0, so a table does; a Program built by hand may not, and gets a map.
  int64_t max_buffer = -1;
  size_t n_allocs = 0;
  for (const auto& t : p.tasks())
    for (const auto& a : p.allocs(t, rank)) {
      max_buffer = std::max(max_buffer, a.buffer);
      ++n_allocs;
    }
  const bool dense = max_buffer < int64_t(4 * n_allocs + 1024) && max_buffer >= -1;
  std::vector<MemUse> table(dense ? static_cast<size_t>(max_buffer + 1) : 0, MemUse::Unstated);
  std::unordered_map<int64_t, MemUse> sparse;
  for (const auto& t : p.tasks())
    for (const auto& a : p.allocs(t, rank)) {
      if (dense && a.buffer >= 0) table[static_cast<size_t>(a.buffer)] = a.use;
      else sparse[a.buffer] = a.use;
    }
  auto use_of = [&](int64_t buffer) {
    if (dense && buffer >= 0 && buffer <= max_buffer) return table[static_cast<size_t>(buffer)];
    const auto it = sparse.find(buffer);
    return it == sparse.end() ? MemUse::Unstated : it->second;
  };
  for (const auto& t : p.tasks()) {
    const size_t i = static_cast<size_t>(t.id);
    for (const auto& a : p.allocs(t, rank)) pts.push_back({start[i], 1, a.tier, a.use, a.bytes});
    for (const auto& f : p.frees(t, rank)) pts.push_back({end[i], 0, f.tier, use_of(f.buffer), -f.bytes});
  }
  std::stable_sort(pts.begin(), pts.end(),
                   [](const Point& a, const Point& b) { return a.time != b.time ? a.time < b.time : a.order < b.order; });
  const PerTier& st = p.static_bytes(rank);
  PeakComposition out;
  std::array<std::array<double, kMemUseCount>, 3> live{};
  PerTier total = st;
  for (int t = 0; t < 3; ++t) {
    out[static_cast<size_t>(t)].bytes = st[static_cast<size_t>(t)];
    out[static_cast<size_t>(t)].rank = rank;
  }
  for (const auto& pt : pts) {
    const auto ti = static_cast<size_t>(pt.tier);
    at(total, pt.tier) += pt.bytes;
    live[ti][static_cast<size_t>(pt.use)] += pt.bytes;
    if (at(total, pt.tier) > out[ti].bytes) {
      out[ti].bytes = at(total, pt.tier);
      out[ti].live = live[ti];
    }
  }
  return out;
}

PerTier peak_of(const Program& p, int rank, const std::vector<double>& start, const std::vector<double>& end) {
  const PeakComposition c = composition_of(p, rank, start, end);
  return {c[0].bytes, c[1].bytes, c[2].bytes};
}

}  // namespace

TimelineCheck check_timeline(const Program& p, const Timeline& tl, double tol) {
  TimelineCheck out;
  auto error = [&](std::string msg) {
    if (out.errors.size() < 50) out.errors.push_back(std::move(msg));
  };
  std::map<int, std::vector<const TimelineEvent*>> by_rank;
  for (const auto& e : tl.events) by_rank[e.rank].push_back(&e);
  const auto& tasks = p.tasks();
  for (const auto& [rank, evs] : by_rank) {
    std::vector<const TimelineEvent*> of(tasks.size(), nullptr);
    for (const auto* e : evs) {
      if (e->task < 0 || static_cast<size_t>(e->task) >= tasks.size()) {
        error(fmt::format("rank {}: task {} is not in the program", rank, e->task));
        continue;
      }
      if (of[static_cast<size_t>(e->task)]) error(fmt::format("rank {}: task {} appears twice", rank, e->task));
      of[static_cast<size_t>(e->task)] = e;
      if (e->end + tol < e->start) error(fmt::format("rank {}: task {} ends before it starts", rank, e->task));
    }
    // End time of every task on this rank; an absent no-op ends when its dependencies have.
    std::vector<double> end(tasks.size(), 0.0);
    for (const auto& t : tasks) {
      const auto* e = of[static_cast<size_t>(t.id)];
      double ready = 0;
      for (int32_t d : p.deps(t)) ready = std::max(ready, end[static_cast<size_t>(d)]);
      if (!e) {
        if (p.active(t, rank) && t.kind != TaskKind::Alloc && t.kind != TaskKind::Free)
          error(fmt::format("rank {}: task {} ({}) did not run", rank, t.id, p.label(t)));
        end[static_cast<size_t>(t.id)] = ready;
        continue;
      }
      if (e->start + tol < ready)
        error(fmt::format("rank {}: task {} ({}) started at {} before its dependencies ended at {}", rank, t.id,
                          p.label(t), e->start, ready));
      end[static_cast<size_t>(t.id)] = e->end;
    }
    // A lane runs at most its slots' worth of tasks at once (one, but for the NVMe lanes).
    for (int l = 0; l < kLaneCount; ++l) {
      const auto slots = static_cast<size_t>(std::max(1, p.lane_slots(static_cast<Lane>(l))));
      std::vector<const TimelineEvent*> lane;
      for (const auto* e : evs)
        if (static_cast<int>(e->lane) == l && e->end > e->start) lane.push_back(e);
      std::sort(lane.begin(), lane.end(), [](auto* a, auto* b) { return a->start < b->start; });
      std::vector<const TimelineEvent*> running;  // started and not yet ended, at the current start
      for (const auto* e : lane) {
        std::erase_if(running, [&](const TimelineEvent* o) { return o->end <= e->start + tol; });
        if (running.size() >= slots)
          error(fmt::format("rank {}: lane {} of {} slot{} runs tasks {} and {} at once", rank,
                            to_string(static_cast<Lane>(l)), slots, slots == 1 ? "" : "s", running.front()->task, e->task));
        running.push_back(e);
      }
    }
    // Memory: allocations at start, frees at end; an absent no-op at its dependencies' end.
    std::vector<double> starts(tasks.size());
    for (const auto& t : tasks) {
      const auto* e = of[static_cast<size_t>(t.id)];
      starts[static_cast<size_t>(t.id)] = e ? e->start : end[static_cast<size_t>(t.id)];
    }
    const PerTier peak = peak_of(p, rank, starts, end);
    for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme})
      if (at(peak, t) > at(p.budget(), t) * (1 + 1e-9))
        out.errors.push_back(fmt::format("rank {}: {} peaks at {:.0f} bytes, over its budget of {:.0f}", rank, to_string(t),
                          at(peak, t), at(p.budget(), t)));
    out.peak_bytes.push_back(peak);
  }
  return out;
}

namespace {

Kernel task_kernel(const Program& p, const Task& t) {
  const bool backward = t.kind == TaskKind::Backward;
  if (t.op >= 0 && p.ops()[static_cast<size_t>(t.op)].kind == "attention")
    return backward ? Kernel::AttentionBackward : Kernel::AttentionForward;
  if (t.gemm_dim > 0) return backward ? Kernel::GemmBackward : Kernel::GemmForward;
  return Kernel::Elementwise;
}

}  // namespace

double task_kernel_seconds(const GpuSpec& gpu, const Program& p, const Task& t) {
  return kernel_seconds(gpu, task_kernel(p, t), t.flops, t.bytes, t.gemm_dim, gpu.in_step(in_step_key(p, t)));
}

double task_kernel_threads(const GpuSpec& gpu, const Program& p, const Task& t) {
  return kernel_threads(gpu, task_kernel(p, t), t.gemm_dim);
}

std::string in_step_key(const Program& p, const Task& t) {
  if (t.kind == TaskKind::OptimizerStep) return "optimizer";
  const std::string op = t.op >= 0 ? p.ops()[static_cast<size_t>(t.op)].kind : std::string("other");
  return op + (t.kind == TaskKind::Backward ? "_backward" : "_forward");
}

namespace {

// The ranks one group of a collective spans (core::collective_groups): the data-parallel group,
// an expert unit's expert-data-parallel group, or a tensor- or expert-parallel group.
double group_ranks(const Program& p, const Task& t) { return collective_groups(p, t).members; }

}  // namespace

double collective_device_seconds(const Program& p, const Task& t, const HwProfile& hw) {
  int passes = 0;
  if (t.kind == TaskKind::AllGather && t.data == Data::Param) passes = p.gather_device_passes();
  if (t.kind == TaskKind::ReduceScatter && t.data == Data::Grad) passes = p.reduce_device_passes();
  const auto& g = hw.node.gpu;
  if (passes == 0 || t.bytes <= 0 || g.memory_bandwidth <= 0) return 0;
  // t.bytes counts the whole buffer at 2 bytes an element; the device holds it at its working size.
  const double buffer = t.bytes / 2 * g.working_bytes;
  return passes * buffer / (g.memory_bandwidth * g.elementwise_efficiency);
}

double collective_host_seconds(const Program& p, const Task& t, int rank, const HwProfile& hw) {
  const auto& n = hw.node;
  if (!n.device_shares_host_cores || n.gpu.memory_bandwidth <= 0 || t.bytes <= 0) return 0;
  // t.bytes counts the whole buffer at 2 bytes an element (Task::bytes); the device works at w.
  const double elems = t.bytes / 2, w = n.gpu.working_bytes, parts = group_ranks(p, t);
  double moved = 0;  // bytes read + written
  if ((t.kind == TaskKind::AllGather || t.kind == TaskKind::Broadcast) && t.data == Data::Param) {
    // Widened: read bf16, write w (one rank straight from its shard, others in place after the
    // gather); at a working size of 2 bytes one rank's shard is copied in instead.
    if (w > 2) moved += elems * (2 + w);
    else if (t.kind == TaskKind::AllGather && parts <= 1) moved += 2 * elems * 2;
  } else if ((t.kind == TaskKind::ReduceScatter || t.kind == TaskKind::Reduce) && t.data == Data::Grad) {
    // What a rank keeps is scaled in place by 1 / (ranks x micro-batches): its shard, or with a
    // reduce the owner the whole unit. One rank keeps its gradient buffer as it is (no copy), and
    // with one micro-batch too there is nothing to scale.
    const bool scaled = parts > 1 || p.micro_batches() > 1;
    if (t.kind == TaskKind::ReduceScatter) moved += scaled ? 2 * elems / parts * w : 0;
    else if (scaled && (t.root < 0 || t.root == rank)) moved += 2 * elems * w;
  }
  return moved / n.gpu.memory_bandwidth;
}

namespace {

// A collective's transfer time at nominal rates (latency apart), and its per-hop latency, as the
// simulator's default hierarchical algorithm moves it (collective_seconds' comment).
struct CollectiveCost {
  double transfer = 0;
  double latency = 0;
};

CollectiveCost collective_cost(const HwProfile& hw, TaskKind kind, double bytes, int parts, int per_node) {
  const auto& n = hw.node;
  const bool rooted = kind == TaskKind::Broadcast || kind == TaskKind::Reduce;
  // One ring (or chain) of k members on `bw` per member, `lat` per step; `f` passes (all-reduce: 2).
  auto ring = [rooted](double k, double size, double bw, double lat, double f) {
    if (k <= 1) return CollectiveCost{};
    return rooted ? CollectiveCost{size / bw, (k - 1) * lat} : CollectiveCost{f * (k - 1) / k * size / bw, f * (k - 1) * lat};
  };
  auto plus = [](CollectiveCost a, CollectiveCost b, double times_a = 1) {
    return CollectiveCost{times_a * a.transfer + b.transfer, times_a * a.latency + b.latency};
  };
  const double all_reduce = kind == TaskKind::AllReduce ? 2 : 1;
  if (parts <= 1) return {};
  double fabric = n.nic_bandwidth_total() / std::max(1, n.gpus);
  if (n.pcie_bandwidth > 0) fabric = std::min(fabric, n.pcie_bandwidth);
  const double lat = hw.fabric.latency;
  if (kind == TaskKind::AllToAll) {
    // Each member sends bytes / parts to every other at once (sim/collectives.hpp): the L - 1
    // shares for its own node over its NVLink port, the parts - L others over its share of the NICs.
    const double share = bytes / parts, L = std::min(per_node, parts);
    const double inside = (L - 1) * share / n.nvlink_bandwidth, across = (parts - L) * share / fabric;
    return {std::max(inside, across), parts > L ? lat : n.nvlink_latency};
  }
  if (per_node >= parts) return ring(parts, bytes, n.nvlink_bandwidth, n.nvlink_latency, all_reduce);
  if (per_node < 1 || parts % per_node != 0)
    return ring(parts, bytes, std::min(n.nvlink_bandwidth, fabric), lat, all_reduce);
  const double L = per_node, N = double(parts) / L;
  const auto inside = ring(L, bytes, n.nvlink_bandwidth, n.nvlink_latency, 1);
  if (rooted) {
    // One chain per group crosses each node boundary from the group's root-side GPU: the groups'
    // senders are consecutive GPUs, gpus / nics of them to a NIC.
    const int senders = std::max(1, n.gpus / per_node), per_nic = std::max(1, n.gpus / std::max(1, n.nics));
    const double nics_used = std::ceil(double(senders) / per_nic);
    double chain = n.nic_bandwidth * std::min(1.0, nics_used / senders);
    if (n.pcie_bandwidth > 0) chain = std::min(chain, n.pcie_bandwidth);
    return plus(inside, ring(N, bytes, chain, lat, 1));
  }
  // Reduce-scatter inside then across (all-gather the reverse); an all-reduce reduce-scatters
  // inside, all-reduces its 1 / L across and all-gathers inside.
  return plus(inside, ring(N, bytes / L, fabric, lat, all_reduce), kind == TaskKind::AllReduce ? 2 : 1);
}

}  // namespace

NcclCall collective_call(const HwProfile& hw, TaskKind kind, double bytes, int parts, int per_node) {
  NcclCall call;
  const auto cost = collective_cost(hw, kind, bytes, parts, per_node);
  if (parts <= 1) return call;
  // NCCL's tuning model prices its collectives, not the grouped sends an all-to-all is made of.
  if (!hw.nccl.enabled() || kind == TaskKind::AllToAll) {
    call.latency = cost.latency;
    call.seconds = cost.latency + cost.transfer;
    return call;
  }
  const int nodes = per_node >= parts || per_node < 1 ? 1 : (parts + per_node - 1) / per_node;
  return nccl_call(hw.nccl, kind, bytes, parts, nodes, hw.node.nvlink_bandwidth > 0, cost.transfer);
}

double collective_seconds(const HwProfile& hw, TaskKind kind, double bytes, int parts, int per_node) {
  return collective_call(hw, kind, bytes, parts, per_node).seconds;
}

double nominal_duration(const Program& p, const Task& t, int rank, const HwProfile& hw) {
  if (!p.active(t, rank)) return 0;
  const auto& n = hw.node;
  const double G = std::max(1, n.gpus);
  switch (t.kind) {
    case TaskKind::Forward:
    case TaskKind::Recompute:
    case TaskKind::Backward:
      return task_kernel_seconds(n.gpu, p, t);
    case TaskKind::CopyH2D:
    case TaskKind::CopyD2H: return n.pcie_latency + t.bytes / n.pcie_bandwidth_all_active();
    case TaskKind::NvmeRead:
    case TaskKind::NvmeWrite: {
      const bool read = t.kind == TaskKind::NvmeRead;
      const double in_step = read ? n.nvme_read_in_step : n.nvme_write_in_step;
      const double disk = in_step * (n.nvme_latency + t.bytes / ((read ? n.nvme_read_bandwidth : n.nvme_write_bandwidth) / G));
      // GPUDirect Storage (a device end): the drives and the switch's peer-to-peer path, pipelined.
      if (t.from == Tier::Device || t.to == Tier::Device)
        return n.has_gds() ? std::max(disk, t.bytes / n.gds_bandwidth_all_active()) : disk;
      return disk;
    }
    case TaskKind::AllGather:
    case TaskKind::ReduceScatter:
    case TaskKind::AllReduce:
    case TaskKind::Broadcast:
    case TaskKind::Reduce:
    case TaskKind::AllToAll: {
      // Groups at once (core::collective_groups), each across nodes as soon as its ranks are.
      const CollectiveGroups g = collective_groups(p, t);
      const int parts = g.members;
      const double host = collective_host_seconds(p, t, rank, hw) + collective_device_seconds(p, t, hw);
      if (parts <= 1) return host;
      // Consecutive ranks fill a node; strided groups (stride s) have G / s members in each.
      const int per_node = g.consecutive ? std::min(parts, n.gpus) : std::max(1, n.gpus / g.stride);
      return host + collective_seconds(hw, t.kind, t.bytes, parts, per_node);
    }
    case TaskKind::GradNorm:  // the squares were summed as each gradient shard became final: no work here
      return 0;
    case TaskKind::OptimizerStep:
      if (t.lane == Lane::CpuOptim)
        return double(t.sg_count) / (n.cpu_adam_rate / G) + optimizer_extra_host_bytes(t) / (n.host_memory_bandwidth / G);
      return task_kernel_seconds(n.gpu, p, t);
    case TaskKind::Alloc:
    case TaskKind::Free: return 0;
  }
  return 0;
}

namespace {

// Schedules the ranks in `sim` together: per-rank lanes, collectives synchronized over them.
// Start and end of every task on each simulated rank, stored task-major so that a task's ranks
// sit together (owner-based programs schedule hundreds of ranks).
struct Schedule {
  size_t ranks = 1;
  std::vector<double> start, end;  // [task * ranks + row]
  double s(size_t task, size_t row) const { return start[task * ranks + row]; }
  double e(size_t task, size_t row) const { return end[task * ranks + row]; }
};

// The part of a task's nominal duration that is latency, not transfer: what tasks overlapping on
// a lane of several slots do not share (for NVMe tasks, the drive's latency; 0 for the others).
double overlappable_latency(const Task& t, const HwProfile& hw) {
  const auto& n = hw.node;
  // Requests the drive serves one after another: its latency is busy time, shared like the transfer.
  if ((t.kind != TaskKind::NvmeRead && t.kind != TaskKind::NvmeWrite) || n.nvme_serial_requests) return 0;
  return (t.kind == TaskKind::NvmeRead ? n.nvme_read_in_step : n.nvme_write_in_step) * n.nvme_latency;
}

// A lane of one simulated rank. With one slot it is a serial resource. With K slots (the NVMe
// lanes, Program::lane_slots) tasks start in id order, at most K at once, and their latencies
// overlap while their transfers share the lane's bandwidth first come, first served: a task ends
// when its transfer, queued behind the transfers started before it, is done.
struct LaneState {
  std::vector<double> slot_free;  // end of the task each slot last ran
  double last_start = 0;          // tasks start in id order
  double transfer_free = 0;       // when the lane's bandwidth is next free
};

Schedule list_schedule(const Program& p, const HwProfile& hw, const std::vector<int>& sim) {
  const auto& tasks = p.tasks();
  const size_t S = sim.size();
  Schedule out;
  out.ranks = S;
  out.start.assign(tasks.size() * S, 0.0);
  out.end.assign(tasks.size() * S, 0.0);
  std::vector<LaneState> lanes(S * kLaneCount);
  for (size_t r = 0; r < S; ++r)
    for (int l = 0; l < kLaneCount; ++l)
      lanes[r * kLaneCount + static_cast<size_t>(l)].slot_free.assign(
          static_cast<size_t>(std::max(1, p.lane_slots(static_cast<Lane>(l)))), 0.0);
  std::vector<double> ready(S);
  for (const auto& t : tasks) {
    const auto li = static_cast<size_t>(t.lane);
    const size_t base = static_cast<size_t>(t.id) * S;
    double start_all = 0;
    for (size_t r = 0; r < S; ++r) {
      const auto& lane = lanes[r * kLaneCount + li];
      ready[r] = std::max(lane.last_start, *std::min_element(lane.slot_free.begin(), lane.slot_free.end()));
    }
    for (int32_t d : p.deps(t)) {
      const double* de = &out.end[static_cast<size_t>(d) * S];
      for (size_t r = 0; r < S; ++r) ready[r] = std::max(ready[r], de[r]);
    }
    for (size_t r = 0; r < S; ++r) start_all = std::max(start_all, ready[r]);
    const bool sync = is_collective(t.kind);
    // Every rank that does the task takes the same time; the others pass through it.
    const double d = nominal_duration(p, t, t.owner >= 0 ? t.owner : sim[0], hw);
    const double lat = std::min(d, overlappable_latency(t, hw));
    for (size_t r = 0; r < S; ++r) {
      auto& lane = lanes[r * kLaneCount + li];
      const double st = sync ? start_all : ready[r];
      double en = st;
      if (p.active(t, sim[r]) && lane.slot_free.size() == 1) {
        en = st + d;
      } else if (p.active(t, sim[r]) && d > 0) {
        en = std::max(st + lat, lane.transfer_free) + (d - lat);
        lane.transfer_free = en;
      }
      out.start[base + r] = st;
      out.end[base + r] = en;
      lane.last_start = st;
      *std::min_element(lane.slot_free.begin(), lane.slot_free.end()) = en;
    }
  }
  return out;
}

// Bandwidth-centric programs are symmetric: rank 0 stands for every rank. Owner-based ones differ
// per rank and are scheduled whole.
std::vector<int> scheduled_ranks(const Program& p) {
  if (p.partitioning() == Partitioning::BandwidthCentric) return {0};
  std::vector<int> all(static_cast<size_t>(p.ranks()));
  for (int r = 0; r < p.ranks(); ++r) all[static_cast<size_t>(r)] = r;
  return all;
}

}  // namespace

Timeline schedule_ideal(const Program& p, const HwProfile& hw, const std::vector<int>& ranks) {
  const std::vector<int> sim = scheduled_ranks(p);
  const Schedule sch = list_schedule(p, hw, sim);
  Timeline tl;
  for (int rank : ranks) {
    const size_t row = sim.size() == 1 ? 0 : static_cast<size_t>(rank);
    for (const auto& t : p.tasks()) {
      if (!p.active(t, rank)) continue;
      if (t.kind == TaskKind::Alloc || t.kind == TaskKind::Free) continue;
      const size_t i = static_cast<size_t>(t.id);
      tl.events.push_back({rank, t.lane, t.id, t.kind, p.label(t), sch.s(i, row), sch.e(i, row), t.bytes, t.flops});
    }
  }
  return tl;
}

std::vector<PeakComposition> ideal_peak_composition(const Program& p, const HwProfile& hw, const std::vector<int>& ranks) {
  const std::vector<int> sim = scheduled_ranks(p);
  const Schedule sch = list_schedule(p, hw, sim);
  std::vector<PeakComposition> out;
  std::vector<double> start(p.tasks().size()), end(p.tasks().size());
  for (int rank : ranks) {
    const size_t row = sim.size() == 1 ? 0 : static_cast<size_t>(rank);
    for (size_t i = 0; i < start.size(); ++i) {
      start[i] = sch.s(i, row);
      end[i] = sch.e(i, row);
    }
    out.push_back(composition_of(p, rank, start, end));
  }
  return out;
}

std::vector<PerTier> ideal_peak_bytes(const Program& p, const HwProfile& hw, const std::vector<int>& ranks) {
  std::vector<PerTier> out;
  for (const auto& c : ideal_peak_composition(p, hw, ranks)) out.push_back({c[0].bytes, c[1].bytes, c[2].bytes});
  return out;
}

double estimate_step_time(const Program& p, const HwProfile& hw) {
  const std::vector<int> sim = scheduled_ranks(p);
  const Schedule sch = list_schedule(p, hw, sim);
  double m = 0;
  for (double e : sch.end) m = std::max(m, e);
  return m;
}

}  // namespace zinf::core
