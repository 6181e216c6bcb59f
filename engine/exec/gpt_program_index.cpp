#include "engine/exec/gpt_program_index.hpp"

#include <algorithm>
#include <climits>
#include <map>
#include <utility>

namespace zinf::engine {

using core::TaskKind;

GptProgramIndex::GptProgramIndex(const core::Program& P, const core::ModelGraph& graph) {
  group_units.assign(graph.params.size(), {});
  for (const auto& u : P.units()) group_units[size_t(u.group)].push_back(u.id);
  const int mbs = P.micro_batches();
  first_backward_of_mb.assign(size_t(mbs), -1);
  ckpt_saves_per_mb.assign(size_t(mbs), 0);
  std::map<std::pair<int32_t, int32_t>, int32_t> last_fwd;  // (checkpoint, micro-batch) -> task
  for (const auto& t : P.tasks()) {
    if (t.kind == TaskKind::Forward && t.checkpoint >= 0) {
      const int block = graph.ops[size_t(t.op)].block;
      if (size_t(t.checkpoint) >= ckpt_blocks.size()) {
        ckpt_blocks.resize(size_t(t.checkpoint) + 1);
        ckpt_first_block.resize(size_t(t.checkpoint) + 1, INT_MAX);
      }
      auto& bl = ckpt_blocks[size_t(t.checkpoint)];
      if (std::find(bl.begin(), bl.end(), block) == bl.end()) bl.push_back(block);
      ckpt_first_block[size_t(t.checkpoint)] = std::min(ckpt_first_block[size_t(t.checkpoint)], block);
      last_fwd[{t.checkpoint, t.micro_batch}] = t.id;
    }
    if (t.kind == TaskKind::Backward && first_backward_of_mb[size_t(t.micro_batch)] < 0)
      first_backward_of_mb[size_t(t.micro_batch)] = t.id;
    if (t.kind == TaskKind::CopyD2H && t.data == core::Data::Checkpoint) ++ckpt_saves_per_mb[size_t(t.micro_batch)];
  }
  for (const auto& [key, id] : last_fwd) last_forward_of_run.insert(id);
}

}  // namespace zinf::engine
