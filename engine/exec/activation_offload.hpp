// ActivationOffloader moves what an offloaded activation segment keeps between its forward and its
// backward — the forward intermediates of its blocks — off the "device" and back, as the
// Program's Data::Activation tasks say (core/activation_pass.hpp decides which segments, where to
// and when). Copies are exact fp32 copies, so a step with offloaded activations computes the same
// numbers as one that keeps them. Host copies live in staging memory; NVMe copies are one tensor of
// the store per (segment, micro-batch), created once and reused every step.
//
// On this (CPU) backend the device is host memory, so a GPUDirect Storage transfer (NVMe <->
// device) reads and writes the device tensors through one bounce buffer of the store; it never
// stages through the host tier the Program accounts for.
//
// With per-tensor choices a segment names the tensors that travel (core::ActivationSegment::tensors);
// a tensor the Program recomputes by its own operator (a Recompute task outside any checkpoint)
// leaves the device after its block's forward (after_forward) and its Recompute task writes it
// again before the block's backward, from its input (kept or brought back first): the same
// kernel on the same input, so the same numbers.
//
// run() and after_forward() are called from the Executor's lane threads: tasks of different
// segments run concurrently, and the Program orders the tasks of one segment (save before load,
// load before its backward).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/program.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/memory/staging_cache.hpp"
#include "engine/model/gpt2.hpp"

namespace zinf::engine {

class ActivationOffloader {
public:
  // `store` may be null when no segment of `program` goes to NVMe.
  ActivationOffloader(const core::Program& program, const core::ModelGraph& graph, NvmeStore* store);

  // After a Forward task: at the end of a block's forward (its second residual), the tensors the
  // Program recomputes per tensor in that block leave the device.
  void after_forward(const core::Task& t, Gpt2Activations& a);

  // One Data::Activation task on micro-batch `t.micro_batch`'s activations `a`.
  void run(const core::Task& t, Gpt2Activations& a);

  // Segments (per micro-batch) whose copies are off the device now.
  size_t copies_held() const;

private:
  using Key = std::pair<int32_t, int32_t>;  // (segment, micro-batch)
  struct Copy {
    std::vector<size_t> sizes;  // per tensor, in forward_tensors order over the segment's blocks
    Staging<float> host;
    size_t elements = 0;
  };
  std::vector<Activation*> tensors(const core::Task& t, Gpt2Activations& a) const;
  Copy pack(const core::Task& t, Gpt2Activations& a) const;
  void unpack(const core::Task& t, Gpt2Activations& a, const Copy& c) const;
  NvmeStore& store(const core::Task& t) const;
  NvmeStore::TensorId nvme_tensor(const Key& key, size_t elements);

  const core::Program& P;
  const core::ModelGraph& G;
  NvmeStore* store_;
  std::map<int, std::vector<core::OpRole>> recomputed_;  // per block: producers recomputed per tensor
  mutable std::mutex mu_;
  std::map<Key, Copy> copies_;                  // on the host, or the sizes of what is on NVMe
  std::map<Key, NvmeStore::TensorId> on_nvme_;  // created once, reused every step
  std::map<Key, size_t> nvme_elements_;
};

}  // namespace zinf::engine
