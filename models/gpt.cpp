#include "models/gpt.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include <filesystem>

#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "models/decoder.hpp"
#include "models/graph_builder.hpp"
#include "formats/hf_config.hpp"
#include "formats/model_spec_reader.hpp"

namespace zinf::models {

using core::ModelGraph;
using core::Operator;
using Role = core::OpRole;
using core::OpKind;
using core::ParamGroup;

namespace {

constexpr double kAct = 2.0;  // bytes per bf16 activation element

struct Builder : GraphBuilder {
  // y = x W^T + b with W out x in: forward 2·T·in·out, backward twice that (dX and dW).
  void linear(const std::string& name, core::OpRole role, int block, int64_t in, int64_t out) {
    int pg = add_params(name, out, in, out * in + out, true);
    const double T = double(g.tokens);
    auto& o = add_op(name, OpKind::Linear, block, pg, role);
    o.m = g.tokens;
    o.n = out;
    o.k = in;
    o.fwd_flops = 2.0 * T * double(in) * double(out);
    o.bwd_flops = 2.0 * o.fwd_flops;
    o.fwd_bytes = kAct * (T * double(in + out) + double(in * out));
    o.out_bytes = kAct * T * double(out);
  }

  void elementwise(const std::string& name, OpKind kind, core::OpRole role, int block, int group, int64_t width,
                   double flops_per_elem, double tensors_touched) {
    const double T = double(g.tokens);
    auto& o = add_op(name, kind, block, group, role);
    o.fwd_flops = flops_per_elem * T * double(width);
    o.bwd_flops = 2.0 * o.fwd_flops;
    o.fwd_bytes = kAct * tensors_touched * T * double(width);
    o.out_bytes = kAct * T * double(width);
  }
};

}  // namespace

ModelGraph build_gpt(const core::ModelSpec& s, int64_t tp) {
  if (tp < 1) throw std::invalid_argument(fmt::format("tensor_parallel must be at least 1, got {}", tp));
  if (!s.is_gpt2()) {
    if (tp != 1)
      throw std::invalid_argument(fmt::format("tensor_parallel {}: tensor parallelism is planned for the GPT-2 architecture "
                                              "only, and {} is {}",
                                              tp, s.name, core::to_string(s.family)));
    return build_decoder(s);
  }
  auto divides = [&](const char* what, int64_t n) {
    if (n % tp != 0)
      throw std::invalid_argument(fmt::format("tensor_parallel {} does not divide the model's {} ({})", tp, what, n));
  };
  if (tp > 1) {
    divides("heads", s.heads);
    divides("hidden size", s.hidden);
    divides("MLP size", s.ffn_hidden());
  }
  Builder b;
  b.g.spec = s;
  b.g.tokens = s.micro_batch * s.seq;
  b.g.tensor_parallel = tp;
  // A vocabulary the degree does not divide is padded, as Megatron pads it: each rank holds ceil(V / t) rows.
  const int64_t h = s.hidden, f = s.ffn_hidden(), v = (s.vocab + tp - 1) / tp, heads = s.heads / tp;
  const double T = double(b.g.tokens);
  // The bytes of one hidden-state activation, all-reduced over the group where the split ends.
  const double hidden_act = tp > 1 ? kAct * T * double(h) : 0.0;

  // The token embedding's rows are the vocabulary: tiled along it, as the head that shares it is.
  int wte = b.add_params("wte", v, h, v * h, true);
  b.g.params[size_t(wte)].vocabulary = true;
  int wpe = b.add_params("wpe", s.seq, h, s.seq * h, false);
  b.g.params[size_t(wpe)].tp_replicated = s.seq * h;
  auto whole = [&b](int group) {
    b.g.params[size_t(group)].tp_replicated = b.g.params[size_t(group)].numel;
    return group;
  };
  {
    auto& o = b.add_op("embed", OpKind::Embedding, -1, wte, Role::Embed);
    o.fwd_bytes = kAct * 3.0 * T * double(h);
    o.out_bytes = kAct * T * double(h);
    o.fwd_flops = T * double(h);
    o.bwd_flops = T * double(h);
    o.param_groups.push_back(wpe);
    o.tp_fwd_allreduce_bytes = hidden_act;  // each rank looked up its part of the vocabulary
  }

  for (int l = 0; l < s.layers; ++l) {
    const std::string p = fmt::format("h.{}.", l);
    b.elementwise(p + "ln_1", OpKind::LayerNorm, Role::Ln1, l, whole(b.add_params(p + "ln_1", 1, h, 2 * h, false)), h, 8.0, 2.0);
    b.linear(p + "attn.c_attn", Role::CAttn, l, h, 3 * h / tp);
    b.g.ops.back().tp_bwd_allreduce_bytes = hidden_act;  // input gradient of a column-parallel linear
    {
      // softmax(Q K^T / sqrt(d)) V over this rank's heads: 2·T·seq·h for the scores, 2·T·seq·h for the mix.
      auto& o = b.add_op(p + "attn.core", OpKind::Attention, l, -1, Role::Attn);
      // One head's GEMMs: scores seq x seq over the head size, then seq x head size over seq.
      o.m = s.seq;
      o.n = s.seq;
      o.k = h / s.heads;
      o.fwd_flops = 4.0 * T * double(s.seq) * double(h / tp);
      // FlashAttention's backward recomputes the scores (5 products to eager's 4) and never writes the
      // probabilities to memory; eager attention writes and reads them.
      o.bwd_flops = (s.flash_attention ? 2.5 : 2.0) * o.fwd_flops;
      const double probs = s.flash_attention ? 0.0 : 2.0 * double(s.micro_batch * heads) * double(s.seq * s.seq);
      o.fwd_bytes = kAct * (4.0 * T * double(h / tp) + probs);
      o.out_bytes = kAct * T * double(h / tp);
    }
    b.linear(p + "attn.c_proj", Role::AttnProj, l, h / tp, h);
    b.g.params.back().tp_replicated = h;  // its bias, added once after the all-reduce
    b.g.ops.back().tp_fwd_allreduce_bytes = hidden_act;  // partial sums of a row-parallel linear
    b.elementwise(p + "residual_1", OpKind::Residual, Role::Res1, l, -1, h, 1.0, 3.0);
    b.elementwise(p + "ln_2", OpKind::LayerNorm, Role::Ln2, l, whole(b.add_params(p + "ln_2", 1, h, 2 * h, false)), h, 8.0, 2.0);
    b.linear(p + "mlp.c_fc", Role::Fc, l, h, f / tp);
    b.g.ops.back().tp_bwd_allreduce_bytes = hidden_act;
    b.elementwise(p + "mlp.gelu", OpKind::Gelu, Role::Gelu, l, -1, f / tp, 10.0, 2.0);
    b.linear(p + "mlp.c_proj", Role::MlpProj, l, f / tp, h);
    b.g.params.back().tp_replicated = h;
    b.g.ops.back().tp_fwd_allreduce_bytes = hidden_act;
    b.elementwise(p + "residual_2", OpKind::Residual, Role::Res2, l, -1, h, 1.0, 3.0);
  }
  b.elementwise("ln_f", OpKind::LayerNorm, Role::LnF, -1, whole(b.add_params("ln_f", 1, h, 2 * h, false)), h, 8.0, 2.0);
  {
    int head = s.tied_embeddings ? wte : b.add_params("lm_head", v, h, v * h, true);
    b.g.params[size_t(head)].vocabulary = true;
    auto& o = b.add_op("lm_head", OpKind::LmHead, -1, head, Role::LmHead);
    o.m = b.g.tokens;
    o.n = v;
    o.k = h;
    o.fwd_flops = 2.0 * T * double(h) * double(v);
    // dX and dW, and the gradient of the softmax over its tile of the vocabulary (the loss's backward,
    // computed here in place of the tile's logits).
    o.bwd_flops = 2.0 * o.fwd_flops + 2.0 * T * double(v);
    o.fwd_bytes = kAct * (T * double(h + v) + double(h * v));
    o.out_bytes = 4.0 * T * double(v);  // fp32 logits
    o.tp_bwd_allreduce_bytes = hidden_act;  // input gradient of a vocabulary-parallel head
  }
  {
    auto& o = b.add_op("loss", OpKind::Loss, -1, -1, Role::Loss);
    // Per token: the largest logit, the sum of exponentials and the loss (fp32), read from the
    // logits; no probabilities are kept. Its backward is the head's (Operator::backward).
    o.fwd_flops = 5.0 * T * double(v);
    o.bwd_flops = 0;
    o.backward = false;
    o.fwd_bytes = 4.0 * 2.0 * T * double(v);
    o.out_bytes = 4.0 * 3.0 * T;
    // Vocabulary-parallel cross-entropy: the row maximum, the sum of exponentials and the target's
    // logit, one fp32 each per token, all-reduced over the group.
    o.tp_fwd_allreduce_bytes = tp > 1 ? 3.0 * 4.0 * T : 0.0;
  }
  return std::move(b.g);
}

core::ModelGraph build_gpt(const core::ModelSpec& spec, const core::RunConfig& config) {
  core::ModelSpec s = spec;
  if (config.micro_batch) s.micro_batch = *config.micro_batch;
  if (config.seq) s.seq = *config.seq;
  // OPT's table keeps two rows before its first position.
  const int64_t usable = s.learned_positions - (s.family == core::Family::Opt ? 2 : 0);
  if (s.positions == core::PositionKind::Learned && s.learned_positions > 0 && s.seq > usable)
    throw core::PlanError(fmt::format("seq {} is longer than the {} learned positions of {} ({})", s.seq, usable, s.name,
                                      s.file.empty() ? "its model file" : s.file));
  // A degree the model's shape does not take is the run's refusal, reported as every plan's is.
  try {
    return build_gpt(s, config.tensor_parallel);
  } catch (const std::invalid_argument& e) {
    throw core::PlanError(e.what());
  }
}

GptPlan plan_gpt(const core::ModelSpec& spec, const core::HwProfile& hw, const core::RunConfig& config, int ranks,
                 const std::vector<int32_t>& recorded_order) {
  GptPlan p{build_gpt(spec, config), {}};
  p.planned = core::make_plan(p.graph, hw, config, ranks, recorded_order);
  return p;
}

EngineProblem llama_engine_problem(const core::ModelSpec& m) {
  using core::Family;
  if (m.family != Family::Llama) return {"architecture", fmt::format("{} is not of the llama family", m.name)};
  if (m.norm != core::NormKind::RmsNorm || m.positions != core::PositionKind::Rotary)
    return {"architecture", "the engine's Llama needs RMSNorm and rotary positions"};
  if (m.mlp != core::MlpKind::GatedSilu) return {"hidden_act", "the engine's Llama has kernels for a SiLU-gated MLP only"};
  if (m.qkv_bias || m.attn_out_bias) return {"attention_bias", "the engine's Llama has no kernels for attention_bias"};
  if (m.mlp_bias) return {"mlp_bias", "the engine's Llama has no kernels for mlp_bias"};
  if (!m.rope_scaling.empty())
    return {"rope_scaling", fmt::format("the engine's Llama has no kernels for rope_scaling '{}' (only unscaled rotation)",
                                        m.rope_scaling)};
  if (m.heads <= 0 || m.kv_head_count() <= 0 || m.heads % m.kv_head_count() != 0)
    return {"num_key_value_heads", "num_attention_heads must be a multiple of num_key_value_heads"};
  if (m.heads * m.head_dim() != m.hidden || m.head_dim() % 2 != 0)
    return {"head_dim", "the engine's Llama needs heads x head_dim = hidden_size and an even head_dim"};
  if (m.rotary_fraction != 1.0 || m.sliding_window > 0 || m.mla() || m.experts > 0 || m.fused_qkv || m.fused_gate_up ||
      m.embedding_norm || !m.final_norm || m.parallel_attention || m.norms_per_block != 2 || m.embed_dim > 0)
    return {"architecture", "the engine's Llama has no kernels for partial rotation, sliding windows, latent attention, "
                            "experts, fused projections or extra norms"};
  return {};
}

void require_engine_architecture(const core::ModelSpec& m, const std::string& what) {
  if (m.flash_attention)
    throw core::ConfigError(m.file.empty() ? m.name : m.file, "attention",
                            fmt::format("{} runs eager attention only; attention: flash is modelled by zinf plan, sim "
                                        "and tune", what));
  if (m.is_gpt2()) return;
  const std::string where = m.file.empty() ? m.name : m.file;
  if (m.family == core::Family::Llama) {
    const EngineProblem p = llama_engine_problem(m);
    if (p.why.empty()) return;
    throw core::ConfigError(where, p.key, fmt::format("{}: {}", what, p.why));
  }
  std::string arch = core::to_string(m.family);
  if (m.family == core::Family::Gpt2) arch += " with positions, heads or biases GPT-2's kernels do not have";
  throw core::ConfigError(where, "architecture",
                          fmt::format("{} runs the GPT-2 and Llama architectures only, and {} is {}; zinf plan, sim "
                                      "and tune model it",
                                      what, m.name, arch));
}

core::ModelSpec find_model(const std::string& name_or_path, const std::string& source_dir) {
  const std::string hf = hf_config_path(name_or_path);
  if (!hf.empty()) return load_hf_config(hf);
  std::error_code ec;
  if (std::filesystem::is_directory(name_or_path, ec))
    throw core::ConfigError(name_or_path, "", "a folder holding no config.json; give a model's YAML, a config.json or its folder");
  return core::load_model_spec(core::resolve_config(name_or_path, "models", core::zinf_root(source_dir)));
}

}  // namespace zinf::models
