// validate_program (core/plan.hpp): docs/DESIGN.md's invariants, checked on the Program itself.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/plan.hpp"

namespace zinf::core {

namespace {

// Does `to` depend on `from` (or is it `from`)? Searches backwards from `to` over tasks with ids
// not below `from`, which is all that can lie on a path since ids are topological.
bool reaches_from(const Program& p, int32_t from, int32_t to, std::vector<int32_t>& mark, int32_t stamp) {
  if (from == to) return true;
  std::vector<int32_t> stack{to};
  while (!stack.empty()) {
    int32_t t = stack.back();
    stack.pop_back();
    for (int32_t d : p.deps(p.task(t))) {
      if (d == from) return true;
      if (d < from || mark[static_cast<size_t>(d)] == stamp) continue;
      mark[static_cast<size_t>(d)] = stamp;
      stack.push_back(d);
    }
  }
  return false;
}

// validate_program's state: the Program, the errors so far (the first 50) and the marks of the
// dependency search; one method per invariant of docs/DESIGN.md.
class Checker {
public:
  explicit Checker(const Program& program)
      : p(program), tasks(program.tasks()), R(program.ranks()),
        owner_based(program.partitioning() == Partitioning::OwnerBased), mark(tasks.size(), -1) {}

  std::vector<std::string> run() {
    order_and_collectives();
    buffer_lifetimes();
    gathers();
    if (p.forward_only()) forward_alone();
    else gradient_reductions();
    sub_group_updates();
    lane_slots();
    stated_fields();
    stated_backward_starts();
    stated_compute_ends();
    budget();
    return std::move(errors);
  }

private:
  void error(std::string m) {
    if (errors.size() < 50) errors.push_back(std::move(m));
  }
  // Does `to` depend on `from` (or is it `from`)?
  bool reaches(int32_t from, int32_t to) { return reaches_from(p, from, to, mark, stamp++); }

  // Invariant 4: acyclic, lanes in topological order. Dependencies point to lower ids, and each lane
  // runs in id order, so both hold when every dependency is an earlier task.
  void order_and_collectives() {
    for (const auto& t : tasks) {
      for (int32_t d : p.deps(t))
        if (d < 0 || d >= t.id) error(fmt::format("task {} ({}) depends on task {}, not an earlier task", t.id, p.label(t), d));
      if (is_collective(t.kind)) {
        // All ranks, or (tensor parallelism) groups of consecutive ranks that divide them and a node.
        const int G = std::max(1, std::min(p.gpus_per_node(), R));
        if (t.participants != R &&
            (t.participants < 2 || R % t.participants != 0 || (G % t.participants != 0 && t.participants % G != 0)))
          error(fmt::format("collective {} has {} participants: neither all {} ranks nor groups inside a node of {}", t.id,
                            t.participants, R, G));
        if ((t.kind == TaskKind::Broadcast || t.kind == TaskKind::Reduce) && (t.root < 0 || t.root >= R))
          error(fmt::format("collective {} has root {}", t.id, t.root));
        if (t.owner >= 0) error(fmt::format("collective {} is not done by every rank", t.id));
      }
      if (t.owner >= R) error(fmt::format("task {} is owned by rank {} of {}", t.id, t.owner, R));
    }
  }

  // Invariant 1 and memory balance: every buffer allocated once and freed once, on the same tier
  // with the same size, by a task that depends on the allocating one. Checked for rank 0 and, for
  // owner-based programs, for every rank (their owner-only tasks differ).
  void buffer_lifetimes() {
    const int ranks_to_check = owner_based ? R : 1;
    for (int r = 0; r < ranks_to_check; ++r) {
      struct Life {
        int32_t alloc = -1, free = -1;
        Tier tier = Tier::Device;
        double bytes = 0;
      };
      std::unordered_map<int64_t, Life> life;
      for (const auto& t : tasks) {
        for (const auto& e : p.allocs(t, r)) {
          auto& l = life[e.buffer];
          if (l.alloc >= 0)
            error(fmt::format("rank {}: buffer {} allocated twice (tasks {} and {})", r, e.buffer, l.alloc, t.id));
          l.alloc = t.id;
          l.tier = e.tier;
          l.bytes = e.bytes;
        }
        for (const auto& e : p.frees(t, r)) {
          auto& l = life[e.buffer];
          if (l.free >= 0) error(fmt::format("rank {}: buffer {} freed twice", r, e.buffer));
          l.free = t.id;
          if (l.alloc < 0) {
            error(fmt::format("rank {}: buffer {} freed by task {} ({}) before it is allocated", r, e.buffer, t.id, p.label(t)));
            continue;
          }
          if (l.tier != e.tier || l.bytes != e.bytes)
            error(fmt::format("rank {}: buffer {} allocated as {} bytes on {}, freed as {} on {}", r, e.buffer, l.bytes,
                              to_string(l.tier), e.bytes, to_string(e.tier)));
          if (!reaches(l.alloc, t.id))
            error(fmt::format("rank {}: buffer {} is freed by task {} ({}) which does not wait for its allocation by {} ({})",
                              r, e.buffer, t.id, p.label(t), l.alloc, p.label(p.task(l.alloc))));
        }
      }
      for (const auto& [buf, l] : life)
        if (l.free < 0)
          error(fmt::format("rank {}: buffer {} allocated by task {} ({}) is never freed", r, buf, l.alloc,
                            p.label(p.task(l.alloc))));
    }
  }

  // Invariant 3a: every use of a partitioned parameter waits for the collective that gathers it,
  // and the gathered buffer is freed no earlier than that use.
  void gathers() {
    std::unordered_map<int64_t, int32_t> freed_by;  // rank 0's view; the gathered buffers are the same on every rank
    for (const auto& t : tasks)
      for (const auto& e : p.frees(t, 0)) freed_by[e.buffer] = t.id;
    bool partitioned_params = false;
    for (const auto& t : tasks)
      if (t.data == Data::Param && (t.kind == TaskKind::AllGather || t.kind == TaskKind::Broadcast) &&
          t.phase != Phase::Optimizer)
        partitioned_params = true;
    if (partitioned_params) {
      for (const auto& t : tasks) {
        if (!is_compute(t.kind) || t.unit < 0) continue;
        int32_t gather = -1;
        for (int32_t d : p.deps(t)) {
          const auto& dt = p.task(d);
          if ((dt.kind == TaskKind::AllGather || dt.kind == TaskKind::Broadcast) && dt.unit == t.unit) gather = d;
        }
        if (gather < 0) {
          error(fmt::format("task {} ({}) uses unit {} without waiting for its gather", t.id, p.label(t), t.unit));
          continue;
        }
        // The gathered buffer: allocated by the all-gather, or (owner-based) by the Alloc it waits for.
        int64_t buf = -1;
        const auto& gt = p.task(gather);
        for (const auto& e : p.allocs(gt, 0)) buf = e.buffer;
        if (buf < 0)
          for (int32_t d : p.deps(gt))
            if (p.task(d).kind == TaskKind::Alloc || p.task(d).kind == TaskKind::CopyH2D)
              for (const auto& e : p.allocs(p.task(d), 0)) buf = e.buffer;
        if (buf < 0) {
          // a copy by the owner: look one step further back for the Alloc
          for (int32_t d : p.deps(gt))
            for (int32_t dd : p.deps(p.task(d)))
              if (p.task(dd).kind == TaskKind::Alloc)
                for (const auto& e : p.allocs(p.task(dd), 0)) buf = e.buffer;
        }
        auto it = freed_by.find(buf);
        if (buf < 0 || it == freed_by.end() || it->second < t.id)
          error(fmt::format("task {} ({}): the gathered unit {} is freed before this use", t.id, p.label(t), t.unit));
      }
    }
  }

  // Invariant 3b for a forward pass alone: nothing of a backward, no gradient, no optimizer state.
  void forward_alone() {
    for (const auto& t : tasks) {
      if (t.kind == TaskKind::Backward || t.kind == TaskKind::Recompute || t.phase != Phase::Forward || t.data == Data::Grad ||
          t.data == Data::OptimizerState || t.data == Data::Checkpoint || t.data == Data::Scalar)
        error(fmt::format("task {} ({}) belongs to a backward or an update, in a forward-only Program", t.id, p.label(t)));
    }
    if (!p.sub_groups().empty()) error(fmt::format("a forward-only Program has {} optimizer sub-groups", p.sub_groups().size()));
  }

  // Invariant 3b: each unit's gradient is reduced in every micro-batch, once per operator whose
  // backward uses it (a tied weight: twice); of all its reductions in the step exactly the first
  // (in the first micro-batch) says it starts the gradient and exactly the last (in the last
  // micro-batch) that it completes it, and each waits for the one before it in its micro-batch.
  void gradient_reductions() {
    std::map<std::pair<int32_t, int32_t>, int> reduced;
    std::vector<std::vector<int32_t>> of_unit(p.units().size());
    for (const auto& t : tasks)
      if (t.data == Data::Grad && is_collective(t.kind)) {
        ++reduced[{t.unit, t.micro_batch}];
        if (t.unit >= 0 && static_cast<size_t>(t.unit) < of_unit.size()) of_unit[static_cast<size_t>(t.unit)].push_back(t.id);
      }
    for (const auto& u : p.units()) {
      for (int mb = 0; mb < p.micro_batches(); ++mb) {
        auto it = reduced.find({u.id, mb});
        const int n = it == reduced.end() ? 0 : it->second;
        if (n < 1) error(fmt::format("unit {} ({}) has its gradient reduced {} times in micro-batch {}", u.id, u.name, n, mb));
      }
      const auto& rs = of_unit[static_cast<size_t>(u.id)];
      for (size_t k = 0; k < rs.size(); ++k) {
        const Task& t = p.task(rs[k]);
        const bool first = k == 0, last = k + 1 == rs.size();
        if (t.grad_first != first || t.grad_last != last)
          error(fmt::format("reduction {} ({}) of unit {} says first {} and last {}; it is {} of its {}", t.id, p.label(t),
                            u.name, t.grad_first, t.grad_last, k + 1, rs.size()));
        if (first && t.micro_batch != 0) error(fmt::format("the first reduction of unit {} is in micro-batch {}", u.name, t.micro_batch));
        if (last && t.micro_batch != p.micro_batches() - 1)
          error(fmt::format("the last reduction of unit {} is in micro-batch {}", u.name, t.micro_batch));
        if (k > 0 && p.task(rs[k - 1]).micro_batch == t.micro_batch && !reaches(rs[k - 1], rs[k]))
          error(fmt::format("reduction {} of unit {} does not wait for the one before it ({})", t.id, u.name, rs[k - 1]));
      }
    }
  }

  // Invariant 3c: each sub-group updated exactly once; the sub-groups tile every rank's shard space;
  // each update waits for the last gradient store of every unit it covers, and for the global norm
  // when gradients are clipped.
  void sub_group_updates() {
    std::vector<int> updates(p.sub_groups().size(), 0);
    std::vector<int32_t> adam_of(p.sub_groups().size(), -1);
    int32_t norm = -1;
    for (const auto& t : tasks) {
      if (t.kind == TaskKind::OptimizerStep) {
        if (t.sub_group < 0 || static_cast<size_t>(t.sub_group) >= updates.size()) {
          error(fmt::format("optimizer step {} has no sub-group", t.id));
          continue;
        }
        ++updates[static_cast<size_t>(t.sub_group)];
        adam_of[static_cast<size_t>(t.sub_group)] = t.id;
      }
      if (t.kind == TaskKind::AllReduce && t.data == Data::Scalar) norm = t.id;
    }
    std::map<int32_t, int64_t> next_offset;  // per owner
    for (const auto& g : p.sub_groups()) {
      if (updates[static_cast<size_t>(g.id)] != 1)
        error(fmt::format("sub-group {} is updated {} times", g.id, updates[static_cast<size_t>(g.id)]));
      auto& off = next_offset[g.owner];
      if (g.offset != off) error(fmt::format("sub-group {} starts at {}, expected {}", g.id, g.offset, off));
      off = g.offset + g.count;
    }
    for (const auto& [owner, end] : next_offset)
      if (end != p.shard_space(owner < 0 ? 0 : owner))
        error(fmt::format("sub-groups of rank {} cover {} elements of its {}", owner, end, p.shard_space(owner < 0 ? 0 : owner)));
    // Last gradient store of each unit: the last Grad task of the last micro-batch's backward.
    std::vector<int32_t> last_store(p.units().size(), -1);
    for (const auto& t : tasks)
      if (t.data == Data::Grad && t.phase == Phase::Backward && t.unit >= 0) last_store[static_cast<size_t>(t.unit)] = t.id;
    for (const auto& u : p.units()) {
      const int64_t ub = owner_based ? u.owner_offset : u.shard_offset;
      const int64_t ue = ub + (owner_based ? u.numel : u.shard_numel);
      for (const auto& g : p.sub_groups()) {
        if (owner_based && g.owner != u.owner) continue;
        if (!(ub < g.offset + g.count && g.offset < ue)) continue;
        const int32_t a = adam_of[static_cast<size_t>(g.id)];
        if (a < 0) continue;
        if (!reaches(last_store[static_cast<size_t>(u.id)], a))
          error(fmt::format("the update of sub-group {} does not wait for the gradient of {}", g.id, u.name));
      }
    }
    if (norm >= 0)
      for (int32_t a : adam_of)
        if (a >= 0 && !reaches(norm, a))
          error(fmt::format("optimizer step {} does not wait for the global gradient norm", a));
  }

  // Invariant 5: lane slots. A lane runs at least one task at a time; only the NVMe lanes run more,
  // and there lane order no longer orders anything: two writes of the same range of a state (a
  // unit's or sub-group's gradients, parameters or optimizer states in any micro-batch; a
  // checkpoint or activation segment of one micro-batch) must be ordered by a dependency path.
  void lane_slots() {
    for (int l = 0; l < kLaneCount; ++l) {
      const auto lane = static_cast<Lane>(l);
      const int slots = p.lane_slots(lane);
      if (slots < 1 || (slots > 1 && lane != Lane::NvmeRead && lane != Lane::NvmeWrite))
        error(fmt::format("lane {} has {} slots: every lane has at least 1, only the NVMe lanes more", to_string(lane), slots));
    }
    if (p.lane_slots(Lane::NvmeWrite) > 1) {
      std::map<std::tuple<int, int32_t, int32_t, int32_t, int32_t, int32_t>, int32_t> last_write;
      for (const auto& t : tasks) {
        if (t.lane != Lane::NvmeWrite) continue;
        const bool state = t.data == Data::Grad || t.data == Data::Param || t.data == Data::OptimizerState;
        const auto key = std::make_tuple(static_cast<int>(t.data), t.unit, t.sub_group, t.checkpoint, t.activation,
                                         state ? -1 : t.micro_batch);
        auto [it, fresh] = last_write.try_emplace(key, t.id);
        if (fresh) continue;
        if (!reaches(it->second, t.id))
          error(fmt::format("NVMe writes {} ({}) and {} ({}) of the same range may overlap on a lane of {} slots: the "
                            "later must depend on the earlier",
                            it->second, p.label(p.task(it->second)), t.id, p.label(t), p.lane_slots(Lane::NvmeWrite)));
        it->second = t.id;
      }
    }
  }

  // Invariant 6: what a backend reads off the Program is stated there. A task's source (a parameter
  // fetch stage's, an optimizer stage's) is the buffer of a task of the same unit and sub-group it
  // depends on directly, other than an Alloc (which fills nothing); every checkpointed run covers
  // blocks, and its forward ends, per micro-batch, at a forward task of that run, after which no
  // other forward of the run comes.
  void stated_fields() {
    for (const auto& t : tasks) {
      if (t.source < 0) continue;
      bool stated = false;
      for (int32_t d : p.deps(t)) {
        const Task& dt = p.task(d);
        stated |= dt.buffer == t.source && dt.unit == t.unit && dt.sub_group == t.sub_group && dt.kind != TaskKind::Alloc;
      }
      if (!stated)
        error(fmt::format("task {} ({}) reads buffer {}, which no task of its unit or sub-group it depends on fills", t.id,
                          p.label(t), t.source));
    }
    std::map<std::pair<int32_t, int32_t>, int32_t> last_forward;  // (checkpoint, micro-batch) -> task
    for (const auto& t : tasks)
      if (t.kind == TaskKind::Forward && t.checkpoint >= 0) last_forward[{t.checkpoint, t.micro_batch}] = t.id;
    for (const auto& c : p.checkpoint_runs()) {
      if (c.first_block < 0 || c.last_block < c.first_block)
        error(fmt::format("checkpointed run {} covers blocks [{}, {}]", c.id, c.first_block, c.last_block));
      if (c.forward_end.size() != static_cast<size_t>(p.micro_batches()))
        error(fmt::format("checkpointed run {} states {} forward ends for {} micro-batches", c.id, c.forward_end.size(),
                          p.micro_batches()));
      for (size_t mb = 0; mb < c.forward_end.size(); ++mb) {
        auto it = last_forward.find({c.id, static_cast<int32_t>(mb)});
        if (it == last_forward.end() || it->second != c.forward_end[mb])
          error(fmt::format("checkpointed run {} states task {} as its forward's end in micro-batch {}, but its last "
                            "forward is task {}",
                            c.id, c.forward_end[mb], mb, it == last_forward.end() ? -1 : it->second));
      }
    }
    for (const auto& t : tasks) {
      if (t.kind != TaskKind::Forward || t.checkpoint < 0) continue;
      if (t.checkpoint >= static_cast<int32_t>(p.checkpoint_runs().size())) {
        error(fmt::format("task {} ({}) names checkpoint {}, which the Program does not state", t.id, p.label(t),
                          t.checkpoint));
        continue;
      }
      const auto& c = p.checkpoint_runs()[static_cast<size_t>(t.checkpoint)];
      const int32_t block = t.op >= 0 ? p.ops()[static_cast<size_t>(t.op)].block : -1;
      if (block < c.first_block || block > c.last_block)
        error(fmt::format("task {} ({}) runs block {}, outside its checkpointed run {} [{}, {}]", t.id, p.label(t), block,
                          c.id, c.first_block, c.last_block));
    }
  }

  // Invariant 6, continued: the stated compute ends are each block's last forward and backward task,
  // and each operator's outside the blocks, in each micro-batch.
  void stated_compute_ends() {
    const auto ends = compute_ends_of(tasks, p.ops(), p.micro_batches());
    if (p.compute_ends().size() != ends.size()) {
      error(fmt::format("the Program states compute ends for {} micro-batches, not {}", p.compute_ends().size(), ends.size()));
      return;
    }
    for (size_t mb = 0; mb < ends.size(); ++mb) {
      const ComputeEnds& s = p.compute_ends()[mb];
      if (s.block_forward != ends[mb].block_forward || s.block_backward != ends[mb].block_backward ||
          s.op_backward != ends[mb].op_backward)
        error(fmt::format("micro-batch {} states compute ends that are not its blocks' and operators' last compute "
                          "tasks (block backward ends [{}], the tasks' [{}])",
                          mb, fmt::join(s.block_backward, ", "), fmt::join(ends[mb].block_backward, ", ")));
    }
  }

  // Invariant 6, continued: each micro-batch's stated backward start is its first backward task, and
  // names exactly the micro-batch's checkpoint copies, on each of which it depends directly.
  void stated_backward_starts() {
    const auto mbs = static_cast<size_t>(std::max(0, p.micro_batches()));
    if (p.backward_starts().size() != mbs) {
      error(fmt::format("the Program states {} backward starts for {} micro-batches", p.backward_starts().size(), mbs));
      return;
    }
    std::vector<int32_t> first(mbs, -1);
    std::vector<std::vector<int32_t>> copies(mbs);
    for (const auto& t : tasks) {
      if (t.micro_batch < 0 || static_cast<size_t>(t.micro_batch) >= mbs) continue;
      const auto mb = static_cast<size_t>(t.micro_batch);
      if (t.kind == TaskKind::Backward && first[mb] < 0) first[mb] = t.id;
      if (t.kind == TaskKind::CopyD2H && t.data == Data::Checkpoint) copies[mb].push_back(t.id);
    }
    for (size_t mb = 0; mb < mbs; ++mb) {
      const BackwardStart& b = p.backward_starts()[mb];
      if (b.task != first[mb])
        error(fmt::format("micro-batch {} states task {} as its backward's start, but its first backward is task {}", mb,
                          b.task, first[mb]));
      std::vector<int32_t> stated = b.checkpoint_copies;
      std::sort(stated.begin(), stated.end());
      if (stated != copies[mb])
        error(fmt::format("micro-batch {} states checkpoint copies [{}] before its backward, but copies [{}]", mb,
                          fmt::join(stated, ", "), fmt::join(copies[mb], ", ")));
      if (b.task < 0 || static_cast<size_t>(b.task) >= tasks.size()) continue;
      const auto deps = p.deps(p.task(b.task));
      for (int32_t c : b.checkpoint_copies)
        if (std::find(deps.begin(), deps.end(), c) == deps.end())
          error(fmt::format("task {} ({}) starts micro-batch {}'s backward without depending on its checkpoint copy {}",
                            b.task, p.label(p.task(b.task)), mb, c));
    }
  }

  // Invariant 2: the peak the planner found is within budget.
  void budget() {
    for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme})
      if (at(p.peak_bytes(), t) > at(p.budget(), t) * (1 + 1e-9))
        error(fmt::format("{} peaks at {} bytes over its budget {}", to_string(t), at(p.peak_bytes(), t), at(p.budget(), t)));
  }

  const Program& p;
  const std::vector<Task>& tasks;
  const int R;
  const bool owner_based;
  std::vector<std::string> errors;
  std::vector<int32_t> mark;
  int32_t stamp = 0;
};

}  // namespace

std::vector<std::string> validate_program(const Program& p) { return Checker(p).run(); }

std::vector<std::string> unstated_waits(const Program& p, const std::vector<TaskWait>& waits) {
  std::vector<std::string> errors;
  const int32_t n = static_cast<int32_t>(p.tasks().size());
  std::vector<int32_t> mark(static_cast<size_t>(n), -1);
  int32_t stamp = 0;
  for (const auto& w : waits) {
    if (w.waiter < 0 || w.waiter >= n || w.awaited < 0 || w.awaited >= n) {
      errors.push_back(fmt::format("a wait names task {} or {}, outside the Program's {} tasks ({})", w.waiter, w.awaited,
                                   n, w.why));
      continue;
    }
    if (w.awaited < w.waiter && reaches_from(p, w.awaited, w.waiter, mark, stamp++)) continue;
    errors.push_back(fmt::format("task {} ({}) waits for task {} ({}), which the Program does not make it depend on: {}",
                                 w.waiter, p.label(p.task(w.waiter)), w.awaited, p.label(p.task(w.awaited)), w.why));
  }
  return errors;
}

std::vector<TaskWait> checkpoint_copy_waits(const Program& p) {
  std::vector<TaskWait> waits;
  for (const auto& b : p.backward_starts())
    for (int32_t c : b.checkpoint_copies)
      waits.push_back({b.task, c, "the first backward of a micro-batch drops its offloaded checkpoints' device copies"});
  return waits;
}

}  // namespace zinf::core
