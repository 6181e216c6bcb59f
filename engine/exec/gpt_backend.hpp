// GptCpuBackend is what each task of a core::Program means when it trains a GPT-2 on the CPU
// backend: parameter shards read from NVMe and copied to the "device" (a budgeted host arena on this
// backend), all-gathered into fp32 working copies, operators run forward / recomputed / backward,
// gradients reduce-scattered, accumulated over micro-batches as bf16 shards on their tier,
// activation checkpoints moved to host or NVMe and back, and optimizer sub-groups updated by CPU
// Adam with their fp32 master weights and moments read from and written back to their tier.
//
// It decides nothing (docs/DESIGN.md): which shard, tier, tile, buffer and order come from the Program;
// the backend only keeps the data each task names. One backend per rank; run() is called
// concurrently from the Executor's lane threads and is thread-safe; the other methods are called
// between steps from one thread. ZeRO stage 3 only: stages 0-2 keep whole parameters on every
// device, which this backend does not implement (the planner and the simulator do).
#pragma once
#include <functional>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "engine/bf16.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/exec/training_backend.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/model/gpt2.hpp"
#include "engine/optim/cpu_adam.hpp"

namespace zinf::engine {

struct GptBackendOptions {
  std::string nvme_dir;          // this rank's directory for NVMe tiers; required when a state lives on NVMe
  unsigned adam_threads = 1;
  core::RunConfig config;        // optimizer hyper-parameters, aio settings, clipping
};

class GptCpuBackend final : public TrainingBackend {
public:
  GptCpuBackend(const core::Program& program, const core::Plan& plan, const Gpt2& model, int rank, Collectives& comm,
                GptBackendOptions options);
  ~GptCpuBackend() override;

  // Initialization and load_state go a group at a time (streams_state): host memory holds one
  // group's tensor and one unit's shard of it, never the model (a model larger than RAM starts
  // from NVMe this way).
  using TrainingBackend::initialize;
  void begin_step(int64_t step, std::vector<Batch> batches) override;
  void run(const core::Task& task) override;
  std::vector<core::TaskWait> waits() const override;
  double loss() const override;
  double grad_norm() const override { return grad_norm_; }
  // Computed with or without clipping, after the last micro-batch.
  std::optional<LocalGradCheck> local_grad_check() const override;
  // Bytes of the device arena (homes on the device, fetched and gathered parameters, gradients,
  // activations) at their peak since the last reset; the budget is the Program's device budget.
  int64_t device_peak_bytes() const override;
  void reset_device_peak() override;

  FullState gather_state() override;
  void load_state(const FullState& s) override;
  bool streams_state() const override { return true; }
  // Reads this rank's shards of the group unit by unit from their tier.
  void gather_group(int32_t group, StateTensor which, std::vector<float>& out) override;
  void load_state(const GroupReader& master, const GroupReader& m, const GroupReader& v) override;

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
  double grad_norm_ = 0;
};

}  // namespace zinf::engine
