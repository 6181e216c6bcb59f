// The Llama family's operators in Gpt2 (engine/model/gpt2.hpp): what differs from GPT-2's. The
// embedding, residuals, head and loss are GPT-2's code (without a position table); the linears
// are GPT-2's too, writing their columns of the shared qkv and fch tensors.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend/cpu/kernels.hpp"
#include "engine/backend/cpu/llama_kernels.hpp"
#include "engine/model/gpt2.hpp"
#include "models/gpt.hpp"

namespace zinf::engine {

namespace ref = engine::cpu::ref;

namespace {

float* ensure(Activation& v, int64_t n) {
  if (int64_t(v.size()) != n) v.assign(size_t(n), 0.0f);
  return v.data();
}

const float* need(const Activation& v, int64_t n, const std::string& op, const char* what) {
  if (int64_t(v.size()) != n)
    throw std::invalid_argument("llama: operator " + op + ": " + what +
                                " is not resident (not computed yet, or dropped and not recomputed)");
  return v.data();
}

// Columns [off, off + width) of a T x stride tensor, copied out to (or added back from) T x width.
void gather(float* to, const float* from, int64_t T, int64_t stride, int64_t off, int64_t width) {
  for (int64_t t = 0; t < T; ++t) std::copy_n(from + t * stride + off, width, to + t * width);
}
void scatter_add(float* to, const float* from, int64_t T, int64_t stride, int64_t off, int64_t width) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < width; ++i) to[t * stride + off + i] += from[t * width + i];
}

// q, k and v copied out of the shared T x (QW + 2 KW) qkv tensor, q and k rotated: what attention
// reads, in forward and again in backward (qkv keeps the projections, not a second, rotated copy).
struct RotatedQkv {
  std::vector<float> q, k, v;
};
RotatedQkv rotated_qkv(const float* qkv, int64_t B, int64_t S, int64_t NH, int64_t KV, int64_t D, double theta) {
  const int64_t T = B * S, QW = NH * D, KW = KV * D, W = QW + 2 * KW;
  RotatedQkv r{std::vector<float>(size_t(T * QW)), std::vector<float>(size_t(T * KW)), std::vector<float>(size_t(T * KW))};
  gather(r.q.data(), qkv, T, W, 0, QW);
  gather(r.k.data(), qkv, T, W, QW, KW);
  gather(r.v.data(), qkv, T, W, QW + KW, KW);
  ref::rope_forward(r.q.data(), r.q.data(), B, S, NH, D, theta);
  ref::rope_forward(r.k.data(), r.k.data(), B, S, KV, D, theta);
  return r;
}

}  // namespace

void Gpt2::llama_setup() {
  const core::ModelSpec& s = spec();
  const std::string who = "the engine's Llama '" + s.name + "'";
  auto refuse = [&](const std::string& what) { throw std::invalid_argument(who + ": " + what); };
  // The variants the kernels below compute are models/gpt.hpp's to say, so that zinf train refuses
  // the others before it plans.
  if (const models::EngineProblem p = models::llama_engine_problem(s); !p.why.empty()) refuse(p.why + " (" + p.key + ")");
  if (TP_ > 1) refuse("runs without tensor parallelism");
  KV_ = s.kv_head_count(), D_ = s.head_dim();
  QW_ = NH_ * D_, KW_ = KV_ * D_;
  theta_ = s.rope_theta, eps_ = s.norm_eps;
  // The graph's linears of a block in order: q, k, v, o, gate, up, down (core::block_steps).
  std::vector<int> linears(size_t(s.layers), 0);
  for (size_t i = 0; i < graph_.ops.size(); ++i) {
    const core::Operator& op = graph_.ops[i];
    if (op.block < 0 || op.kind != core::OpKind::Linear) continue;
    const int n = linears[size_t(op.block)]++;
    static constexpr Role kRoles[] = {Role::CAttn, Role::CAttn, Role::CAttn, Role::AttnProj,
                                      Role::Fc,    Role::Fc,    Role::MlpProj};
    static constexpr int kParts[] = {0, 1, 2, 0, 0, 1, 0};
    if (n >= 7) refuse("block " + std::to_string(op.block) + " has more than seven linears");
    roles_[i].role = kRoles[n];
    roles_[i].part = kParts[n];
    if (!op.param_groups.empty()) group_role_[size_t(op.param_groups[0])] = kRoles[n];
  }
  for (int l = 0; l < s.layers; ++l)
    if (linears[size_t(l)] != 7) refuse("block " + std::to_string(l) + " does not have Llama's seven linears");
}

Gpt2::LinearIo Gpt2::llama_linear_io(const OpRole& r, Gpt2Activations& a) const {
  BlockActivations& b = a.blocks.at(size_t(r.block));
  const int64_t qkv = QW_ + 2 * KW_;
  switch (r.role) {
    case Role::CAttn: {
      const int64_t off = r.part == 0 ? 0 : r.part == 1 ? QW_ : QW_ + KW_;
      return {&b.ln1, &b.qkv, &b.d_ln1, &b.d_qkv, C_, r.part == 0 ? QW_ : KW_, false, qkv, off};
    }
    case Role::AttnProj: return {&b.atty, &b.attproj, &b.d_atty, &b.d_attproj, QW_, C_, false, C_, 0};
    case Role::Fc: return {&b.ln2, &b.fch, &b.d_ln2, &b.d_fch, C_, F_, false, 2 * F_, r.part * F_};
    case Role::MlpProj: return {&b.fch_gelu, &b.mlpproj, &b.d_fch_gelu, &b.d_mlpproj, F_, C_, false, C_, 0};
    default: throw std::invalid_argument("llama: an operator that is not a linear");
  }
}

bool Gpt2::llama_forward(int op, std::span<const ParamBuf> p, Gpt2Activations& a) const {
  const OpRole r = role(op);
  const std::string& name = graph_.ops[size_t(op)].name;
  const int64_t TC = T_ * C_;
  auto rmsnorm = [&](const Activation& x, Activation& out, Activation& rstd) {
    ref::rmsnorm_forward(ensure(out, TC), ensure(rstd, T_), need(x, TC, name, "the input"), p[0].data, T_, C_, eps_);
  };
  switch (r.role) {
    case Role::Ln1: {
      auto& b = a.blocks[size_t(r.block)];
      rmsnorm(a.x[size_t(r.block)], b.ln1, b.ln1_rstd);
      return true;
    }
    case Role::Ln2: {
      auto& b = a.blocks[size_t(r.block)];
      rmsnorm(b.res1, b.ln2, b.ln2_rstd);
      return true;
    }
    case Role::LnF: rmsnorm(a.x[size_t(spec().layers)], a.lnf, a.lnf_rstd); return true;
    case Role::Attn: {
      auto& b = a.blocks[size_t(r.block)];
      const auto [q, k, v] = rotated_qkv(need(b.qkv, T_ * (QW_ + 2 * KW_), name, "qkv"), B_, S_, NH_, KV_, D_, theta_);
      ref::gqa_attention_forward(ensure(b.atty, T_ * QW_), ensure(b.att, B_ * NH_ * S_ * S_), q.data(), k.data(),
                                 v.data(), B_, S_, NH_, KV_, D_);
      return true;
    }
    case Role::Gelu: {
      auto& b = a.blocks[size_t(r.block)];
      const float* fch = need(b.fch, 2 * T_ * F_, name, "gate_proj and up_proj's output");
      float* out = ensure(b.fch_gelu, T_ * F_);
      for (int64_t t = 0; t < T_; ++t)
        ref::swiglu_forward(out + t * F_, fch + t * 2 * F_, fch + t * 2 * F_ + F_, F_);
      return true;
    }
    default: return false;
  }
}

bool Gpt2::llama_backward(int op, std::span<const ParamBuf> p, std::span<const GradBuf> g, Gpt2Activations& a) const {
  const OpRole r = role(op);
  const std::string& name = graph_.ops[size_t(op)].name;
  const int64_t TC = T_ * C_;
  auto rmsnorm = [&](Activation& dx, const Activation& dout, const Activation& x, const Activation& rstd) {
    ref::rmsnorm_backward(ensure(dx, TC), g[0].data, need(dout, TC, name, "the output gradient"),
                          need(x, TC, name, "the input"), p[0].data, need(rstd, T_, name, "the saved rstd"), T_, C_);
  };
  switch (r.role) {
    case Role::Ln1: {
      auto& b = a.blocks[size_t(r.block)];
      rmsnorm(a.dx[size_t(r.block)], b.d_ln1, a.x[size_t(r.block)], b.ln1_rstd);
      return true;
    }
    case Role::Ln2: {
      auto& b = a.blocks[size_t(r.block)];
      rmsnorm(b.d_res1, b.d_ln2, b.res1, b.ln2_rstd);
      return true;
    }
    case Role::LnF: {
      const size_t L = size_t(spec().layers);
      rmsnorm(a.dx[L], a.d_lnf, a.x[L], a.lnf_rstd);
      return true;
    }
    case Role::Attn: {
      auto& b = a.blocks[size_t(r.block)];
      const int64_t W = QW_ + 2 * KW_;
      auto [q, k, v] = rotated_qkv(need(b.qkv, T_ * W, name, "qkv"), B_, S_, NH_, KV_, D_, theta_);
      std::vector<float> dqr(q.size(), 0.0f), dkr(k.size(), 0.0f), dv(v.size(), 0.0f);
      ref::gqa_attention_backward(dqr.data(), dkr.data(), dv.data(), need(b.d_atty, T_ * QW_, name, "the output gradient"),
                                  q.data(), k.data(), v.data(),
                                  need(b.att, B_ * NH_ * S_ * S_, name, "the attention probabilities"), B_, S_, NH_,
                                  KV_, D_);
      // Back through the rotation into the projections' gradients (q and k reused as buffers).
      std::fill(q.begin(), q.end(), 0.0f);
      std::fill(k.begin(), k.end(), 0.0f);
      ref::rope_backward(q.data(), dqr.data(), B_, S_, NH_, D_, theta_);
      ref::rope_backward(k.data(), dkr.data(), B_, S_, KV_, D_, theta_);
      float* d = ensure(b.d_qkv, T_ * W);
      scatter_add(d, q.data(), T_, W, 0, QW_);
      scatter_add(d, k.data(), T_, W, QW_, KW_);
      scatter_add(d, dv.data(), T_, W, QW_ + KW_, KW_);
      return true;
    }
    case Role::Gelu: {
      auto& b = a.blocks[size_t(r.block)];
      const float* fch = need(b.fch, 2 * T_ * F_, name, "gate_proj and up_proj's output");
      const float* dout = need(b.d_fch_gelu, T_ * F_, name, "the output gradient");
      float* d = ensure(b.d_fch, 2 * T_ * F_);
      for (int64_t t = 0; t < T_; ++t)
        ref::swiglu_backward(d + t * 2 * F_, d + t * 2 * F_ + F_, dout + t * F_, fch + t * 2 * F_,
                             fch + t * 2 * F_ + F_, F_);
      return true;
    }
    default: return false;
  }
}

}  // namespace zinf::engine
