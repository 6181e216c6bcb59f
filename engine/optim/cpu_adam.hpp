// CpuAdam updates optimizer sub-groups in host memory: fp32 master weights and Adam moments m, v,
// from bf16 or fp32 gradients, writing the bf16 parameter copy in the same pass. Each instance
// owns a few worker threads; callers own the arrays. One step() runs at a time per instance
// (calls are serialized internally), so lanes may share one; separate instances run in parallel.
//
// Every path (reference, AVX2, AVX-512) performs the same IEEE operations in the same order per
// element, with no fused multiply-add, so results are bitwise identical to adam_reference for
// any thread count; the SIMD level is picked at run time from what the CPU supports.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/run_config.hpp"
#include "engine/bf16.hpp"

namespace zinf::engine {

struct AdamOptions {
  double lr = 3e-4, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = true;  // AdamW; false is Adam with L2 added to the gradient

  static AdamOptions from_run_config(const core::RunConfig& config);  // optimizer_type adam / adamw
};

enum class SimdLevel { Reference, Avx2, Avx512 };
const char* to_string(SimdLevel s);
bool simd_supported(SimdLevel s);  // does this CPU run it
SimdLevel best_simd_level();

// One Adam step (`step` counts from 1) on n elements. `param_out` may be null.
void adam_reference(const AdamOptions& o, int64_t step, size_t n, float* master, float* m, float* v, const float* grad,
                    bf16* param_out);
void adam_reference(const AdamOptions& o, int64_t step, size_t n, float* master, float* m, float* v, const bf16* grad,
                    bf16* param_out);

class CpuAdam {
public:
  explicit CpuAdam(AdamOptions options, unsigned threads = 1, SimdLevel level = best_simd_level());
  ~CpuAdam();
  CpuAdam(const CpuAdam&) = delete;
  CpuAdam& operator=(const CpuAdam&) = delete;

  void step(int64_t step, size_t n, float* master, float* m, float* v, const float* grad, bf16* param_out);
  void step(int64_t step, size_t n, float* master, float* m, float* v, const bf16* grad, bf16* param_out);

  // The options of the steps from now on (a schedule's rate); waits for a step in progress.
  void set_options(const AdamOptions& options);

  SimdLevel level() const { return level_; }
  unsigned threads() const;
  const AdamOptions& options() const { return options_; }

  struct Workers;

private:
  AdamOptions options_;
  SimdLevel level_;
  std::unique_ptr<Workers> workers_;
};

}  // namespace zinf::engine
