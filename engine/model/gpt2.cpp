#include "engine/model/gpt2.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "engine/backend/cpu/kernels.hpp"
#include "engine/splitmix.hpp"

namespace zinf::engine {

namespace cpu = engine::cpu;

namespace {

// Allocates a tensor of n elements, zero-filled, unless it already has that size.
float* ensure(Activation& v, int64_t n) {
  if (int64_t(v.size()) != n) v.assign(size_t(n), 0.0f);
  return v.data();
}


struct Rng {  // splitmix64 + Box-Muller: the same numbers on every platform and library
  uint64_t s;
  uint64_t next() { return splitmix64_next(s); }
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform()); }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// ---- Gpt2Activations ----------------------------------------------------------------------

void Gpt2Activations::drop_block(int l) {
  BlockActivations& b = blocks.at(size_t(l));
  for (auto* v : {&b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.qkv, &b.atty, &b.att, &b.attproj, &b.res1, &b.ln2,
                  &b.ln2_mean, &b.ln2_rstd, &b.fch, &b.fch_gelu, &b.mlpproj, &b.d_ln1, &b.d_qkv, &b.d_atty,
                  &b.d_attproj, &b.d_res1, &b.d_ln2, &b.d_fch, &b.d_fch_gelu, &b.d_mlpproj})
    Gpt2Activations::release(*v);
}

void Gpt2Activations::zero_grads() {
  auto zero = [](Activation& v) { std::fill(v.begin(), v.end(), 0.0f); };
  for (auto& v : dx) zero(v);
  for (auto& b : blocks)
    for (auto* v : {&b.d_ln1, &b.d_qkv, &b.d_atty, &b.d_attproj, &b.d_res1, &b.d_ln2, &b.d_fch, &b.d_fch_gelu,
                    &b.d_mlpproj})
      zero(*v);
  zero(d_lnf);
}

int64_t Gpt2Activations::bytes() const {
  int64_t n = 0;
  auto add = [&n](const Activation& v) { n += int64_t(v.size()); };
  for (auto& v : x) add(v);
  for (auto& v : dx) add(v);
  for (auto& b : blocks)
    for (auto* v : {&b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.qkv, &b.atty, &b.att, &b.attproj, &b.res1, &b.ln2,
                    &b.ln2_mean, &b.ln2_rstd, &b.fch, &b.fch_gelu, &b.mlpproj, &b.d_ln1, &b.d_qkv, &b.d_atty,
                    &b.d_attproj, &b.d_res1, &b.d_ln2, &b.d_fch, &b.d_fch_gelu, &b.d_mlpproj})
      add(*v);
  for (auto* v : {&lnf, &lnf_mean, &lnf_rstd, &logits, &losses, &d_lnf}) add(*v);
  return n * int64_t(sizeof(float));
}

// ---- Gpt2 ---------------------------------------------------------------------------------

Gpt2::Gpt2(core::ModelGraph graph, KernelImpl impl, TensorParallelRank tp)
    : graph_(std::move(graph)), impl_(impl), tp_(tp) {
  const core::ModelSpec& s = graph_.spec;
  llama_ = s.family != core::Family::Gpt2;
  if (!llama_ && (s.heads <= 0 || s.hidden % s.heads != 0))
    throw std::invalid_argument("gpt2 '" + s.name + "': hidden must be a multiple of heads");
  B_ = s.micro_batch, S_ = s.seq, C_ = s.hidden, NH_ = s.heads, V_ = s.vocab, F_ = s.ffn_hidden();
  T_ = B_ * S_;
  TP_ = std::max<int64_t>(1, graph_.tensor_parallel);
  if (TP_ > 1 && (!tp_.group || tp_.group->size() != TP_ || tp_.rank < 0 || tp_.rank >= TP_))
    throw std::invalid_argument("gpt2 '" + s.name + "': the graph is one rank's share of tensor parallelism " +
                                std::to_string(TP_) + ", but the model was given no group of that many ranks");
  Ca_ = C_ / TP_, NHl_ = NH_ / TP_, Fl_ = F_ / TP_, Vl_ = (V_ + TP_ - 1) / TP_;
  Voff_ = Vl_ * tp_.rank;
  Vvalid_ = std::clamp<int64_t>(V_ - Voff_, 0, Vl_);
  group_role_.assign(graph_.params.size(), Role::None);
  for (const core::Operator& op : graph_.ops)
    if (!op.param_groups.empty() && group_role_[size_t(op.param_groups[0])] == Role::None)
      group_role_[size_t(op.param_groups[0])] = op.role;
  for (const core::Operator& op : graph_.ops) {
    if (op.role == Role::None)
      throw std::invalid_argument("gpt2: operator '" + op.name + "' has no GPT-2 role in the graph");
    const Role r = op.role;
    roles_.push_back({r, op.block});
  }
  if (llama_) llama_setup();
}

Gpt2Activations Gpt2::make_activations(CpuDeviceArena* arena) const {
  const DeviceAllocator<float> alloc(arena);
  Gpt2Activations a;
  a.x.assign(size_t(spec().layers + 1), Activation(alloc));
  a.dx.assign(size_t(spec().layers + 1), Activation(alloc));
  a.blocks.resize(size_t(spec().layers));
  for (auto& b : a.blocks)
    for (auto* v : {&b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.qkv, &b.atty, &b.att, &b.attproj, &b.res1, &b.ln2,
                    &b.ln2_mean, &b.ln2_rstd, &b.fch, &b.fch_gelu, &b.mlpproj, &b.d_ln1, &b.d_qkv, &b.d_atty,
                    &b.d_attproj, &b.d_res1, &b.d_ln2, &b.d_fch, &b.d_fch_gelu, &b.d_mlpproj})
      *v = Activation(alloc);
  for (auto* v : {&a.lnf, &a.lnf_mean, &a.lnf_rstd, &a.logits, &a.losses, &a.d_lnf}) *v = Activation(alloc);
  return a;
}

void Gpt2::set_batch(Gpt2Activations& a, std::span<const int32_t> inputs, std::span<const int32_t> targets) const {
  if (int64_t(inputs.size()) != T_ || int64_t(targets.size()) != T_)
    throw std::invalid_argument("gpt2: a micro-batch has " + std::to_string(T_) + " input and target tokens, got " +
                                std::to_string(inputs.size()) + " and " + std::to_string(targets.size()));
  for (auto span : {inputs, targets})
    for (int32_t t : span)
      if (t < 0 || t >= V_)
        throw std::invalid_argument("gpt2: token " + std::to_string(t) + " is outside the vocabulary of " +
                                    std::to_string(V_));
  a.inputs.assign(inputs.begin(), inputs.end());
  a.targets.assign(targets.begin(), targets.end());
}

void Gpt2::check_activations(const Gpt2Activations& a) const {
  if (a.blocks.size() != size_t(spec().layers) || a.x.size() != size_t(spec().layers + 1) || a.dx.size() != a.x.size())
    throw std::invalid_argument("gpt2 '" + spec().name + "': activations were not made by this model's make_activations()");
}

const Gpt2::OpRole& Gpt2::role(int op) const {
  if (op < 0 || op >= int(roles_.size())) throw std::invalid_argument("gpt2: no operator " + std::to_string(op));
  return roles_[size_t(op)];
}

namespace {
const float* need(const Activation& v, int64_t n, const std::string& op, const char* what) {
  if (int64_t(v.size()) != n)
    throw std::invalid_argument("gpt2: operator " + op + ": " + what +
                                " is not resident (not computed yet, or dropped and not recomputed)");
  return v.data();
}
}  // namespace

void Gpt2::check_params(int op, std::span<const ParamBuf> params) const {
  const core::Operator& o = graph_.ops[size_t(op)];
  if (params.size() != o.param_groups.size())
    throw std::invalid_argument("gpt2: operator " + o.name + " takes " + std::to_string(o.param_groups.size()) +
                                " parameter buffers, got " + std::to_string(params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    const core::ParamGroup& g = graph_.params[size_t(o.param_groups[i])];
    if (params[i].numel != g.numel || !params[i].data)
      throw std::invalid_argument("gpt2: operator " + o.name + ": buffer for " + g.name + " has " +
                                  std::to_string(params[i].numel) + " elements, the group has " +
                                  std::to_string(g.numel));
  }
}

Gpt2::LinearIo Gpt2::linear_io(int op, Gpt2Activations& a) const {
  const OpRole& r = role(op);
  const std::string& name = graph_.ops[size_t(op)].name;
  auto blk = [&]() -> BlockActivations& { return a.blocks.at(size_t(r.block)); };
  if (llama_ && r.role != Role::LmHead) return llama_linear_io(r, a);
  switch (r.role) {
    case Role::CAttn: return {&blk().ln1, &blk().qkv, &blk().d_ln1, &blk().d_qkv, C_, 3 * Ca_, true, 3 * Ca_, 0};
    case Role::AttnProj: return {&blk().atty, &blk().attproj, &blk().d_atty, &blk().d_attproj, Ca_, C_, true, C_, 0};
    case Role::Fc: return {&blk().ln2, &blk().fch, &blk().d_ln2, &blk().d_fch, C_, Fl_, true, Fl_, 0};
    case Role::MlpProj:
      return {&blk().fch_gelu, &blk().mlpproj, &blk().d_fch_gelu, &blk().d_mlpproj, Fl_, C_, true, C_, 0};
    // The head's output gradient is written over its logits (head_backward). Llama's has no bias.
    case Role::LmHead: return {&a.lnf, &a.logits, &a.d_lnf, &a.logits, C_, Vl_, false, Vl_, 0};
    default: throw std::invalid_argument("gpt2: operator " + name + " is not a linear");
  }
}

void Gpt2::forward(int op, std::span<const ParamBuf> params, Gpt2Activations& a) const {
  role(op);
  check_activations(a);
  check_params(op, params);
  run_forward(op, params, a);
}

void Gpt2::recompute(int op, std::span<const ParamBuf> params, Gpt2Activations& a) const {
  if (role(op).block < 0)
    throw std::invalid_argument("gpt2: operator " + graph_.ops[size_t(op)].name +
                                " is outside the blocks; only block operators are recomputed");
  check_activations(a);
  check_params(op, params);
  run_forward(op, params, a);
}

void Gpt2::run_forward(int op, std::span<const ParamBuf> p, Gpt2Activations& a) const {
  const OpRole r = role(op);
  if (llama_ && llama_forward(op, p, a)) return;
  const std::string& name = graph_.ops[size_t(op)].name;
  const bool fast = impl_ == KernelImpl::Fast;
  const int64_t TC = T_ * C_;
  auto layernorm = [&](const Activation& x, Activation& out, Activation& mean, Activation& rstd) {
    const float* xin = need(x, TC, name, "the input");
    const float* g = p[0].data;
    (fast ? cpu::layernorm_forward : cpu::ref::layernorm_forward<float>)(
        ensure(out, TC), ensure(mean, T_), ensure(rstd, T_), xin, g, g + C_, T_, C_);
  };
  switch (r.role) {
    case Role::None:  // refused by the constructor
      throw std::logic_error("an operator without a role");
    case Role::Embed: return embed_forward(0, Vl_, p[0].data, p.size() > 1 ? p[1].data : nullptr, a);
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
    case Role::LnF: layernorm(a.x[size_t(spec().layers)], a.lnf, a.lnf_mean, a.lnf_rstd); break;
    case Role::CAttn:
    case Role::AttnProj:
    case Role::Fc:
    case Role::MlpProj:
    case Role::LmHead: {
      const LinearIo io = linear_io(op, a);
      const float* x = need(*io.x, T_ * io.in, name, "the input");
      const float* w = p[0].data;
      const float* bias = adds_bias(io, r.role) ? w + io.out * io.in : nullptr;
      (fast ? static_cast<void (*)(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                   int64_t, int64_t)>(cpu::linear_forward)
            : cpu::ref::linear_forward<float>)(ensure(*io.y, T_ * io.stride) + io.offset, x, w, bias, T_, io.in,
                                              io.stride, 0, io.out);
      break;
    }
    case Role::Attn: {
      auto& b = a.blocks[size_t(r.block)];
      const float* qkv = need(b.qkv, 3 * T_ * Ca_, name, "qkv");
      (fast ? cpu::attention_forward : cpu::ref::attention_forward<float>)(
          ensure(b.atty, T_ * Ca_), ensure(b.att, B_ * NHl_ * S_ * S_), qkv, B_, S_, Ca_, NHl_);
      break;
    }
    case Role::Res1: {
      auto& b = a.blocks[size_t(r.block)];
      (fast ? cpu::residual_forward : cpu::ref::residual_forward<float>)(
          ensure(b.res1, TC), need(a.x[size_t(r.block)], TC, name, "the block input"),
          need(b.attproj, TC, name, "attn.c_proj's output"), TC);
      break;
    }
    case Role::Res2: {
      auto& b = a.blocks[size_t(r.block)];
      (fast ? cpu::residual_forward : cpu::ref::residual_forward<float>)(
          ensure(a.x[size_t(r.block + 1)], TC), need(b.res1, TC, name, "residual_1's output"),
          need(b.mlpproj, TC, name, "mlp.c_proj's output"), TC);
      break;
    }
    case Role::Gelu: {
      auto& b = a.blocks[size_t(r.block)];
      (fast ? cpu::gelu_forward : cpu::ref::gelu_forward<float>)(ensure(b.fch_gelu, T_ * Fl_),
                                                                 need(b.fch, T_ * Fl_, name, "mlp.c_fc's output"),
                                                                 T_ * Fl_);
      break;
    }
    case Role::Loss: {
      const float* logits = need(a.logits, T_ * Vl_, name, "the logits");
      if (int64_t(a.targets.size()) != T_) throw std::invalid_argument("gpt2: loss: no micro-batch set");
      if (TP_ > 1) return tp_loss_forward(a);
      a.loss = (fast ? cpu::crossentropy_forward : cpu::ref::crossentropy_forward<float>)(
          ensure(a.losses, 3 * T_), logits, a.targets.data(), T_, V_);
      break;
    }
  }
}

void Gpt2::backward(int op, std::span<const ParamBuf> p, std::span<const GradBuf> g, Gpt2Activations& a) const {
  const OpRole r = role(op);
  check_activations(a);
  check_params(op, p);
  const std::string& name = graph_.ops[size_t(op)].name;
  if (g.size() != p.size())
    throw std::invalid_argument("gpt2: operator " + name + ": " + std::to_string(p.size()) +
                                " parameter buffers but " + std::to_string(g.size()) + " gradient buffers");
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i].numel != p[i].numel || !g[i].data)
      throw std::invalid_argument("gpt2: operator " + name + ": gradient buffer " + std::to_string(i) + " has " +
                                  std::to_string(g[i].numel) + " elements, expected " + std::to_string(p[i].numel));
  if (llama_ && llama_backward(op, p, g, a)) return;
  const bool fast = impl_ == KernelImpl::Fast;
  const int64_t TC = T_ * C_;
  auto layernorm = [&](Activation& dx, const Activation& dout, const Activation& x, const Activation& mean,
                       const Activation& rstd) {
    const float* gamma = p[0].data;
    (fast ? cpu::layernorm_backward : cpu::ref::layernorm_backward<float>)(
        ensure(dx, TC), g[0].data, g[0].data + C_, need(dout, TC, name, "the output gradient"),
        need(x, TC, name, "the input"), gamma, need(mean, T_, name, "the saved mean"),
        need(rstd, T_, name, "the saved rstd"), T_, C_);
  };
  switch (r.role) {
    case Role::None:  // refused by the constructor
      throw std::logic_error("an operator without a role");
    case Role::Loss:
      throw std::invalid_argument("gpt2: operator " + name + " has no backward: the head's backward computes the loss's gradient");
    case Role::LnF: {
      const size_t L = size_t(spec().layers);
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
    case Role::LmHead: return head_backward(0, Vl_, p[0].data, g[0].data, a);
    case Role::CAttn:
    case Role::AttnProj:
    case Role::Fc:
    case Role::MlpProj: {
      const LinearIo io = linear_io(op, a);
      const float* w = p[0].data;
      float* dw = g[0].data;
      (fast ? static_cast<void (*)(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t,
                                   int64_t, int64_t, int64_t)>(cpu::linear_backward)
            : cpu::ref::linear_backward<float>)(
          ensure(*io.dx, T_ * io.in), dw, io.bias ? dw + io.out * io.in : nullptr,
          need(*io.dy, T_ * io.stride, name, "the output gradient") + io.offset,
          need(*io.x, T_ * io.in, name, "the input"), w, T_, io.in, io.stride, 0, io.out);
      break;
    }
    case Role::Attn: {
      auto& b = a.blocks[size_t(r.block)];
      const int64_t TA = T_ * Ca_;
      (fast ? cpu::attention_backward : cpu::ref::attention_backward<float>)(
          ensure(b.d_qkv, 3 * TA), need(b.d_atty, TA, name, "the output gradient"), need(b.qkv, 3 * TA, name, "qkv"),
          need(b.att, B_ * NHl_ * S_ * S_, name, "the attention probabilities"), B_, S_, Ca_, NHl_);
      break;
    }
    case Role::Res1: {
      auto& b = a.blocks[size_t(r.block)];
      (fast ? cpu::residual_backward : cpu::ref::residual_backward<float>)(
          ensure(a.dx[size_t(r.block)], TC), ensure(b.d_attproj, TC), need(b.d_res1, TC, name, "the output gradient"),
          TC);
      break;
    }
    case Role::Res2: {
      auto& b = a.blocks[size_t(r.block)];
      (fast ? cpu::residual_backward : cpu::ref::residual_backward<float>)(
          ensure(b.d_res1, TC), ensure(b.d_mlpproj, TC), need(a.dx[size_t(r.block + 1)], TC, name,
                                                               "the output gradient"),
          TC);
      break;
    }
    case Role::Gelu: {
      auto& b = a.blocks[size_t(r.block)];
      (fast ? cpu::gelu_backward : cpu::ref::gelu_backward<float>)(
          ensure(b.d_fch, T_ * Fl_), need(b.d_fch_gelu, T_ * Fl_, name, "the output gradient"),
          need(b.fch, T_ * Fl_, name, "mlp.c_fc's output"), T_ * Fl_);
      break;
    }
    case Role::Embed: return embed_backward(0, Vl_, g[0].data, g.size() > 1 ? g[1].data : nullptr, a);
  }
}

// The tokens whose rows of this rank's vocabulary share are in [r0, r1) look up `wte` (those rows)
// and add their position (on group rank 0 only: the group's all-reduce sums the embedding); the
// first tile also writes the tokens of other ranks' vocabulary: their position, or 0. Each token is
// written by one tile, with the untiled embedding's arithmetic.
void Gpt2::embed_forward(int64_t r0, int64_t r1, const float* wte, const float* wpe, Gpt2Activations& a) const {
  if (int64_t(a.inputs.size()) != T_) throw std::invalid_argument("gpt2: embed: no micro-batch set");
  float* x = ensure(a.x[0], T_ * C_);
  const bool position = tp_.rank == 0;
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t v = a.inputs[size_t(t)] - Voff_;
    const bool mine = v >= 0 && v < Vvalid_;
    if (mine ? (v < r0 || v >= r1) : r0 != 0) continue;
    float* row = x + t * C_;
    if (!wpe) {  // rotary positions (Llama): the token's row alone
      const float* e = wte + (v - r0) * C_;
      std::copy(e, e + C_, row);
      continue;
    }
    const float* pos = wpe + (t % S_) * C_;
    if (mine) {
      const float* e = wte + (v - r0) * C_;
      for (int64_t c = 0; c < C_; ++c) row[c] = position ? e[c] + pos[c] : e[c];
    } else {
      for (int64_t c = 0; c < C_; ++c) row[c] = position ? pos[c] : 0.0f;
    }
  }
}

// dwte's rows [r0, r1) (dwte holds those rows) get the tokens in them, in token order; the position
// embedding's gradient (whole, replicated under tensor parallelism) is added once, by the first tile.
void Gpt2::embed_backward(int64_t r0, int64_t r1, float* dwte, float* dwpe, Gpt2Activations& a) const {
  const float* dx = need(a.dx[0], T_ * C_, "embed", "the output gradient");
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t v = a.inputs[size_t(t)] - Voff_;
    const float* row = dx + t * C_;
    if (v >= r0 && v < r1 && v < Vvalid_) {
      float* e = dwte + (v - r0) * C_;
      for (int64_t c = 0; c < C_; ++c) e[c] += row[c];
    }
    if (r0 == 0 && dwpe) {
      float* pos = dwpe + (t % S_) * C_;
      for (int64_t c = 0; c < C_; ++c) pos[c] += row[c];
    }
  }
}

void Gpt2::head_backward(int64_t r0, int64_t r1, const float* w, float* dw, Gpt2Activations& a) const {
  const std::string name = "lm_head";
  need(a.logits, T_ * Vl_, name, "the logits");
  float* logits = a.logits.data();
  const float* stats = need(a.losses, 3 * T_, name, "the loss's statistics (the loss ran)");
  const float* x = need(a.lnf, T_ * C_, name, "the input");
  if (int64_t(a.targets.size()) != T_) throw std::invalid_argument("gpt2: lm_head: no micro-batch set");
  const bool fast = impl_ == KernelImpl::Fast;
  (fast ? cpu::crossentropy_backward : cpu::ref::crossentropy_backward<float>)(
      logits, stats, a.targets.data(), Voff_, a.loss_scale / double(T_), T_, Vl_, Vvalid_, r0, r1);
  float* dx = ensure(a.d_lnf, T_ * C_);
  if (fast) cpu::linear_backward(dx, dw, nullptr, logits, x, w, T_, C_, Vl_, r0, r1);
  else cpu::ref::linear_backward<float>(dx, dw, nullptr, logits, x, w, T_, C_, Vl_, r0, r1);
}

void Gpt2::forward_tile(int op, int64_t r0, int64_t r1, std::span<const ParamBuf> params, Gpt2Activations& a) const {
  check_activations(a);
  check_tile(op, r0, r1, params, {});
  const float* w = params[0].data;
  if (role(op).role == Role::Embed) return embed_forward(r0, r1, w, params.size() > 1 ? params[1].data : nullptr, a);
  const LinearIo io = linear_io(op, a);
  const std::string& name = graph_.ops[size_t(op)].name;
  const int64_t rows = r1 - r0;
  const float* x = need(*io.x, T_ * io.in, name, "the input");
  const float* b = adds_bias(io, role(op).role) ? w + rows * io.in : nullptr;
  float* y = ensure(*io.y, T_ * io.stride) + io.offset;
  if (impl_ == KernelImpl::Fast) cpu::linear_forward(y, x, w, b, T_, io.in, io.stride, r0, r1);
  else cpu::ref::linear_forward(y, x, w, b, T_, io.in, io.stride, r0, r1);
}

void Gpt2::backward_tile(int op, int64_t r0, int64_t r1, std::span<const ParamBuf> params, std::span<const GradBuf> grads,
                         Gpt2Activations& a) const {
  check_activations(a);
  check_tile(op, r0, r1, params, grads);
  const float* w = params[0].data;
  float* dw = grads[0].data;
  switch (role(op).role) {
    case Role::Embed: return embed_backward(r0, r1, dw, grads.size() > 1 ? grads[1].data : nullptr, a);
    case Role::LmHead: return head_backward(r0, r1, w, dw, a);
    default: break;
  }
  const LinearIo io = linear_io(op, a);
  const std::string& name = graph_.ops[size_t(op)].name;
  const int64_t rows = r1 - r0;
  const float* x = need(*io.x, T_ * io.in, name, "the input");
  const float* dy = need(*io.dy, T_ * io.stride, name, "the output gradient") + io.offset;
  float* dx = ensure(*io.dx, T_ * io.in);
  float* db = io.bias ? dw + rows * io.in : nullptr;
  if (impl_ == KernelImpl::Fast) cpu::linear_backward(dx, dw, db, dy, x, w, T_, io.in, io.stride, r0, r1);
  else cpu::ref::linear_backward(dx, dw, db, dy, x, w, T_, io.in, io.stride, r0, r1);
}

// A tile's buffers: the tiled group's rows [r0, r1) first (its weight rows, then their biases), the
// operator's other groups whole; gradients alike (none for a forward).
void Gpt2::check_tile(int op, int64_t r0, int64_t r1, std::span<const ParamBuf> params,
                      std::span<const GradBuf> grads) const {
  const core::Operator& o = graph_.ops[size_t(op)];
  const Role r = role(op).role;
  const bool tiled = r == Role::Embed || r == Role::LmHead || r == Role::CAttn || r == Role::AttnProj || r == Role::Fc ||
                     r == Role::MlpProj;
  if (!tiled) throw std::invalid_argument("gpt2: operator " + o.name + " is not tiled");
  const core::ParamGroup& g = graph_.params[size_t(o.param_groups.at(0))];
  const int64_t rows = r1 - r0, per_row = g.numel / g.rows;
  auto bad = [&](const std::string& what) {
    return std::invalid_argument("gpt2: operator " + o.name + ": bad tile [" + std::to_string(r0) + ", " +
                                 std::to_string(r1) + ") of " + std::to_string(g.rows) + " rows: " + what);
  };
  if (r0 < 0 || r1 > g.rows || rows <= 0) throw bad("outside the rows");
  if (params.size() != o.param_groups.size()) throw bad(std::to_string(params.size()) + " parameter buffers");
  if (!grads.empty() && grads.size() != params.size()) throw bad(std::to_string(grads.size()) + " gradient buffers");
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t want = i == 0 ? rows * per_row : graph_.params[size_t(o.param_groups[i])].numel;
    if (params[i].numel != want || !params[i].data)
      throw bad("buffer " + std::to_string(i) + " has " + std::to_string(params[i].numel) + " elements, not " +
                std::to_string(want));
    if (!grads.empty() && (grads[i].numel != want || !grads[i].data))
      throw bad("gradient buffer " + std::to_string(i) + " has " + std::to_string(grads[i].numel) + " elements");
  }
}

namespace {
std::vector<ParamBuf> views(const core::Operator& op, const Gpt2Params& p) {
  std::vector<ParamBuf> v;
  for (int g : op.param_groups) v.push_back({p.at(size_t(g)).data(), int64_t(p[size_t(g)].size())});
  return v;
}
std::vector<GradBuf> views(const core::Operator& op, Gpt2Params& p) {
  std::vector<GradBuf> v;
  for (int g : op.param_groups) v.push_back({p.at(size_t(g)).data(), int64_t(p[size_t(g)].size())});
  return v;
}
}  // namespace

double Gpt2::forward(const Gpt2Params& params, Gpt2Activations& a) const {
  for (const core::Operator& op : graph_.ops) forward(op.id, views(op, params), a);
  return a.loss;
}

double Gpt2::forward_backward(const Gpt2Params& params, Gpt2Params& grads, Gpt2Activations& a) const {
  const double loss = forward(params, a);
  a.zero_grads();
  for (auto it = graph_.ops.rbegin(); it != graph_.ops.rend(); ++it)
    if (it->backward) backward(it->id, views(*it, params), views(*it, grads), a);
  return loss;
}

Gpt2Params Gpt2::zeros() const {
  Gpt2Params p;
  for (const core::ParamGroup& g : graph_.params) p.emplace_back(size_t(g.numel), 0.0f);
  return p;
}

Gpt2Params Gpt2::init_params(uint64_t seed) const {
  Gpt2Params p(graph_.params.size());
  InitStream stream(*this, seed);
  for (const core::ParamGroup& g : graph_.params) stream.next(g.id, p[size_t(g.id)]);
  return p;
}

Gpt2::InitStream::InitStream(const Gpt2& model, uint64_t seed) : model_(model), rng_state_(seed) {}

void Gpt2::InitStream::next(int32_t group, std::vector<float>& out) {
  const auto& params = model_.graph_.params;
  if (group != next_group_ || size_t(group) >= params.size())
    throw std::logic_error("gpt2 init stream: group " + std::to_string(group) + " asked for, next is " + std::to_string(next_group_));
  ++next_group_;
  const core::ParamGroup& g = params[size_t(group)];
  // The whole model's tensor of the group, then (tensor parallelism) this rank's share of it.
  const WholeShape w = model_.whole_shape(group);
  std::vector<float>& t = model_.TP_ > 1 ? whole_ : out;
  t.assign(size_t(w.numel), 0.0f);
  const Role reader = model_.group_role_[size_t(group)];
  if (reader == Role::Ln1 || reader == Role::Ln2 || reader == Role::LnF) {
    std::fill(t.begin(), t.begin() + w.cols, 1.0f);  // gamma; beta (LayerNorm's) stays 0
  } else {
    Rng rng{rng_state_};
    const double proj_std = 0.02 / std::sqrt(2.0 * double(model_.spec().layers));
    const double sd = ends_with(g.name, "c_proj") ? proj_std : 0.02;
    for (int64_t i = 0; i < w.rows * w.cols; ++i) t[size_t(i)] = float(sd * rng.normal());  // biases stay 0
    rng_state_ = rng.s;
  }
  if (model_.TP_ > 1) model_.shard_group(group, whole_, out);
}

}  // namespace zinf::engine
