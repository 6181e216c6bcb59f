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
  std::map<std::pair<int32_t, int>, int32_t> last, last_op;  // (micro-batch, block or operator) -> task
  for (const auto& t : P.tasks()) {
    if (t.kind != core::TaskKind::Backward) continue;
    const int block = graph.ops[size_t(t.op)].block;
    auto& id = block >= 0 ? last[{t.micro_batch, block}] : last_op[{t.micro_batch, t.op}];
    id = std::max(id, t.id);
  }
  for (const auto& [key, id] : last) last_backward_of_block[id] = key.second;
  for (const auto& [key, id] : last_op) last_backward_outside_blocks.insert(id);
  if (!P.forward_only()) return;
  last.clear();
  for (const auto& t : P.tasks())
    if (t.kind == core::TaskKind::Forward && graph.ops[size_t(t.op)].block >= 0) {
      auto& id = last[{t.micro_batch, graph.ops[size_t(t.op)].block}];
      id = std::max(id, t.id);
    }
  for (const auto& [key, id] : last) last_forward_of_block[id] = key.second;
}

}  // namespace zinf::engine
