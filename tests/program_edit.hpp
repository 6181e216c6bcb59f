// A one-rank Program rebuilt task by task with each task's dependencies as `deps_of` returns them
// (given the task and its dependencies as planned), everything else copied: for tests that need a
// Program lacking a dependency, or with one too many.
#pragma once
#include <catch2/catch.hpp>

#include <functional>
#include <vector>

#include "core/plan_state.hpp"  // ProgramBuilder

namespace zinf::test {

// Everything of one-rank Program `p` but its tasks, into `b`.
inline void copy_tables(const core::Program& p, core::ProgramBuilder& b) {
  b.ranks() = p.ranks();
  b.gpus_per_node() = p.gpus_per_node();
  b.partitioning() = p.partitioning();
  b.tensor_parallel() = p.tensor_parallel();
  b.micro_batches() = p.micro_batches();
  b.gather_device_passes() = p.gather_device_passes();
  b.reduce_device_passes() = p.reduce_device_passes();
  b.units() = p.units();
  b.sub_groups() = p.sub_groups();
  b.ops() = p.ops();
  b.activations() = p.activations();
  b.checkpoint_runs() = p.checkpoint_runs();
  b.backward_starts() = p.backward_starts();
  b.compute_ends() = p.compute_ends();
  b.op_order() = p.op_order();
  b.shard_space() = {p.shard_space(0)};
  b.static_bytes() = {p.static_bytes(0)};
  b.budget() = p.budget();
  b.peak() = p.peak_bytes();
  for (int l = 0; l < core::kLaneCount; ++l) b.lane_slots()[static_cast<size_t>(l)] = p.lane_slots(static_cast<core::Lane>(l));
}

inline core::Program with_deps(const core::Program& p,
                               const std::function<std::vector<int32_t>(const core::Task&, std::vector<int32_t>)>& deps_of) {
  REQUIRE(p.ranks() == 1);
  core::Program out;
  core::ProgramBuilder b(out);
  for (const auto& t : p.tasks()) {
    auto d = p.deps(t);
    auto al = p.allocs(t, 0), fr = p.frees(t, 0);
    b.add(t, deps_of(t, std::vector<int32_t>(d.begin(), d.end())), std::vector<core::MemEvent>(al.begin(), al.end()),
          std::vector<core::MemEvent>(fr.begin(), fr.end()));
  }
  copy_tables(p, b);
  return out;
}

// A one-rank Program with task `drop` taken out (-1: none; its dependents wait for its dependencies
// instead, later ids move down by one, its memory events go with it) and `edit` applied to every
// other task: for tests that need a Program that does not state a transfer.
inline core::Program without_task(const core::Program& p, int32_t drop,
                                  const std::function<void(core::Task&)>& edit = [](core::Task&) {}) {
  REQUIRE(p.ranks() == 1);
  auto renumber = [drop](int32_t id) { return drop >= 0 && id > drop ? id - 1 : id; };
  core::Program out;
  core::ProgramBuilder b(out);
  for (const auto& t : p.tasks()) {
    if (t.id == drop) continue;
    std::vector<int32_t> deps;
    for (int32_t d : p.deps(t)) {
      if (d != drop) deps.push_back(renumber(d));
      else
        for (int32_t dd : p.deps(p.task(drop))) deps.push_back(renumber(dd));
    }
    core::Task e = t;
    edit(e);
    auto al = p.allocs(t, 0), fr = p.frees(t, 0);
    b.add(e, deps, std::vector<core::MemEvent>(al.begin(), al.end()), std::vector<core::MemEvent>(fr.begin(), fr.end()));
  }
  copy_tables(p, b);  // then the task ids in them follow the renumbering
  for (auto& c : b.checkpoint_runs())
    for (int32_t& id : c.forward_end) id = renumber(id);
  for (auto& s : b.backward_starts()) {
    s.task = renumber(s.task);
    for (int32_t& id : s.checkpoint_copies) id = renumber(id);
  }
  b.compute_ends() = core::compute_ends_of(out.tasks(), out.ops(), out.micro_batches());
  return out;
}

}  // namespace zinf::test
