// Gpt2 under tensor parallelism (engine/model/gpt2.hpp): the shares of the parameter groups, the
// vocabulary-parallel cross-entropy, and the all-reduces the Program runs over the tensor-parallel
// group. (The vocabulary-parallel embedding is gpt2.cpp's, which runs a rank's share of the
// vocabulary a tile at a time.)
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/model/gpt2.hpp"

namespace zinf::engine {

Gpt2::WholeShape Gpt2::whole_shape(int32_t group) const {
  const core::ParamGroup& g = graph_.params.at(size_t(group));
  if (TP_ == 1) return {g.rows, g.cols, g.numel};  // the whole model is this rank's (Llama's always)
  switch (group_role_[size_t(group)]) {
    case Role::Embed:
    case Role::LmHead: return {V_, C_, V_ * C_};
    case Role::CAttn: return {3 * C_, C_, 3 * C_ * C_ + 3 * C_};
    case Role::Fc: return {F_, C_, F_ * C_ + F_};
    case Role::AttnProj: return {C_, C_, C_ * C_ + C_};
    case Role::MlpProj: return {C_, F_, C_ * F_ + C_};
    default: return {g.rows, g.cols, g.numel};  // layernorms, wpe: whole on every rank
  }
}

// Copies between the whole model's tensor of a group and rank r's share of it: `from` is the whole
// tensor and `to` the share (to_share), or `from` the share and `to` the whole tensor. The share's
// layout is engine/model/gpt2.hpp's; the caller sizes both (whole_shape(group).numel, the group's numel).
void Gpt2::copy_share(int32_t group, int r, const float* from, float* to, bool to_share) const {
  const core::ParamGroup& g = graph_.params.at(size_t(group));
  const WholeShape w = whole_shape(group);
  auto copy = [&](int64_t at_whole, int64_t at_share, int64_t n) {
    if (to_share) std::copy_n(from + at_whole, n, to + at_share);
    else std::copy_n(from + at_share, n, to + at_whole);
  };
  // Whole rows [whole_row, whole_row + n) of the weight (and, with a bias, its entries) and the
  // share's rows from share_row.
  auto rows = [&](int64_t whole_row, int64_t n, int64_t share_row, bool bias) {
    copy(whole_row * w.cols, share_row * w.cols, n * w.cols);
    if (bias) copy(w.rows * w.cols + whole_row, g.rows * g.cols + share_row, n);
  };
  switch (group_role_[size_t(group)]) {
    case Role::Embed:
    case Role::LmHead: {  // rows past V stay zero in the share
      const int64_t off = Vl_ * r, valid = std::clamp<int64_t>(V_ - off, 0, Vl_);
      if (to_share) std::fill_n(to, g.numel, 0.0f);
      rows(off, valid, 0, false);
      return;
    }
    case Role::CAttn:
      for (int64_t j = 0; j < 3; ++j) rows(j * C_ + r * Ca_, Ca_, j * Ca_, true);  // rank r's q, k, v heads
      return;
    case Role::Fc: rows(r * Fl_, Fl_, 0, true); return;
    case Role::AttnProj:
    case Role::MlpProj: {  // input columns [r·k, (r+1)·k) of every row; the bias whole
      const int64_t k = g.cols;
      for (int64_t i = 0; i < w.rows; ++i) copy(i * w.cols + r * k, i * k, k);
      copy(w.rows * w.cols, g.rows * g.cols, w.rows);
      return;
    }
    default: copy(0, 0, g.numel); return;  // whole on every rank
  }
}

void Gpt2::shard_group(int32_t group, const std::vector<float>& whole, std::vector<float>& out) const {
  const core::ParamGroup& g = graph_.params.at(size_t(group));
  if (int64_t(whole.size()) != whole_shape(group).numel)
    throw std::invalid_argument("gpt2: group " + g.name + " has " + std::to_string(whole_shape(group).numel) +
                                " elements in the whole model, got " + std::to_string(whole.size()));
  out.assign(size_t(g.numel), 0.0f);
  copy_share(group, tp_.rank, whole.data(), out.data(), true);
}

void Gpt2::whole_group(int32_t group, const std::vector<float>& shares, std::vector<float>& out) const {
  const int64_t n = graph_.params.at(size_t(group)).numel;
  if (int64_t(shares.size()) != n * TP_)
    throw std::invalid_argument("gpt2: group " + graph_.params[size_t(group)].name + ": " + std::to_string(TP_) +
                                " shares of " + std::to_string(n) + " elements expected, got " +
                                std::to_string(shares.size()));
  out.assign(size_t(whole_shape(group).numel), 0.0f);
  for (int r = 0; r < TP_; ++r) copy_share(group, r, shares.data() + r * n, out.data(), false);
}

// Vocabulary-parallel cross-entropy, first half: per token, this rank's largest logit, the sum of
// exp(logit - that) over its real vocabulary rows, and the target's logit when it is in this
// rank's part (0 otherwise). losses holds them as three T-long rows until the all-reduce.
void Gpt2::tp_loss_forward(Gpt2Activations& a) const {
  a.losses.assign(size_t(3 * T_), 0.0f);
  float *mx = a.losses.data(), *sum = mx + T_, *tgt = sum + T_;
  for (int64_t t = 0; t < T_; ++t) {
    const float* l = a.logits.data() + t * Vl_;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < Vvalid_; ++v) m = std::max(m, l[v]);
    float s = 0;
    for (int64_t v = 0; v < Vvalid_; ++v) s += std::exp(l[v] - m);
    mx[t] = m;
    sum[t] = s;
    const int64_t v = a.targets[size_t(t)] - Voff_;
    tgt[t] = v >= 0 && v < Vvalid_ ? l[v] : 0.0f;
  }
  a.loss = 0;  // final after tp_loss_reduce
}

// Second half, on the group: the largest logit over the group (an all-gather of each rank's), the
// sums rescaled to it and the target logits summed (an all-reduce); then each token's loss. The
// head's backward takes each rank's probabilities from the largest logit and the sum.
void Gpt2::tp_loss_reduce(Gpt2Activations& a) const {
  if (int64_t(a.losses.size()) != 3 * T_) throw std::invalid_argument("gpt2: loss: the all-reduce runs after the forward");
  float *mx = a.losses.data(), *sum = mx + T_, *tgt = sum + T_;
  std::vector<float> all(size_t(T_ * TP_));
  tp_.group->all_gather(mx, size_t(T_) * sizeof(float), all.data(), "tensor-parallel loss: largest logits");
  for (int64_t t = 0; t < T_; ++t) {
    float m = all[size_t(t)];
    for (int64_t r = 1; r < TP_; ++r) m = std::max(m, all[size_t(r * T_ + t)]);
    sum[t] = sum[t] == 0.0f ? 0.0f : sum[t] * std::exp(mx[t] - m);
    mx[t] = m;
  }
  tp_.group->all_reduce(sum, size_t(2 * T_), "tensor-parallel loss: sums and target logits");
  double total = 0;
  for (int64_t t = 0; t < T_; ++t) {
    const float loss = -(tgt[t] - mx[t] - std::log(sum[t]));
    total += double(loss);
    tgt[t] = loss;  // the third row now holds each token's loss
  }
  a.loss = total / double(T_);
}

void Gpt2::tensor_parallel_all_reduce(int op, bool after_backward, Gpt2Activations& a) const {
  const OpRole r = role(op);
  const std::string& name = graph_.ops[size_t(op)].name;
  if (TP_ <= 1) throw std::logic_error("gpt2: operator " + name + ": a tensor-parallel all-reduce without tensor parallelism");
  auto sum = [&](Activation& v, const char* what) {
    if (int64_t(v.size()) != T_ * C_)
      throw std::invalid_argument("gpt2: operator " + name + ": " + what + " is not resident for its all-reduce");
    tp_.group->all_reduce(v.data(), v.size(), name.c_str());
  };
  auto blk = [&]() -> BlockActivations& { return a.blocks.at(size_t(r.block)); };
  if (!after_backward) {
    switch (r.role) {
      case Role::Embed: return sum(a.x[0], "the embedding");
      case Role::AttnProj: return sum(blk().attproj, "the partial output");
      case Role::MlpProj: return sum(blk().mlpproj, "the partial output");
      case Role::Loss: return tp_loss_reduce(a);
      default: break;
    }
  } else {
    switch (r.role) {
      case Role::CAttn: return sum(blk().d_ln1, "the input gradient");
      case Role::Fc: return sum(blk().d_ln2, "the input gradient");
      case Role::LmHead: return sum(a.d_lnf, "the input gradient");
      default: break;
    }
  }
  throw std::logic_error("gpt2: operator " + name + " has no tensor-parallel all-reduce after its " +
                         (after_backward ? "backward" : "forward"));
}

}  // namespace zinf::engine
