// What the GPT training backend (GptBackendBase, engine/backend/gpt_backend_base.hpp) reads off a
// Program once, at construction, in the form it looks things up: each parameter group's units; the
// blocks of each checkpointed run and the tasks that end their forwards, as the Program states them
// (Program::checkpoint_runs); the last backward task of each block, and of each operator outside the
// blocks, in each micro-batch, and in a forward-only Program the last forward task of each block, as
// the Program states them (Program::compute_ends). Where each micro-batch's backward starts, and the checkpoint copies
// before it, the backend reads from Program::backward_starts itself. Immutable after construction,
// so safe to read from every lane thread.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "core/graph.hpp"
#include "core/program.hpp"

namespace zinf::engine {

struct GptProgramIndex {
  GptProgramIndex(const core::Program& program, const core::ModelGraph& graph);

  std::vector<std::vector<int32_t>> group_units;  // parameter group -> its units, in tile order
  std::vector<int> ckpt_first_block;              // checkpoint index -> the first block of its run
  std::vector<std::vector<int>> ckpt_blocks;      // checkpoint index -> the blocks of its run
  std::set<int32_t> last_forward_of_run;          // the last forward task of each checkpointed run, per micro-batch
  std::map<int32_t, int> last_backward_of_block;  // Backward task id -> the block whose last backward (in its mb) it is
  std::map<int32_t, int> last_forward_of_block;   // forward-only Programs: Forward task id -> the block it ends
  // The last backward task of each operator outside the blocks in each micro-batch: of a tiled one
  // (the embedding, the head), its last tile's.
  std::set<int32_t> last_backward_outside_blocks;
  // The gradient tasks of the backward (a reduction, a device-to-host copy) whose result a later
  // store of the same unit takes, as the Program states it by a direct dependency: a device-to-host
  // copy's on a reduction, an NVMe write's on a device-to-host copy. The others accumulate into the
  // gradients' home.
  std::set<int32_t> grad_moved_on;
  // (checkpoint, micro-batch) the Program copies off the device.
  std::set<std::pair<int32_t, int32_t>> ckpt_copied_off;
};

}  // namespace zinf::engine
