// GptCudaModel is engine/model/gpt2's per-operator GPT-2 on a GPU: forward, recompute and backward
// of each operator of models::build_gpt's graph (or one row tile of a linear), on the gathered
// bf16 parameters the caller hands in (device pointers, laid out as core's ParamGroup / ParamUnit),
// with fp32 activations and fp32 gradients in the CudaDeviceArena. Gradients ACCUMULATE, as on the CPU.
// It mirrors Gpt2 operator by operator, so the CUDA backend runs the same Program as the CPU one.
//
// GptCudaModel holds the graph and is immutable; a CudaActivations (one per micro-batch in flight)
// belongs to the caller and must not be shared between threads. Each call enqueues on the context's
// stream and returns after that stream has finished (so temporary scratch can be returned at once).
#pragma once
#include <cublas_v2.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "engine/bf16.hpp"
#include "engine/backend/cuda/cuda_device_arena.hpp"

namespace zinf::engine::cuda {

// An fp32 device tensor of n elements from the arena; empty until first written.
struct DeviceTensor {
  DeviceBlock block;
  int64_t n = 0;
  float* data() const { return block.as<float>(); }
  void release() {
    block.reset();
    n = 0;
  }
};

struct CudaBlockActivations {
  DeviceTensor ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, res1, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, mlpproj;
  DeviceTensor d_ln1, d_qkv, d_atty, d_attproj, d_res1, d_ln2, d_fch, d_fch_gelu, d_mlpproj;
  std::vector<DeviceTensor*> all();
  std::vector<DeviceTensor*> grads();
};

struct CudaActivations {
  DeviceBlock inputs, targets;   // int32 tokens, micro_batch x seq each
  std::vector<DeviceTensor> x, dx;  // residual stream: x[l] enters block l
  std::vector<CudaBlockActivations> blocks;
  // The logits (the head's backward writes their gradient over them, a vocabulary tile at a time) and
  // the loss's statistics: three rows of T, the largest logit, the sum of exponentials and the loss.
  DeviceTensor lnf, lnf_mean, lnf_rstd, logits, losses, d_lnf;
  double loss = 0;
  double loss_scale = 1.0;

  void drop_block(int l);
  // Zeroes every allocated gradient on `stream` (before the backward of a micro-batch).
  void zero_grads(cudaStream_t stream);
};

// What a call runs on: the lane's stream and cuBLAS handle (set to that stream).
struct CudaContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

class GptCudaModel {
public:
  GptCudaModel(const core::ModelGraph& graph, CudaDeviceArena& arena);

  const core::ModelGraph& graph() const { return graph_; }
  CudaActivations make_activations() const;
  // Uploads the micro-batch's tokens (micro_batch * seq each; checked against the vocabulary).
  void set_batch(CudaActivations& a, std::span<const int32_t> inputs, std::span<const int32_t> targets,
                 const CudaContext& ctx) const;

  // `params`: the operator's groups in Operator::param_groups order, each `numel` bf16 elements.
  void forward(int op, std::span<const bf16* const> params, CudaActivations& a, const CudaContext& ctx) const;
  void backward(int op, std::span<const bf16* const> params, std::span<float* const> grads, CudaActivations& a,
                const CudaContext& ctx) const;
  // One row tile [r0, r1) of the operator's tiled weight (a linear's output rows, or a vocabulary tile
  // of the embedding or the LM head), as Gpt2::forward_tile: `params` (and `grads`) are the
  // operator's groups, the first holding only the tile's rows. The loss has no backward: the head's
  // computes its gradient over its tile of logits.
  void forward_tile(int op, int64_t r0, int64_t r1, std::span<const bf16* const> params, CudaActivations& a,
                    const CudaContext& ctx) const;
  void backward_tile(int op, int64_t r0, int64_t r1, std::span<const bf16* const> params, std::span<float* const> grads,
                     CudaActivations& a, const CudaContext& ctx) const;

private:
  using Role = core::OpRole;  // the graph's (models/gpt.cpp sets it), never parsed from a name
  struct OpRole {
    Role role;
    int block;
  };
  struct LinearIo {
    DeviceTensor *x, *y, *dx, *dy;
    int64_t in, out;
    bool bias;
  };
  LinearIo linear_io(int op, CudaActivations& a) const;
  float* ensure(DeviceTensor& t, int64_t n, const CudaContext& ctx) const;
  void linear(int op, int64_t r0, int64_t r1, const bf16* w, float* dw, bool backward, CudaActivations& a,
              const CudaContext& ctx) const;
  void embed(int64_t r0, int64_t r1, const bf16* wte, const bf16* wpe, CudaActivations& a, const CudaContext& ctx) const;
  void embed_backward(int64_t r0, int64_t r1, float* dwte, float* dwpe, CudaActivations& a, const CudaContext& ctx) const;
  void head_backward(int op, int64_t r0, int64_t r1, const bf16* w, float* dw, CudaActivations& a,
                     const CudaContext& ctx) const;

  const core::ModelGraph& graph_;
  CudaDeviceArena& arena_;
  std::vector<OpRole> roles_;
  int64_t B_, S_, C_, NH_, V_, F_, T_;
};

}  // namespace zinf::engine::cuda
