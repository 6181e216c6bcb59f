// ActivationOffloader moves what an offloaded activation segment keeps between its forward and its
// backward — the forward intermediates of its blocks — off the device and back, as the Program's
// Data::Activation tasks say (core/activation_pass.hpp decides which segments, where to and when).
// Copies are exact fp32 copies, so a step with offloaded activations computes the same numbers as
// one that keeps them. Host copies live in host memory the device hands out (staging memory on the
// CPU backend, pinned memory on CUDA); NVMe copies are one tensor of the store per (segment,
// micro-batch), created once and reused every step.
//
// The offloader is the task logic, written once for every device: which tensors a task names, the
// order save -> (NVMe write) -> (NVMe read) -> restore, and the bookkeeping in between. The device
// supplies only its tensors and the copies (ActivationDevice): GptCpuBackend, whose device is a
// budgeted host arena, and GptCudaBackend, which copies on the task's lane stream through pinned
// host memory. A GPUDirect Storage transfer (NVMe <-> device) goes through one bounce buffer the
// device hands out on both: neither has a cuFile path (the CUDA backend says so once on stderr);
// the bounce buffer is not the host tier the Program accounts for.
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
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.hpp"
#include "core/program.hpp"
#include "engine/io/nvme_store.hpp"

namespace zinf::engine {

// One tensor a block keeps for its backward: a member of the GPT backends' block activations
// (BlockActivations on the CPU, cuda::CudaBlockActivations), which have the same names.
enum class SavedTensor : int8_t {
  Ln1, Ln1Mean, Ln1Rstd, Qkv, Atty, Att, AttProj, Res1, Ln2, Ln2Mean, Ln2Rstd, Fch, FchGelu, MlpProj
};

// The member of block activations `b` that `t` names.
template <class Block>
auto& saved_tensor(Block& b, SavedTensor t) {
  switch (t) {
    case SavedTensor::Ln1: return b.ln1;
    case SavedTensor::Ln1Mean: return b.ln1_mean;
    case SavedTensor::Ln1Rstd: return b.ln1_rstd;
    case SavedTensor::Qkv: return b.qkv;
    case SavedTensor::Atty: return b.atty;
    case SavedTensor::Att: return b.att;
    case SavedTensor::AttProj: return b.attproj;
    case SavedTensor::Res1: return b.res1;
    case SavedTensor::Ln2: return b.ln2;
    case SavedTensor::Ln2Mean: return b.ln2_mean;
    case SavedTensor::Ln2Rstd: return b.ln2_rstd;
    case SavedTensor::Fch: return b.fch;
    case SavedTensor::FchGelu: return b.fch_gelu;
    case SavedTensor::MlpProj: break;
  }
  return b.mlpproj;
}

// The kernel tensors of one of core::block_tensors' names (what its producer writes); throws
// std::invalid_argument for a name the GPT backends do not keep.
std::vector<SavedTensor> activation_tensors(const std::string& name);

struct ActivationRef {
  int block = 0;
  SavedTensor tensor = SavedTensor::Ln1;
};

// Host memory of fp32 elements that a device copies to and from and the NVMe store reads and
// writes (aligned as the store's O_DIRECT transfers want); it returns itself when the last
// reference goes.
using HostFloats = std::shared_ptr<float>;

// What a device supplies to the offloader. Each call is made on the lane thread of the task it
// names; the tensors are those of micro-batch t.micro_batch.
class ActivationDevice {
public:
  virtual ~ActivationDevice() = default;
  // Elements that tensor r of micro-batch mb holds on the device now (0 when it holds none).
  virtual size_t activation_elements(int32_t mb, ActivationRef r) = 0;
  // Host memory of n elements (n may be 0).
  virtual HostFloats activation_host(size_t n) = 0;
  // Copies tensors `refs` (of `sizes` elements) one after another into `host`, then frees them on
  // the device; returns once the copy is complete.
  virtual void save_activations(const core::Task& t, std::span<const ActivationRef> refs,
                                std::span<const size_t> sizes, float* host) = 0;
  // Allocates tensors `refs` of `sizes` elements on the device (a size 0 leaves its tensor freed)
  // and fills them from `host`; returns once the copy is complete.
  virtual void restore_activations(const core::Task& t, std::span<const ActivationRef> refs,
                                   std::span<const size_t> sizes, const float* host) = 0;
  // Frees tensor r of micro-batch mb on the device.
  virtual void release_activation(int32_t mb, ActivationRef r) = 0;
};

class ActivationOffloader {
public:
  // `store` may be null when no segment of `program` goes to NVMe. Refuses a Program that names a
  // tensor the GPT backends do not keep, or recomputes one they cannot (by name).
  ActivationOffloader(const core::Program& program, const core::ModelGraph& graph, NvmeStore* store,
                      ActivationDevice& device);

  // After a compute task: at the end of a block's forward (its second residual), the tensors the
  // Program recomputes per tensor in that block leave the device.
  void after_forward(const core::Task& t);

  // One Data::Activation task.
  void run(const core::Task& t);

  // Drops every host copy held (a step that failed midway leaves some), so that host memory a
  // device lent goes back before the device does.
  void clear();

private:
  using Key = std::pair<int32_t, int32_t>;  // (segment, micro-batch)
  struct Copy {
    std::vector<size_t> sizes;  // per tensor, in tensors() order
    HostFloats host;
    size_t elements = 0;
  };
  // The tensors a Data::Activation task moves, in the order its copies hold them.
  std::vector<ActivationRef> tensors(const core::Task& t) const;
  Copy pack(const core::Task& t) const;
  void unpack(const core::Task& t, const Copy& c) const;
  NvmeStore& store(const core::Task& t) const;
  NvmeStore::TensorId nvme_tensor(const Key& key, size_t elements);

  const core::Program& P;
  const core::ModelGraph& G;
  NvmeStore* store_;
  ActivationDevice& device_;
  std::map<int, std::vector<core::OpRole>> recomputed_;  // per block: producers recomputed per tensor
  mutable std::mutex mu_;
  std::map<Key, Copy> copies_;                  // on the host, or the sizes of what is on NVMe
  std::map<Key, NvmeStore::TensorId> on_nvme_;  // created once, reused every step
  std::map<Key, size_t> nvme_elements_;
};

}  // namespace zinf::engine
