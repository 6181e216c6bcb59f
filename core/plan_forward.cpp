// The forward-only emission (core/plan_state.hpp; make_forward_plan): the tasks of a forward pass
// alone, in one pass over the forward steps. Before each compute step come the parameter fetch
// stages issued there (the same fetches and prefetch a training step's forward has); the compute
// task waits for its units' gathers and frees those whose last use it is. A run allocates its
// activations at its first forward and frees them at its last, all but its output (the next run's
// input), which the next run frees at its own last forward. Under tensor parallelism a step whose
// output the group all-reduces frees its run's buffers with that all-reduce, which still reads them.
// Nothing is kept for a backward: no checkpoint, gradient or optimizer task, no sub-group.
#include <algorithm>
#include <array>
#include <vector>

#include "core/plan_state.hpp"

namespace zinf::core::planning {

namespace {

// What run r hands to the next: its last block's output (the residual stream); nothing from the last.
double run_output_bytes(const PlanState& ps, size_t r) {
  if (r + 1 >= ps.runs_.size()) return 0;
  return std::min(ps.runs_[r].act_bytes, ps.working_bytes_ * double(ps.graph_.tokens) * double(ps.graph_.spec.hidden));
}

}  // namespace

void emit_forward(PlanState& ps) {
  const size_t S = ps.steps_.size(), R = ps.runs_.size();
  ps.builder_.forward_only() = true;
  // The shard space the parameters' homes span, as make_sub_groups states it for a training step; no
  // sub-group, since nothing is updated.
  ps.builder_.shard_space() = ps.owner_based() ? ps.owned_elems_ : std::vector<int64_t>{ps.shard_space_};
  ps.builder_.sub_groups().clear();
  ps.sg_.clear();
  ps.plan_.sub_groups = 0;
  ps.builder_.checkpoint_runs().clear();
  ps.builder_.backward_starts().assign(static_cast<size_t>(ps.plan_.micro_batches), {});
  ps.compute_task_.assign(S, -1);
  std::array<std::vector<std::vector<int32_t>>, 3> issued;  // per stage and step: the fetches issued before it
  for (auto& v : issued) v.assign(S, {});
  for (size_t f = 0; f < ps.fetches_.size(); ++f) {
    const Fetch& fe = ps.fetches_[f];
    issued[0][static_cast<size_t>(fe.t_nc)].push_back(static_cast<int32_t>(f));
    issued[1][static_cast<size_t>(fe.t_h2d)].push_back(static_cast<int32_t>(f));
    issued[2][static_cast<size_t>(fe.t_ag)].push_back(static_cast<int32_t>(f));
  }
  std::vector<int64_t> work(R, -1), out(R, -1);  // per run: its activations, and its output apart
  int32_t prev = -1;
  for (size_t i = 0; i < S; ++i) {
    const Step& st = ps.steps_[i];
    for (size_t stage = 0; stage < 3; ++stage)
      for (int32_t f : issued[stage][i]) emit_fetch_stage(ps, ps.fetches_[static_cast<size_t>(f)], int(stage), prev);
    prev = emit_expert_all_to_all(ps, i, prev);  // the dispatch
    const size_t r = static_cast<size_t>(st.run);
    const double out_bytes = run_output_bytes(ps, r), work_bytes = ps.runs_[r].act_bytes - out_bytes;
    std::vector<int32_t> deps{prev};
    std::vector<MemEvent> allocs, frees, run_frees;
    step_fetch_events(ps, i, deps, frees);
    if (st.first_fwd_of_run) {
      if (work_bytes > 0) allocs.push_back({Tier::Device, work[r] = ps.builder_.buffer(), work_bytes});
      if (out_bytes > 0) allocs.push_back({Tier::Device, out[r] = ps.builder_.buffer(), out_bytes});
    }
    if (st.last_fwd_of_run) {
      if (work[r] >= 0) run_frees.push_back({Tier::Device, work[r], work_bytes});
      if (r > 0 && out[r - 1] >= 0) run_frees.push_back({Tier::Device, out[r - 1], run_output_bytes(ps, r - 1)});
      work[r] = -1;
      if (r > 0) out[r - 1] = -1;
    }
    // The group's all-reduce of the operator's output after its last tile (as a training step's forward).
    const Operator& op = ps.graph_.ops[static_cast<size_t>(st.op)];
    const bool last_tile = i + 1 == S || ps.steps_[i + 1].op != st.op || ps.steps_[i + 1].mb != st.mb;
    const bool all_reduced = ps.tensor_parallel_ > 1 && op.tp_fwd_allreduce_bytes > 0 && last_tile;
    if (!all_reduced) frees.insert(frees.end(), run_frees.begin(), run_frees.end());
    prev = ps.compute_task_[i] = ps.builder_.add(compute_task(ps, st), deps, allocs, frees);
    if (all_reduced) {
      Task a = make_task(TaskKind::AllReduce, Lane::Compute, Data::Activation, Phase::Forward);
      a.op = st.op;
      a.micro_batch = st.mb;
      a.from = a.to = Tier::Device;
      a.bytes = op.tp_fwd_allreduce_bytes;
      a.participants = static_cast<int>(ps.tensor_parallel_);
      prev = ps.builder_.add(a, {prev}, {}, run_frees);
    }
    prev = emit_expert_all_to_all(ps, i, prev);  // the combine
  }
}

}  // namespace zinf::core::planning
