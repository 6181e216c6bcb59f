#include "core/program.hpp"
#include "core/json_text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <ostream>

namespace zinf::core {

const char* to_string(Lane l) {
  switch (l) {
    case Lane::Compute: return "compute";
    case Lane::H2D: return "h2d";
    case Lane::D2H: return "d2h";
    case Lane::NvmeRead: return "nvme_read";
    case Lane::NvmeWrite: return "nvme_write";
    case Lane::Comm: return "comm";
    case Lane::CpuOptim: return "cpu_optim";
  }
  return "?";
}

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::Forward: return "forward";
    case TaskKind::Recompute: return "recompute";
    case TaskKind::Backward: return "backward";
    case TaskKind::CopyH2D: return "copy_h2d";
    case TaskKind::CopyD2H: return "copy_d2h";
    case TaskKind::NvmeRead: return "nvme_read";
    case TaskKind::NvmeWrite: return "nvme_write";
    case TaskKind::AllGather: return "allgather";
    case TaskKind::ReduceScatter: return "reduce_scatter";
    case TaskKind::AllReduce: return "allreduce";
    case TaskKind::Broadcast: return "broadcast";
    case TaskKind::AllToAll: return "alltoall";
    case TaskKind::Reduce: return "reduce";
    case TaskKind::GradNorm: return "grad_norm";
    case TaskKind::OptimizerStep: return "optimizer_step";
    case TaskKind::Alloc: return "alloc";
    case TaskKind::Free: return "free";
  }
  return "?";
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::Forward: return "fwd";
    case Phase::Backward: return "bwd";
    case Phase::Optimizer: return "optim";
  }
  return "?";
}

const char* to_string(Data d) {
  switch (d) {
    case Data::None: return "none";
    case Data::Param: return "param";
    case Data::Grad: return "grad";
    case Data::OptimizerState: return "optimizer_state";
    case Data::Checkpoint: return "checkpoint";
    case Data::Activation: return "activation";
    case Data::Scalar: return "scalar";
  }
  return "?";
}

const char* to_string(MemUse u) {
  switch (u) {
    case MemUse::Unstated: return "unstated";
    case MemUse::ParamGathered: return "gathered parameters";
    case MemUse::GradWorking: return "gradients before their reduction";
    case MemUse::ActivationGrad: return "activation gradients";
    case MemUse::ParamStaging: return "parameter staging";
    case MemUse::GradStaging: return "gradient staging";
    case MemUse::OptimizerInFlight: return "optimizer sub-groups in flight";
    case MemUse::ActivationKept: return "activations kept";
    case MemUse::ActivationOffloaded: return "activations offloaded";
    case MemUse::Checkpoint: return "activation checkpoints";
  }
  return "?";
}

bool is_collective(TaskKind k) {
  return k == TaskKind::AllGather || k == TaskKind::ReduceScatter || k == TaskKind::AllReduce ||
         k == TaskKind::Broadcast || k == TaskKind::Reduce || k == TaskKind::AllToAll;
}

CollectiveGroups collective_groups(const Program& p, const Task& t) {
  const int T = std::max(1, p.tensor_parallel());
  if (t.unit >= 0 && (t.data == Data::Param || t.data == Data::Grad)) {
    const ParamUnit& u = p.units()[static_cast<size_t>(t.unit)];
    if (u.expert && p.expert_parallel() > 1) return {p.unit_ranks(u), T * p.expert_parallel(), false};
  }
  if (t.participants == p.ranks()) return {p.data_parallel(), T, false};
  return {std::max(1, t.participants), 1, true};
}

bool is_compute(TaskKind k) { return k == TaskKind::Forward || k == TaskKind::Recompute || k == TaskKind::Backward; }

std::span<const int32_t> Program::deps(const Task& t) const { return {deps_.data() + t.deps_begin, t.deps_count}; }

std::span<const MemEvent> Program::allocs(const Task& t, int rank) const {
  if (!active(t, rank)) return {};
  return {events_.data() + t.allocs_begin, t.allocs_count};
}

std::span<const MemEvent> Program::frees(const Task& t, int rank) const {
  if (!active(t, rank)) return {};
  return {events_.data() + t.frees_begin, t.frees_count};
}

std::vector<ComputeEnds> compute_ends_of(const std::vector<Task>& tasks, const std::vector<OpInfo>& ops,
                                         int micro_batches) {
  int32_t blocks = 0;
  for (const auto& o : ops) blocks = std::max(blocks, o.block + 1);
  ComputeEnds none;
  none.block_forward.assign(static_cast<size_t>(blocks), -1);
  none.block_backward.assign(static_cast<size_t>(blocks), -1);
  none.op_backward.assign(ops.size(), -1);
  std::vector<ComputeEnds> ends(static_cast<size_t>(std::max(0, micro_batches)), none);
  for (const auto& t : tasks) {  // in id order: the last one seen is the highest id
    if (t.micro_batch < 0 || t.micro_batch >= micro_batches || t.op < 0 || static_cast<size_t>(t.op) >= ops.size())
      continue;
    auto& e = ends[static_cast<size_t>(t.micro_batch)];
    const int32_t block = ops[static_cast<size_t>(t.op)].block;
    if (t.kind == TaskKind::Forward && block >= 0) e.block_forward[static_cast<size_t>(block)] = t.id;
    if (t.kind != TaskKind::Backward) continue;
    if (block >= 0) e.block_backward[static_cast<size_t>(block)] = t.id;
    else e.op_backward[static_cast<size_t>(t.op)] = t.id;
  }
  return ends;
}

Task Program::task_for_rank(int32_t id, int rank) const {
  Task t = task(id);
  if (!active(t, rank)) {
    t.bytes = 0;
    t.flops = 0;
    t.allocs_count = 0;
    t.frees_count = 0;
  }
  return t;
}

std::vector<Task> Program::for_rank(int rank) const {
  std::vector<Task> out;
  out.reserve(tasks_.size());
  for (const auto& t : tasks_) out.push_back(task_for_rank(t.id, rank));
  return out;
}

int64_t Program::shard_space(int rank) const {
  if (shard_space_.empty()) return 0;
  return shard_space_.size() == 1 ? shard_space_[0] : shard_space_[static_cast<size_t>(rank)];
}

const PerTier& Program::static_bytes(int rank) const {
  static const PerTier zero{};
  if (static_bytes_.empty()) return zero;
  return static_bytes_.size() == 1 ? static_bytes_[0] : static_bytes_[static_cast<size_t>(rank)];
}

std::string Program::label(const Task& t) const {
  std::string s = to_string(t.kind);
  if (t.op >= 0) s += " " + ops_[static_cast<size_t>(t.op)].name;
  if (t.unit >= 0) {
    const auto& u = units_[static_cast<size_t>(t.unit)];
    if (t.op < 0 || u.tiles > 1) s += " " + u.name;
  }
  if (t.checkpoint >= 0) s += fmt::format(" ckpt{}", t.checkpoint);
  if (t.activation >= 0) {
    const auto& a = activations_[static_cast<size_t>(t.activation)];
    s += a.first_block == a.last_block ? fmt::format(" h.{}", a.first_block)
                                       : fmt::format(" h.{}-{}", a.first_block, a.last_block);
  }
  if (t.sub_group >= 0) s += fmt::format(" sg{}", t.sub_group);
  if (!is_compute(t.kind) && t.data != Data::None) s += fmt::format(" {} ({})", to_string(t.data), to_string(t.phase));
  if (t.micro_batch >= 0) s += fmt::format(" mb{}", t.micro_batch);
  return s;
}

namespace {

// Shortest text that reads back as the same double; fmt's "{}" is exactly that and locale-free.
std::string num(double v) { return fmt::format("{}", v); }

void write_events(std::ostream& out, std::span<const MemEvent> ev) {
  out << '[';
  for (size_t i = 0; i < ev.size(); ++i) {
    if (i) out << ',';
    out << fmt::format("{{\"tier\":\"{}\",\"buffer\":{},\"bytes\":{}}}", to_string(ev[i].tier), ev[i].buffer,
                       num(ev[i].bytes));
  }
  out << ']';
}

std::string per_tier_json(const PerTier& p) {
  return fmt::format("{{\"device\":{},\"host\":{},\"nvme\":{}}}", num(p[0]), num(p[1]), num(p[2]));
}

}  // namespace

std::array<int32_t, kLaneCount> lane_slots_for(const RunConfig& config) {
  std::array<int32_t, kLaneCount> slots{};
  slots.fill(1);
  const auto nvme = static_cast<int32_t>(std::max<int64_t>(1, config.aio_tasks_in_flight));
  slots[static_cast<size_t>(Lane::NvmeRead)] = nvme;
  slots[static_cast<size_t>(Lane::NvmeWrite)] = nvme;
  return slots;
}

void Program::write_json(std::ostream& out) const {
  out << "{\n";
  out << fmt::format("\"ranks\":{},\n\"gpus_per_node\":{},\n\"partitioning\":\"{}\",\n\"micro_batches\":{},\n", ranks_,
                     gpus_per_node_,
                     partitioning_ == Partitioning::BandwidthCentric ? "bandwidth-centric" : "owner-based",
                     micro_batches_);
  if (forward_only_) out << "\"forward_only\":true,\n";  // absent from a training step's dump, as before
  if (expert_parallel_ > 1) out << fmt::format("\"expert_parallel\":{},\n", expert_parallel_);
  out << "\"budget_per_rank\":" << per_tier_json(budget_) << ",\n";
  out << "\"peak_bytes_per_rank\":" << per_tier_json(peak_) << ",\n";
  out << "\"lane_slots\":{";
  for (int l = 0; l < kLaneCount; ++l)
    out << (l ? "," : "") << fmt::format("\"{}\":{}", to_string(static_cast<Lane>(l)), lane_slots_[static_cast<size_t>(l)]);
  out << "},\n";
  out << fmt::format("\"gather_device_passes\":{},\n\"reduce_device_passes\":{},\n", gather_device_passes_,
                     reduce_device_passes_);
  out << "\"static_bytes\":[";
  for (size_t i = 0; i < static_bytes_.size(); ++i) out << (i ? "," : "") << per_tier_json(static_bytes_[i]);
  out << "],\n\"shard_space\":[";
  for (size_t i = 0; i < shard_space_.size(); ++i) out << (i ? "," : "") << shard_space_[i];
  out << "],\n\"op_order\":[";
  for (size_t i = 0; i < op_order_.size(); ++i) out << (i ? "," : "") << op_order_[i];
  out << "],\n\"ops\":[\n";
  for (size_t i = 0; i < ops_.size(); ++i) {
    const auto& o = ops_[i];
    out << fmt::format("{{\"id\":{},\"name\":{},\"kind\":\"{}\",\"block\":{},\"m\":{},\"n\":{},\"k\":{}}}{}\n", o.id,
                       json_quoted(o.name), o.kind, o.block, o.m, o.n, o.k, i + 1 < ops_.size() ? "," : "");
  }
  out << "],\n\"units\":[\n";
  for (size_t i = 0; i < units_.size(); ++i) {
    const auto& u = units_[i];
    out << fmt::format(
        "{{\"id\":{},\"name\":{},\"group\":{},\"tile\":{},\"tiles\":{},\"rows\":[{},{}],\"numel\":{},"
        "\"shard_numel\":{},\"shard_offset\":{},\"owner\":{},\"owner_offset\":{}{}}}{}\n",
        u.id, json_quoted(u.name), u.group, u.tile, u.tiles, u.row_begin, u.row_end, u.numel, u.shard_numel, u.shard_offset,
        u.owner, u.owner_offset, u.expert ? ",\"expert\":true" : "", i + 1 < units_.size() ? "," : "");
  }
  out << "],\n\"sub_groups\":[\n";
  for (size_t i = 0; i < sub_groups_.size(); ++i) {
    const auto& g = sub_groups_[i];
    out << fmt::format("{{\"id\":{},\"offset\":{},\"count\":{},\"owner\":{}}}{}\n", g.id, g.offset, g.count, g.owner,
                       i + 1 < sub_groups_.size() ? "," : "");
  }
  out << "],\n\"activations\":[\n";
  for (size_t i = 0; i < activations_.size(); ++i) {
    const auto& a = activations_[i];
    out << fmt::format("{{\"id\":{},\"blocks\":[{},{}],\"bytes\":{},\"tier\":\"{}\",\"gds\":{}}}{}\n", a.id, a.first_block,
                       a.last_block, num(a.bytes), to_string(a.tier), a.gds, i + 1 < activations_.size() ? "," : "");
  }
  out << "],\n\"checkpoint_runs\":[\n";
  for (size_t i = 0; i < checkpoint_runs_.size(); ++i) {
    const auto& c = checkpoint_runs_[i];
    out << fmt::format("{{\"id\":{},\"blocks\":[{},{}],\"forward_end\":[{}]}}{}\n", c.id, c.first_block,
                       c.last_block, fmt::join(c.forward_end, ","), i + 1 < checkpoint_runs_.size() ? "," : "");
  }
  out << "],\n\"backward_starts\":[\n";
  for (size_t i = 0; i < backward_starts_.size(); ++i) {
    const auto& b = backward_starts_[i];
    out << fmt::format("{{\"micro_batch\":{},\"task\":{},\"checkpoint_copies\":[{}]}}{}\n", i, b.task,
                       fmt::join(b.checkpoint_copies, ","), i + 1 < backward_starts_.size() ? "," : "");
  }
  out << "],\n\"tasks\":[\n";
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const auto& t = tasks_[i];
    out << fmt::format(
        "{{\"id\":{},\"kind\":\"{}\",\"lane\":\"{}\",\"data\":\"{}\",\"phase\":\"{}\",\"from\":\"{}\",\"to\":\"{}\","
        "\"bytes\":{},\"flops\":{},\"gemm_dim\":{},\"op\":{},\"unit\":{},\"tile\":{},\"buffer\":{},\"source\":{},\"micro_batch\":{},\"checkpoint\":{},"
        "\"activation\":{},\"sub_group\":{},\"sg_offset\":{},\"sg_count\":{},\"participants\":{},\"root\":{},\"owner\":{},\"deps\":[",
        t.id, to_string(t.kind), to_string(t.lane), to_string(t.data), to_string(t.phase), to_string(t.from),
        to_string(t.to), num(t.bytes), num(t.flops), t.gemm_dim, t.op, t.unit, t.tile, t.buffer, t.source, t.micro_batch,
        t.checkpoint,
        t.activation, t.sub_group, t.sg_offset, t.sg_count, t.participants, t.root, t.owner);
    auto d = deps(t);
    for (size_t j = 0; j < d.size(); ++j) out << (j ? "," : "") << d[j];
    out << ']';
    if (t.data == Data::Grad && t.phase == Phase::Backward)
      out << fmt::format(",\"grad_first\":{},\"grad_last\":{}", t.grad_first, t.grad_last);
    out << ",\"allocs\":";
    write_events(out, {events_.data() + t.allocs_begin, t.allocs_count});
    out << ",\"frees\":";
    write_events(out, {events_.data() + t.frees_begin, t.frees_count});
    out << (i + 1 < tasks_.size() ? "},\n" : "}\n");
  }
  out << "]\n}\n";
}

}  // namespace zinf::core
