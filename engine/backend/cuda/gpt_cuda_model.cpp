#include "engine/backend/cuda/gpt_cuda_model.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "engine/backend/cuda/cuda_check.hpp"
#include "engine/backend/cuda/gemm.hpp"
#include "engine/backend/cuda/kernels.hpp"

namespace zinf::engine::cuda {

namespace {

const float* need(const DeviceTensor& t, int64_t n, const std::string& op, const char* what) {
  if (t.n != n || !t.block)
    throw std::invalid_argument(fmt::format("gpt2 (cuda): operator {}: {} is not resident (not computed yet, or "
                                            "dropped and not recomputed)",
                                            op, what));
  return t.data();
}

}  // namespace

std::vector<DeviceTensor*> CudaBlockActivations::all() {
  return {&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &att, &attproj, &res1, &ln2, &ln2_mean, &ln2_rstd, &fch,
          &fch_gelu, &mlpproj, &d_ln1, &d_qkv, &d_atty, &d_attproj, &d_res1, &d_ln2, &d_fch, &d_fch_gelu, &d_mlpproj};
}

std::vector<DeviceTensor*> CudaBlockActivations::grads() {
  return {&d_ln1, &d_qkv, &d_atty, &d_attproj, &d_res1, &d_ln2, &d_fch, &d_fch_gelu, &d_mlpproj};
}

void CudaActivations::drop_block(int l) {
  for (DeviceTensor* t : blocks.at(size_t(l)).all()) t->release();
}

void CudaActivations::zero_grads(cudaStream_t stream) {
  auto zero = [&](DeviceTensor& t) {
    if (t.block) ZINF_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, size_t(t.n) * sizeof(float), stream));
  };
  for (auto& t : dx) zero(t);
  for (auto& b : blocks)
    for (DeviceTensor* t : b.grads()) zero(*t);
  zero(d_lnf);
}

GptCudaModel::GptCudaModel(const core::ModelGraph& graph, CudaDeviceArena& arena) : graph_(graph), arena_(arena) {
  const core::ModelSpec& s = graph_.spec;
  if (s.heads <= 0 || s.hidden % s.heads != 0)
    throw std::invalid_argument("gpt2 '" + s.name + "': hidden must be a multiple of heads");
  B_ = s.micro_batch, S_ = s.seq, C_ = s.hidden, NH_ = s.heads, V_ = s.vocab, F_ = s.ffn_hidden();
  T_ = B_ * S_;
  for (const core::Operator& op : graph_.ops) {
    if (op.role == Role::None)
      throw std::invalid_argument("gpt2 (cuda): operator '" + op.name + "' has no GPT-2 role in the graph");
    const Role r = op.role;
    roles_.push_back({r, op.block});
  }
}

CudaActivations GptCudaModel::make_activations() const {
  CudaActivations a;
  a.x.resize(size_t(graph_.spec.layers + 1));
  a.dx.resize(size_t(graph_.spec.layers + 1));
  a.blocks.resize(size_t(graph_.spec.layers));
  return a;
}

void GptCudaModel::set_batch(CudaActivations& a, std::span<const int32_t> inputs, std::span<const int32_t> targets,
                             const CudaContext& ctx) const {
  if (int64_t(inputs.size()) != T_ || int64_t(targets.size()) != T_)
    throw std::invalid_argument(fmt::format("gpt2 (cuda): a micro-batch has {} input and target tokens, got {} and {}",
                                            T_, inputs.size(), targets.size()));
  for (auto span : {inputs, targets})
    for (int32_t t : span)
      if (t < 0 || t >= V_)
        throw std::invalid_argument(fmt::format("gpt2 (cuda): token {} is outside the vocabulary of {}", t, V_));
  if (!a.inputs) a.inputs = arena_.allocate(uint64_t(T_) * sizeof(int32_t), "input tokens");
  if (!a.targets) a.targets = arena_.allocate(uint64_t(T_) * sizeof(int32_t), "target tokens");
  ZINF_CUDA_CHECK(cudaMemcpyAsync(a.inputs.data(), inputs.data(), inputs.size_bytes(), cudaMemcpyHostToDevice, ctx.stream));
  ZINF_CUDA_CHECK(cudaMemcpyAsync(a.targets.data(), targets.data(), targets.size_bytes(), cudaMemcpyHostToDevice,
                                  ctx.stream));
  ZINF_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

float* GptCudaModel::ensure(DeviceTensor& t, int64_t n, const CudaContext& ctx) const {
  if (t.n != n || !t.block) {
    t.block = arena_.allocate(uint64_t(n) * sizeof(float), "activations");
    t.n = n;
    ZINF_CUDA_CHECK(cudaMemsetAsync(t.data(), 0, size_t(n) * sizeof(float), ctx.stream));
  }
  return t.data();
}

GptCudaModel::LinearIo GptCudaModel::linear_io(int op, CudaActivations& a) const {
  const OpRole& r = roles_.at(size_t(op));
  auto blk = [&]() -> CudaBlockActivations& { return a.blocks.at(size_t(r.block)); };
  switch (r.role) {
    case Role::CAttn: return {&blk().ln1, &blk().qkv, &blk().d_ln1, &blk().d_qkv, C_, 3 * C_, true};
    case Role::AttnProj: return {&blk().atty, &blk().attproj, &blk().d_atty, &blk().d_attproj, C_, C_, true};
    case Role::Fc: return {&blk().ln2, &blk().fch, &blk().d_ln2, &blk().d_fch, C_, F_, true};
    case Role::MlpProj: return {&blk().fch_gelu, &blk().mlpproj, &blk().d_fch_gelu, &blk().d_mlpproj, F_, C_, true};
    // The head's output gradient is written over its logits (head_backward).
    case Role::LmHead: return {&a.lnf, &a.logits, &a.d_lnf, &a.logits, C_, V_, false};
    default: throw std::invalid_argument("gpt2 (cuda): operator " + graph_.ops[size_t(op)].name + " is not a linear");
  }
}

// One row tile [r0, r1) of a linear (the whole layer is [0, out)): w holds the tile's weight rows
// then its biases; dw likewise. Scratch for the bf16 operands comes from the arena for this call.
void GptCudaModel::linear(int op, int64_t r0, int64_t r1, const bf16* w, float* dw, bool backward, CudaActivations& a,
                          const CudaContext& ctx) const {
  const LinearIo io = linear_io(op, a);
  const std::string& name = graph_.ops[size_t(op)].name;
  const int64_t rows = r1 - r0;
  if (r0 < 0 || r1 > io.out || rows <= 0)
    throw std::invalid_argument(fmt::format("gpt2 (cuda): operator {}: bad tile [{}, {}) of {} rows", name, r0, r1, io.out));
  const float* x = need(*io.x, T_ * io.in, name, "the input");
  const bf16* b = io.bias ? w + rows * io.in : nullptr;
  DeviceBlock xs = arena_.allocate(uint64_t(T_ * io.in) * sizeof(bf16), "linear scratch");
  DeviceBlock dys;
  if (!backward) {
    linear_forward(ctx.blas, ensure(*io.y, T_ * io.out, ctx), x, w, b, T_, io.in, io.out, r0, r1, xs.as<bf16>());
  } else {
    dys = arena_.allocate(uint64_t(T_ * io.out) * sizeof(bf16), "linear scratch");
    linear_backward(ctx.blas, ensure(*io.dx, T_ * io.in, ctx), dw, io.bias ? dw + rows * io.in : nullptr,
                    need(*io.dy, T_ * io.out, name, "the output gradient"), x, w, T_, io.in, io.out, r0, r1,
                    xs.as<bf16>(), dys.as<bf16>());
  }
  ZINF_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));  // before the scratch goes back to the arena
}

void GptCudaModel::forward(int op, std::span<const bf16* const> p, CudaActivations& a, const CudaContext& ctx) const {
  const OpRole r = roles_.at(size_t(op));
  const std::string& name = graph_.ops[size_t(op)].name;
  const int64_t TC = T_ * C_;
  cudaStream_t s = ctx.stream;
  auto layernorm = [&](const DeviceTensor& x, DeviceTensor& out, DeviceTensor& mean, DeviceTensor& rstd) {
    layernorm_forward(ensure(out, TC, ctx), ensure(mean, T_, ctx), ensure(rstd, T_, ctx), need(x, TC, name, "the input"),
                      p[0], p[0] + C_, T_, C_, s);
  };
  switch (r.role) {
    case Role::None:  // refused by the constructor
      throw std::logic_error("an operator without a role");
    case Role::Embed: return embed(0, V_, p[0], p[1], a, ctx);
    case Role::Ln1: {
      auto& b = a.blocks[size_t(r.block)];
      layernorm(a.x[size_t(r.block)], b.ln1, b.ln1_mean, b.ln1_rstd);
      break;
    }
    case Role::Ln2: {
      auto& b = a.blocks[size_t(r.block)];
      layernorm(b.res1, b.ln2, b.ln2_mean, b.ln2_rstd);
      break;
    }
    case Role::LnF: layernorm(a.x[size_t(graph_.spec.layers)], a.lnf, a.lnf_mean, a.lnf_rstd); break;
    case Role::CAttn:
    case Role::AttnProj:
    case Role::Fc:
    case Role::MlpProj:
    case Role::LmHead: linear(op, 0, linear_io(op, a).out, p[0], nullptr, false, a, ctx); return;
    case Role::Attn: {
      auto& b = a.blocks[size_t(r.block)];
      DeviceBlock scratch = arena_.allocate(uint64_t(attention_scratch(B_, S_, C_, NH_)) * sizeof(float), "attention scratch");
      attention_forward(ctx.blas, ensure(b.atty, TC, ctx), ensure(b.att, B_ * NH_ * S_ * S_, ctx),
                        need(b.qkv, 3 * TC, name, "qkv"), B_, S_, C_, NH_, scratch.as<float>());
      ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
      return;
    }
    case Role::Res1: {
      auto& b = a.blocks[size_t(r.block)];
      residual_forward(ensure(b.res1, TC, ctx), need(a.x[size_t(r.block)], TC, name, "the block input"),
                       need(b.attproj, TC, name, "attn.c_proj's output"), TC, s);
      break;
    }
    case Role::Res2: {
      auto& b = a.blocks[size_t(r.block)];
      residual_forward(ensure(a.x[size_t(r.block + 1)], TC, ctx), need(b.res1, TC, name, "residual_1's output"),
                       need(b.mlpproj, TC, name, "mlp.c_proj's output"), TC, s);
      break;
    }
    case Role::Gelu: {
      auto& b = a.blocks[size_t(r.block)];
      gelu_forward(ensure(b.fch_gelu, T_ * F_, ctx), need(b.fch, T_ * F_, name, "mlp.c_fc's output"), T_ * F_, s);
      break;
    }
    case Role::Loss: {
      if (!a.targets) throw std::invalid_argument("gpt2 (cuda): loss: no micro-batch set");
      crossentropy_forward(ensure(a.losses, 3 * T_, ctx), need(a.logits, T_ * V_, name, "the logits"),
                           a.targets.as<int32_t>(), T_, V_, s);
      std::vector<float> losses(static_cast<size_t>(T_));
      ZINF_CUDA_CHECK(cudaMemcpyAsync(losses.data(), a.losses.data() + 2 * T_, losses.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
      ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
      double total = 0;
      for (float l : losses) total += double(l);
      a.loss = total / double(T_);
      return;
    }
  }
  ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
}

void GptCudaModel::backward(int op, std::span<const bf16* const> p, std::span<float* const> g, CudaActivations& a,
                            const CudaContext& ctx) const {
  const OpRole r = roles_.at(size_t(op));
  const std::string& name = graph_.ops[size_t(op)].name;
  const int64_t TC = T_ * C_;
  cudaStream_t s = ctx.stream;
  auto layernorm = [&](DeviceTensor& dx, const DeviceTensor& dout, const DeviceTensor& x, const DeviceTensor& mean,
                       const DeviceTensor& rstd) {
    layernorm_backward(ensure(dx, TC, ctx), g[0], g[0] + C_, need(dout, TC, name, "the output gradient"),
                       need(x, TC, name, "the input"), p[0], need(mean, T_, name, "the saved mean"),
                       need(rstd, T_, name, "the saved rstd"), T_, C_, s);
  };
  switch (r.role) {
    case Role::None:  // refused by the constructor
      throw std::logic_error("an operator without a role");
    case Role::Loss:
      throw std::invalid_argument("gpt2 (cuda): operator " + name + " has no backward: the head's backward computes it");
    case Role::LnF: {
      const size_t L = size_t(graph_.spec.layers);
      layernorm(a.dx[L], a.d_lnf, a.x[L], a.lnf_mean, a.lnf_rstd);
      break;
    }
    case Role::Ln1: {
      auto& b = a.blocks[size_t(r.block)];
      layernorm(a.dx[size_t(r.block)], b.d_ln1, a.x[size_t(r.block)], b.ln1_mean, b.ln1_rstd);
      break;
    }
    case Role::Ln2: {
      auto& b = a.blocks[size_t(r.block)];
      layernorm(b.d_res1, b.d_ln2, b.res1, b.ln2_mean, b.ln2_rstd);
      break;
    }
    case Role::LmHead: return head_backward(op, 0, V_, p[0], g[0], a, ctx);
    case Role::CAttn:
    case Role::AttnProj:
    case Role::Fc:
    case Role::MlpProj: linear(op, 0, linear_io(op, a).out, p[0], g[0], true, a, ctx); return;
    case Role::Attn: {
      auto& b = a.blocks[size_t(r.block)];
      DeviceBlock scratch = arena_.allocate(uint64_t(attention_scratch(B_, S_, C_, NH_)) * sizeof(float), "attention scratch");
      attention_backward(ctx.blas, ensure(b.d_qkv, 3 * TC, ctx), need(b.d_atty, TC, name, "the output gradient"),
                         need(b.qkv, 3 * TC, name, "qkv"), need(b.att, B_ * NH_ * S_ * S_, name, "the attention probabilities"),
                         B_, S_, C_, NH_, scratch.as<float>());
      ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
      return;
    }
    case Role::Res1: {
      auto& b = a.blocks[size_t(r.block)];
      residual_backward(ensure(a.dx[size_t(r.block)], TC, ctx), ensure(b.d_attproj, TC, ctx),
                        need(b.d_res1, TC, name, "the output gradient"), TC, s);
      break;
    }
    case Role::Res2: {
      auto& b = a.blocks[size_t(r.block)];
      residual_backward(ensure(b.d_res1, TC, ctx), ensure(b.d_mlpproj, TC, ctx),
                        need(a.dx[size_t(r.block + 1)], TC, name, "the output gradient"), TC, s);
      break;
    }
    case Role::Gelu: {
      auto& b = a.blocks[size_t(r.block)];
      gelu_backward(ensure(b.d_fch, T_ * F_, ctx), need(b.d_fch_gelu, T_ * F_, name, "the output gradient"),
                    need(b.fch, T_ * F_, name, "mlp.c_fc's output"), T_ * F_, s);
      break;
    }
    case Role::Embed: return embed_backward(0, V_, g[0], g[1], a, ctx);
  }
  ZINF_CUDA_CHECK(cudaStreamSynchronize(s));
}

// The tokens in vocabulary rows [r0, r1) (wte holds those rows); each token's row is written by the
// one tile that holds it.
void GptCudaModel::embed(int64_t r0, int64_t r1, const bf16* wte, const bf16* wpe, CudaActivations& a,
                         const CudaContext& ctx) const {
  if (!a.inputs) throw std::invalid_argument("gpt2 (cuda): embed: no micro-batch set");
  embedding_forward(ensure(a.x[0], T_ * C_, ctx), a.inputs.as<int32_t>(), wte, wpe, B_, S_, C_, r0, r1, ctx.stream);
  ZINF_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

// wte's rows [r0, r1) get their tokens' gradients; the position embedding's is added once, by the
// first tile (r0 = 0).
void GptCudaModel::embed_backward(int64_t r0, int64_t r1, float* dwte, float* dwpe, CudaActivations& a,
                                  const CudaContext& ctx) const {
  embedding_backward(dwte, r0 == 0 ? dwpe : nullptr, need(a.dx[0], T_ * C_, "embed", "the output gradient"),
                     a.inputs.as<int32_t>(), B_, S_, C_, r0, r1, ctx.stream);
  ZINF_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

// The loss's gradient over the head's vocabulary rows [r0, r1), written over those logits, then the
// tile's dW and dX from it.
void GptCudaModel::head_backward(int op, int64_t r0, int64_t r1, const bf16* w, float* dw, CudaActivations& a,
                                 const CudaContext& ctx) const {
  const float* stats = need(a.losses, 3 * T_, "lm_head", "the loss's statistics (the loss ran)");
  need(a.logits, T_ * V_, "lm_head", "the logits");
  crossentropy_backward(a.logits.data(), stats, a.targets.as<int32_t>(), float(a.loss_scale / double(T_)), T_, V_, r0,
                        r1, ctx.stream);
  linear(op, r0, r1, w, dw, true, a, ctx);
}

void GptCudaModel::forward_tile(int op, int64_t r0, int64_t r1, std::span<const bf16* const> params,
                                CudaActivations& a, const CudaContext& ctx) const {
  if (roles_.at(size_t(op)).role == Role::Embed) return embed(r0, r1, params[0], params[1], a, ctx);
  linear(op, r0, r1, params[0], nullptr, false, a, ctx);
}

void GptCudaModel::backward_tile(int op, int64_t r0, int64_t r1, std::span<const bf16* const> params,
                                 std::span<float* const> grads, CudaActivations& a, const CudaContext& ctx) const {
  switch (roles_.at(size_t(op)).role) {
    case Role::Embed: return embed_backward(r0, r1, grads[0], grads[1], a, ctx);
    case Role::LmHead: return head_backward(op, r0, r1, params[0], grads[0], a, ctx);
    default: return linear(op, r0, r1, params[0], grads[0], true, a, ctx);
  }
}

}  // namespace zinf::engine::cuda
