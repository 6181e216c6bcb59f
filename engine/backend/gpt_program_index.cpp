#include "engine/backend/gpt_program_index.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace zinf::engine {

GptProgramIndex::GptProgramIndex(const core::Program& P, const core::ModelGraph& graph) {
  group_units.assign(graph.params.size(), {});
  for (const auto& u : P.units()) group_units[size_t(u.group)].push_back(u.id);
  // The checkpointed runs, their blocks and where each one's forward ends: the Program's.
  for (const auto& c : P.checkpoint_runs()) {
    if (c.id != int32_t(ckpt_blocks.size()))
      throw std::logic_error("the Program's checkpointed runs are not numbered in order");
    ckpt_first_block.push_back(c.first_block);
    ckpt_blocks.emplace_back();
    for (int b = c.first_block; b <= c.last_block; ++b) ckpt_blocks.back().push_back(b);
    for (int32_t id : c.forward_end)
      if (id >= 0) last_forward_of_run.insert(id);
  }
  for (const auto& t : P.tasks()) {
    if (t.data == core::Data::Checkpoint && t.kind == core::TaskKind::CopyD2H) ckpt_copied_off.insert({t.checkpoint, t.micro_batch});
    if (t.data != core::Data::Grad || t.phase != core::Phase::Backward) continue;
    const bool copy = t.kind == core::TaskKind::CopyD2H, write = t.kind == core::TaskKind::NvmeWrite;
    if (!copy && !write) continue;
    for (int32_t d : P.deps(t)) {
      const core::Task& dt = P.task(d);
      if (dt.unit != t.unit || dt.data != core::Data::Grad) continue;
      if ((copy && (dt.kind == core::TaskKind::ReduceScatter || dt.kind == core::TaskKind::Reduce)) ||
          (write && dt.kind == core::TaskKind::CopyD2H))
        grad_moved_on.insert(d);
    }
  }
  // Where each block's and operator's compute ends: the Program's.
  if (P.compute_ends().size() != size_t(P.micro_batches()))
    throw std::logic_error("the Program does not state where each micro-batch's compute ends");
  for (const auto& e : P.compute_ends()) {
    for (size_t b = 0; b < e.block_backward.size(); ++b)
      if (e.block_backward[b] >= 0) last_backward_of_block[e.block_backward[b]] = int(b);
    for (int32_t id : e.op_backward)
      if (id >= 0) last_backward_outside_blocks.insert(id);
    if (P.forward_only())
      for (size_t b = 0; b < e.block_forward.size(); ++b)
        if (e.block_forward[b] >= 0) last_forward_of_block[e.block_forward[b]] = int(b);
  }
}

}  // namespace zinf::engine
