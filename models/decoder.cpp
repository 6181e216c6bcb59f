#include "models/decoder.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/model_layout.hpp"
#include "models/graph_builder.hpp"

namespace zinf::models {

using core::LayerStep;
using core::ModelGraph;
using core::OpKind;
using core::StepKind;
using Role = core::OpRole;

namespace {

constexpr double kAct = 2.0;  // bytes per bf16 activation element

struct DecoderBuilder : GraphBuilder {
  double T = 0;

  // y = x W^T + b: forward 2·T·in·out, backward twice that (dX and dW).
  void linear(const LayerStep& s, int block, Role role) {
    const int pg = add_params(s.name, s.out, s.in, s.numel, true);
    auto& o = add_op(s.name, OpKind::Linear, block, pg, role);
    o.m = g.tokens;
    o.n = s.out;
    o.k = s.in;
    o.fwd_flops = 2.0 * T * double(s.in) * double(s.out);
    o.bwd_flops = 2.0 * o.fwd_flops;
    o.fwd_bytes = kAct * (T * double(s.in + s.out) + double(s.in * s.out));
    o.out_bytes = kAct * T * double(s.out);
  }

  void elementwise(const std::string& name, OpKind kind, Role role, int block, int pg, int64_t width, double flops,
                   double tensors) {
    auto& o = add_op(name, kind, block, pg, role);
    o.fwd_flops = flops * T * double(width);
    o.bwd_flops = 2.0 * o.fwd_flops;
    o.fwd_bytes = kAct * tensors * T * double(width);
    o.out_bytes = kAct * T * double(width);
  }

  void norm(const LayerStep& s, int block, Role role) {
    elementwise(s.name, OpKind::LayerNorm, role, block, add_params(s.name, 1, s.width, s.numel, false), s.width, 8.0, 2.0);
  }

  // softmax(Q K^T) V over `span` keys per query, per head: 2·T·span·qk for the scores and
  // 2·T·span·v for the mix. Its bytes: q, k, v and the output, and the probabilities.
  void attention(const LayerStep& s, int block) {
    auto& o = add_op(s.name, OpKind::Attention, block, -1, Role::Attn);
    const auto& m = g.spec;
    o.m = m.seq;
    o.n = s.span;
    o.k = s.qk_dim;
    o.fwd_flops = 2.0 * T * double(s.span) * double(s.heads) * double(s.qk_dim + s.v_dim);
    o.bwd_flops = (m.flash_attention ? 2.5 : 2.0) * o.fwd_flops;  // FlashAttention recomputes the scores
    const double kv = double(m.mla() ? s.heads : m.kv_head_count());
    const double probs = m.flash_attention ? 0.0 : double(m.micro_batch * s.heads) * double(m.seq) * double(s.span);
    o.fwd_bytes = kAct * (T * (double(s.heads) * double(s.qk_dim + s.v_dim) + kv * double(s.qk_dim + s.v_dim)) + probs);
    o.out_bytes = kAct * T * double(s.heads * s.v_dim);
  }

  // The routed experts: one group of every expert's matrices, gathered whole; each token runs
  // top_k of them, so the FLOPs are top_k experts' while the parameters are all of them.
  void experts(const LayerStep& s, int block) {
    const int64_t mats = s.gated ? 3 : 2;
    const int pg = add_params(s.name, s.experts * mats * s.out, s.in, s.numel, false);
    g.params[size_t(pg)].experts = true;
    auto& o = add_op(s.name, OpKind::Linear, block, pg, Role::Fc);
    o.experts = s.experts;
    o.top_k = s.top_k;
    o.m = std::max<int64_t>(1, g.tokens * s.top_k / s.experts);  // tokens one expert takes, evenly routed
    o.n = s.out;
    o.k = s.in;
    o.fwd_flops = 2.0 * T * double(s.top_k) * double(mats) * double(s.in) * double(s.out) +
                  (s.gated ? 3.0 : 1.0) * T * double(s.top_k) * double(s.out);  // and the activation
    o.bwd_flops = 2.0 * o.fwd_flops;
    o.fwd_bytes = kAct * (2.0 * T * double(s.top_k) * double(s.in) + T * double(s.top_k * mats) * double(s.out) +
                          double(s.numel));
    o.out_bytes = kAct * T * double(s.in);
  }

  void router(const LayerStep& s, int block) {
    const int pg = add_params(s.name, s.out, s.in, s.numel, true);
    auto& o = add_op(s.name, OpKind::Linear, block, pg, Role::Fc);
    o.m = g.tokens;
    o.n = s.out;
    o.k = s.in;
    o.fwd_flops = 2.0 * T * double(s.in) * double(s.out) + 5.0 * T * double(s.out);  // the scores, their softmax and top-k
    o.bwd_flops = 2.0 * o.fwd_flops;
    o.fwd_bytes = kAct * (T * double(s.in + s.out) + double(s.in * s.out));
    o.out_bytes = kAct * T * double(s.out);
  }

  void block(int l) {
    const auto& m = g.spec;
    const auto steps = core::block_steps(m, l);
    bool attended = false;
    for (size_t i = 0; i < steps.size(); ++i) {
      const LayerStep& s = steps[i];
      switch (s.kind) {
        case StepKind::Norm: {
          // The block's first norm and the one before its MLP are GPT-2's ln_1 and ln_2; the rest
          // (Gemma 2's post-norms, MLA's latent norms) have no GPT-2 counterpart.
          Role r = Role::None;
          if (i == 0) r = Role::Ln1;
          else if (steps[i - 1].kind == StepKind::Residual || (m.parallel_attention && i == 1)) r = Role::Ln2;
          norm(s, l, r);
          break;
        }
        case StepKind::Linear: {
          Role r = Role::Fc;
          if (!attended) r = Role::CAttn;
          else if (i > 0 && steps[i - 1].kind == StepKind::Attention) r = Role::AttnProj;
          else if (s.out == m.hidden) r = Role::MlpProj;
          linear(s, l, r);
          break;
        }
        case StepKind::Attention:
          attention(s, l);
          attended = true;
          break;
        case StepKind::Activation:
          elementwise(s.name, OpKind::Gelu, Role::Gelu, l, -1, s.width, m.gated_mlp() ? 11.0 : 10.0, m.gated_mlp() ? 3.0 : 2.0);
          break;
        case StepKind::Residual:
          elementwise(s.name, OpKind::Residual, i + 1 == steps.size() ? Role::Res2 : Role::Res1, l, -1, s.width,
                      m.parallel_attention ? 2.0 : 1.0, m.parallel_attention ? 4.0 : 3.0);
          break;
        case StepKind::Router: router(s, l); break;
        case StepKind::Experts: experts(s, l); break;
        default: break;
      }
    }
  }

  void embeddings(int& token_group) {
    const auto& m = g.spec;
    std::vector<int> groups;
    for (const auto& s : core::embedding_steps(m)) {
      if (s.kind == StepKind::Embedding) {
        const bool vocabulary = groups.empty();
        const int pg = add_params(s.name, s.out, s.in, s.numel, vocabulary);
        g.params[size_t(pg)].vocabulary = vocabulary;
        if (vocabulary) token_group = pg;
        groups.push_back(pg);
        if (groups.size() > 1) continue;
        auto& o = add_op("embed", OpKind::Embedding, -1, pg, Role::Embed);
        o.fwd_bytes = kAct * 3.0 * T * double(m.hidden);
        o.out_bytes = kAct * T * double(m.hidden);
        o.fwd_flops = o.bwd_flops = T * double(m.hidden);
      } else if (s.kind == StepKind::Linear) {
        linear(s, -1, Role::None);
      } else if (s.kind == StepKind::Norm) {
        norm(s, -1, Role::None);
      }
    }
    // The position table is read by the embedding's operator, as GPT-2's wpe is.
    for (size_t i = 1; i < groups.size(); ++i)
      for (auto& o : g.ops)
        if (o.kind == OpKind::Embedding) o.param_groups.push_back(groups[i]);
  }

  void head(int token_group) {
    const auto& m = g.spec;
    for (const auto& s : core::head_steps(m)) {
      if (s.kind == StepKind::Norm) {
        norm(s, -1, Role::LnF);
      } else if (s.kind == StepKind::Linear) {
        linear(s, -1, Role::None);
      } else if (s.kind == StepKind::Head) {
        const int pg = m.tied_embeddings ? token_group : add_params(s.name, s.out, s.in, s.numel, true);
        g.params[size_t(pg)].vocabulary = true;
        auto& o = add_op(s.name, OpKind::LmHead, -1, pg, Role::LmHead);
        const double v = double(m.vocab), e = double(s.in);
        o.m = g.tokens;
        o.n = m.vocab;
        o.k = s.in;
        o.fwd_flops = 2.0 * T * e * v;
        o.bwd_flops = 2.0 * o.fwd_flops + 2.0 * T * v;  // with the softmax's gradient, as GPT-2's head
        o.fwd_bytes = kAct * (T * (e + v) + e * v);
        o.out_bytes = 4.0 * T * v;  // fp32 logits
      }
    }
    auto& o = add_op("loss", OpKind::Loss, -1, -1, Role::Loss);
    o.fwd_flops = 5.0 * T * double(m.vocab);
    o.backward = false;
    o.fwd_bytes = 4.0 * 2.0 * T * double(m.vocab);
    o.out_bytes = 4.0 * 3.0 * T;
  }
};

}  // namespace

ModelGraph build_decoder(const core::ModelSpec& spec) {
  DecoderBuilder b;
  b.g.spec = spec;
  b.g.tokens = spec.micro_batch * spec.seq;
  b.g.tensor_parallel = 1;
  b.T = double(b.g.tokens);
  int token_group = -1;
  b.embeddings(token_group);
  for (int l = 0; l < spec.layers; ++l) b.block(l);
  b.head(token_group);
  return std::move(b.g);
}

}  // namespace zinf::models
