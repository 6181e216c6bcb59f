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
// run() is called from the Executor's lane threads: tasks of different segments run concurrently,
// and the Program orders the tasks of one segment (save before load, load before its backward).
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
  ActivationOffloader(const core::Program& program, NvmeStore* store);

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
  NvmeStore* store_;
  mutable std::mutex mu_;
  std::map<Key, Copy> copies_;                  // on the host, or the sizes of what is on NVMe
  std::map<Key, NvmeStore::TensorId> on_nvme_;  // created once, reused every step
  std::map<Key, size_t> nvme_elements_;
};

}  // namespace zinf::engine
