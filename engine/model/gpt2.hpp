// GPT-2 exactly as Hugging Face's GPT2LMHeadModel (learned positions, pre-LayerNorm blocks,
// tanh GELU, final ln_f, LM head tied to wte), run one core::Operator at a time: forward,
// backward and recompute of each operator of models::build_gpt's graph, on fp32 working copies
// of parameter groups (or tiles) that the caller hands in, plus a whole-model forward/backward.
// Gpt2 holds only the graph and is immutable (thread-safe); a Gpt2Activations (one per
// micro-batch in flight) is owned by the caller and must not be shared between threads.
//
// Buffer layouts follow core's ParamGroup / ParamUnit: a linear is its weight (rows x cols = out x
// in, row-major) followed by its bias (rows); a tile of rows [r0, r1) is weight rows [r0, r1)
// followed by bias [r0, r1); a layernorm is gamma then beta; wte is vocab x hidden, wpe seq x hidden.
// Gradients are ACCUMULATED into the gradient buffers handed in (zero them per step).
//
// The same class runs the Llama family (LlamaForCausalLM: RMSNorm, rotary positions, q/k/v
// projections with grouped-query attention, SwiGLU MLP, no biases, a tied or untied head) from
// models::build_decoder's graph (engine/model/llama_ops.cpp): its tensors reuse GPT-2's names, so
// checkpointing and activation offload treat both alike. qkv holds [q | k | v] per token (q_proj,
// k_proj and v_proj each write their columns), fch [gate | up] (gate_proj, up_proj), fch_gelu
// silu(gate) * up; the norms keep only their rstd; the rotation is recomputed from qkv in backward.
// Tensor parallelism is GPT-2's only.
//
// Tensor parallelism (graph.tensor_parallel t > 1, models/gpt.hpp): the graph is one rank's share and
// Gpt2 runs that share, Megatron-style. c_attn and c_fc hold this rank's output rows (its heads'
// q, k and v rows; its slice of the MLP), both c_proj this rank's input columns with the whole bias
// (added on group rank 0 only, so the group's sum holds it once), wte (and an untied lm_head) this
// rank's ceil(V/t) vocabulary rows, padded with zero rows past V. The sums across the group are
// not inside the operators: the Program runs them as all-reduce tasks after the operators the
// graph marks, and the backend calls tensor_parallel_all_reduce() for each.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/memory/cpu_device_arena.hpp"

namespace zinf::engine {

// fp32 working copy of one parameter group or tile, and its gradient.
struct ParamBuf {
  const float* data = nullptr;
  int64_t numel = 0;
};
struct GradBuf {
  float* data = nullptr;
  int64_t numel = 0;
};

// Which kernels run: the sgemm fast path, or the plain loops of engine/backend/cpu (the reference).
enum class KernelImpl { Fast, Reference };

// Every parameter group of a model as a flat fp32 tensor, indexed by ParamGroup::id.
using Gpt2Params = std::vector<std::vector<float>>;

// Activations of one micro-batch. Block l's input x[l] is its activation checkpoint; the
// intermediates inside a block can be dropped (drop_block) and rebuilt by recomputing the block's
// operators from x[l]. Tensors are allocated on first write; gradients start at zero. They are
// fp32: a device whose hwprofile says `working_precision: fp32` is planned with exactly these
// tensors (core/kernel_activations.hpp).
// An activation tensor: device memory, from the arena make_activations() was given (or the heap).
using Activation = DeviceVector<float>;

struct BlockActivations {
  Activation ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, res1, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
      mlpproj;
  Activation d_ln1, d_qkv, d_atty, d_attproj, d_res1, d_ln2, d_fch, d_fch_gelu, d_mlpproj;
};

struct Gpt2Activations {
  std::vector<int32_t> inputs, targets;  // micro_batch x seq tokens each
  std::vector<Activation> x, dx;  // residual stream: x[l] enters block l, x[layers] enters ln_f
  std::vector<BlockActivations> blocks;
  // The logits (the head's backward writes their gradient over them, a vocabulary tile at a time),
  // and the loss's statistics per token: three rows of T, the largest logit, the sum of
  // exponentials and the loss (under tensor parallelism: the target's logit until the all-reduce).
  Activation lnf, lnf_mean, lnf_rstd, logits, losses;
  Activation d_lnf;
  double loss = 0;  // mean cross-entropy of the last loss forward
  // d(objective)/d(loss) that the loss backward starts from: 1/n when gradients of n micro-batches
  // are summed into one step's mean, or a loss-scaling factor.
  double loss_scale = 1.0;

  // Frees a tensor (its memory goes back to the arena it came from).
  static void release(Activation& v) { v = Activation(v.get_allocator()); }
  // Frees block l's intermediates and their gradients; keeps x[l], x[l+1] and their gradients.
  void drop_block(int l);
  // Zeroes every allocated gradient (call before the backward of each micro-batch).
  void zero_grads();
  // Bytes of fp32 tensors now allocated (activations and gradients).
  int64_t bytes() const;
};

// This process's place in its tensor-parallel group: its rank there and the group's collectives
// (null for tensor_parallel 1).
struct TensorParallelRank {
  int rank = 0;
  Collectives* group = nullptr;
};

class Gpt2 {
 public:
  // Throws std::invalid_argument when the graph is a tensor-parallel share (t > 1) and `tp` has no
  // group of t ranks, or a rank outside it.
  explicit Gpt2(core::ModelGraph graph, KernelImpl impl = KernelImpl::Fast, TensorParallelRank tp = {});

  const core::ModelGraph& graph() const { return graph_; }
  const core::ModelSpec& spec() const { return graph_.spec; }

  // Activations of one micro-batch whose tensors are allocated from `arena` (the heap when null).
  Gpt2Activations make_activations(CpuDeviceArena* arena = nullptr) const;
  // Sets the micro-batch's input and target tokens (micro_batch * seq each, values < vocab).
  void set_batch(Gpt2Activations& a, std::span<const int32_t> inputs, std::span<const int32_t> targets) const;

  // One operator. `params` are the operator's groups in Operator::param_groups order (embed: wte,
  // wpe; lm_head: wte); `grads` likewise. Throws std::invalid_argument naming the operator on a
  // wrong buffer count or size, or when an input activation is missing (dropped, not recomputed).
  // The loss has no backward (Operator::backward): the head's backward computes its gradient.
  void forward(int op, std::span<const ParamBuf> params, Gpt2Activations& a) const;
  void backward(int op, std::span<const ParamBuf> params, std::span<const GradBuf> grads, Gpt2Activations& a) const;
  // Forward of an operator inside a block, run again in backward from the block's checkpoint.
  void recompute(int op, std::span<const ParamBuf> params, Gpt2Activations& a) const;

  // One row tile [r0, r1) of an operator's tiled weight: a linear's output rows (c_attn, c_proj,
  // c_fc, mlp.c_proj), or a vocabulary tile of the embedding or the LM head (wte's rows, this rank's
  // share's under tensor parallelism). `params` (and `grads`) are the operator's groups as for
  // forward(), the tiled one (the first) holding only its tile's rows. All tiles together equal
  // forward()/backward() of the whole operator: bitwise, but for the input gradient of a linear,
  // which the tiles sum in a different order (a vocabulary tile of the head: over the vocabulary).
  // The embedding's tiles write the tokens in their rows (the first tile, r0 = 0, also those outside
  // this rank's vocabulary) and add the position embedding's gradient once (the first tile); the
  // head's backward turns its tile of logits into their gradient first (the loss's backward).
  void forward_tile(int op, int64_t r0, int64_t r1, std::span<const ParamBuf> params, Gpt2Activations& a) const;
  void backward_tile(int op, int64_t r0, int64_t r1, std::span<const ParamBuf> params, std::span<const GradBuf> grads,
                     Gpt2Activations& a) const;

  // Tensor parallelism: the all-reduce over the group that the Program runs after operator `op`'s
  // forward or recompute (after_backward false: the embedding's and the row-parallel linears'
  // partial outputs; the vocabulary-parallel loss, which this completes: a.loss is final after it)
  // or after its backward (the column-parallel linears' and the head's input gradients). Throws
  // std::logic_error for an operator the graph marks for none.
  void tensor_parallel_all_reduce(int op, bool after_backward, Gpt2Activations& a) const;
  int tensor_parallel() const { return int(TP_); }
  int tensor_parallel_rank() const { return tp_.rank; }
  // The tensor-parallel group's collectives (a logic_error for tensor_parallel 1, which has none).
  Collectives& tensor_parallel_group() const {
    if (!tp_.group) throw std::logic_error("gpt2: no tensor-parallel group at tensor_parallel 1");
    return *tp_.group;
  }
  // This rank's share of parameter group `group` from the whole model's tensor of it (the layout
  // above); a copy for tensor_parallel 1.
  void shard_group(int32_t group, const std::vector<float>& whole, std::vector<float>& out) const;
  // The whole model's tensor of group `group` from every rank's share, rank 0's first (an all-gather
  // over the group lays them out so); `shares` holds t times the group's numel.
  void whole_group(int32_t group, const std::vector<float>& shares, std::vector<float>& out) const;

  // The whole model on resident parameters: forward and loss, then (forward_backward) the backward
  // of every operator, accumulating into grads. Returns the mean loss.
  double forward(const Gpt2Params& params, Gpt2Activations& a) const;
  double forward_backward(const Gpt2Params& params, Gpt2Params& grads, Gpt2Activations& a) const;

  // GPT-2's initialization, deterministic in seed: weights N(0, 0.02), residual projections
  // (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 layers)), biases 0, layernorm gamma 1 beta 0.
  Gpt2Params init_params(uint64_t seed) const;
  // The same initialization one parameter group at a time, for models whose parameters do not fit
  // in memory at once: call next(out) once per group, in group order; group g's values equal
  // init_params(seed)[g]. Holds the generator's state (and, under tensor parallelism, one whole
  // group: each rank's share is cut from the whole model's initialization, so every degree trains
  // the same model).
  class InitStream {
  public:
    InitStream(const Gpt2& model, uint64_t seed);
    void next(int32_t group, std::vector<float>& out);

  private:
    const Gpt2& model_;
    uint64_t rng_state_;
    int32_t next_group_ = 0;
    std::vector<float> whole_;
  };
  Gpt2Params zeros() const;

 private:
  using Role = core::OpRole;  // the graph's (models/gpt.cpp sets it), never parsed from a name
  struct OpRole {
    Role role;
    int block;
    int part = 0;  // Llama: which of q/k/v (0-2), of gate/up (0-1) a CAttn or Fc linear is
  };
  struct LinearIo {  // a linear operator's input, output and their gradients
    const Activation* x;
    Activation* y;
    Activation* dx;
    Activation* dy;
    int64_t in, out;
    bool bias;
    // The output's row width and this linear's first column in it: out and 0, but for Llama's
    // q/k/v and gate/up, which share one tensor.
    int64_t stride, offset;
  };

  struct WholeShape {  // a parameter group's shape in the whole model
    int64_t rows, cols, numel;
  };
  WholeShape whole_shape(int32_t group) const;
  void copy_share(int32_t group, int rank, const float* from, float* to, bool to_share) const;
  // Whether this rank adds a linear's bias in forward: a row-parallel linear's partial outputs are
  // summed over the group, so only group rank 0 adds its (whole) bias.
  bool adds_bias(const LinearIo& io, Role r) const {
    return io.bias && !((r == Role::AttnProj || r == Role::MlpProj) && tp_.rank != 0);
  }
  // The embedding over the vocabulary rows [r0, r1) of this rank's share (wte holds those rows).
  void embed_forward(int64_t r0, int64_t r1, const float* wte, const float* wpe, Gpt2Activations& a) const;
  void embed_backward(int64_t r0, int64_t r1, float* dwte, float* dwpe, Gpt2Activations& a) const;
  // The head's backward over vocabulary rows [r0, r1) (w and dw hold those rows): the loss's
  // gradient over those logits, in place, then dW and dX.
  void head_backward(int64_t r0, int64_t r1, const float* w, float* dw, Gpt2Activations& a) const;
  // Tensor-parallel forms of the operators whose math changes beyond their widths.
  void tp_loss_forward(Gpt2Activations& a) const;
  void tp_loss_reduce(Gpt2Activations& a) const;

  // Llama (engine/model/llama_ops.cpp): the checks and shapes, the linears' places in the shared
  // tensors, and the operators whose math differs from GPT-2's (norms, attention, the gate),
  // which return false for the rest.
  void llama_setup();
  LinearIo llama_linear_io(const OpRole& r, Gpt2Activations& a) const;
  bool llama_forward(int op, std::span<const ParamBuf> p, Gpt2Activations& a) const;
  bool llama_backward(int op, std::span<const ParamBuf> p, std::span<const GradBuf> g, Gpt2Activations& a) const;

  const OpRole& role(int op) const;
  LinearIo linear_io(int op, Gpt2Activations& a) const;
  void run_forward(int op, std::span<const ParamBuf> params, Gpt2Activations& a) const;
  void check_params(int op, std::span<const ParamBuf> params) const;
  void check_tile(int op, int64_t r0, int64_t r1, std::span<const ParamBuf> params, std::span<const GradBuf> grads) const;
  void check_activations(const Gpt2Activations& a) const;

  core::ModelGraph graph_;
  KernelImpl impl_;
  std::vector<OpRole> roles_;
  int64_t B_, S_, C_, NH_, V_, F_, T_;
  // This rank's widths: attention (C/t, NH/t heads), MLP (F/t), vocabulary rows (ceil(V/t), of
  // which Vvalid_ are real tokens from Voff_ on); equal to the whole model's for t = 1.
  int64_t TP_ = 1, Ca_, NHl_, Fl_, Vl_, Voff_, Vvalid_;
  TensorParallelRank tp_;
  std::vector<Role> group_role_;  // the role of the operator that first reads each group
  // Llama: query and key/value heads' widths (NH * D, KV * D), key/value heads, head size, rotary
  // base and the norms' epsilon.
  bool llama_ = false;
  int64_t QW_ = 0, KW_ = 0, KV_ = 0, D_ = 0;
  double theta_ = 0, eps_ = 0;
};

}  // namespace zinf::engine
