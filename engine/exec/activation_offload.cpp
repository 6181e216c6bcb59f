#include "engine/exec/activation_offload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/kernel_activations.hpp"

namespace zinf::engine {

using core::Task;
using core::TaskKind;
using core::Tier;

namespace {

// What a block's backward reads of its forward: the intermediates, not their gradients (which
// backward allocates) nor the residual stream x[l] (the segment's input and output stay).
std::vector<Activation*> forward_tensors(BlockActivations& b) {
  return {&b.ln1, &b.ln1_mean, &b.ln1_rstd, &b.qkv,      &b.atty,      &b.att,      &b.attproj,
          &b.res1, &b.ln2,      &b.ln2_mean, &b.ln2_rstd, &b.fch,       &b.fch_gelu, &b.mlpproj};
}

// The kernel tensors of one of core::block_tensors' names (what its producer writes).
std::vector<Activation*> named_tensors(BlockActivations& b, const std::string& name) {
  if (name == "ln1") return {&b.ln1, &b.ln1_mean, &b.ln1_rstd};
  if (name == "qkv") return {&b.qkv};
  if (name == "attn") return {&b.atty, &b.att};
  if (name == "attproj") return {&b.attproj};
  if (name == "res1") return {&b.res1};
  if (name == "ln2") return {&b.ln2, &b.ln2_mean, &b.ln2_rstd};
  if (name == "fch") return {&b.fch};
  if (name == "gelu") return {&b.fch_gelu};
  if (name == "mlpproj") return {&b.mlpproj};
  throw std::invalid_argument(fmt::format("the Program names an activation tensor '{}' that the GPT backend does not keep", name));
}

std::string tensor_of(core::OpRole role) {
  for (const auto& t : core::block_tensors(core::ModelSpec{}, false))
    if (t.producer == role) return t.name;
  return "";
}

}  // namespace

ActivationOffloader::ActivationOffloader(const core::Program& program, const core::ModelGraph& graph, NvmeStore* store)
    : P(program), G(graph), store_(store) {
  for (const auto& s : P.activations()) {
    if (s.tier == Tier::Nvme && !store_)
      throw std::invalid_argument(fmt::format(
          "the plan offloads activations of blocks {}-{} to NVMe: give an NVMe directory (--nvme-dir)", s.first_block,
          s.last_block));
    for (const auto& t : s.tensors) {
      BlockActivations probe;
      named_tensors(probe, t.name);  // names the backend does not keep are refused here, not mid-step
    }
  }
  for (const auto& t : P.tasks()) {
    if (t.kind != TaskKind::Recompute || t.checkpoint >= 0 || t.op < 0) continue;
    const core::Operator& o = G.ops.at(size_t(t.op));
    if (o.block < 0 || tensor_of(o.role).empty() || o.role == core::OpRole::Res2)
      throw std::invalid_argument(fmt::format("{}: recomputes {} outside a checkpoint, which keeps no tensor of its own here",
                                              P.label(t), o.name));
    auto& roles = recomputed_[o.block];
    if (std::find(roles.begin(), roles.end(), o.role) == roles.end()) roles.push_back(o.role);
  }
}

void ActivationOffloader::after_forward(const Task& t, Gpt2Activations& a) {
  if (t.kind != TaskKind::Forward || t.op < 0) return;
  const core::Operator& o = G.ops.at(size_t(t.op));
  if (o.role != core::OpRole::Res2) return;
  const auto it = recomputed_.find(o.block);
  if (it == recomputed_.end()) return;
  for (core::OpRole r : it->second)
    for (Activation* v : named_tensors(a.blocks.at(size_t(o.block)), tensor_of(r))) Gpt2Activations::release(*v);
}

std::vector<Activation*> ActivationOffloader::tensors(const Task& t, Gpt2Activations& a) const {
  if (t.activation < 0 || size_t(t.activation) >= P.activations().size())
    throw std::logic_error(fmt::format("{}: names no activation segment of the Program", P.label(t)));
  const auto& seg = P.activations()[size_t(t.activation)];
  std::vector<Activation*> out;
  if (!seg.tensors.empty()) {
    for (const auto& x : seg.tensors)
      for (Activation* v : named_tensors(a.blocks.at(size_t(x.block)), x.name)) out.push_back(v);
    return out;
  }
  for (int b = seg.first_block; b <= seg.last_block; ++b)
    for (Activation* v : forward_tensors(a.blocks.at(size_t(b)))) out.push_back(v);
  return out;
}

ActivationOffloader::Copy ActivationOffloader::pack(const Task& t, Gpt2Activations& a) const {
  Copy c;
  auto ts = tensors(t, a);
  for (Activation* v : ts) {
    c.sizes.push_back(v->size());
    c.elements += v->size();
  }
  c.host.resize(c.elements);
  size_t at = 0;
  for (Activation* v : ts) {
    std::copy(v->begin(), v->end(), c.host.begin() + std::ptrdiff_t(at));
    at += v->size();
    Gpt2Activations::release(*v);  // off the device: its memory goes back to the arena
  }
  return c;
}

void ActivationOffloader::unpack(const Task& t, Gpt2Activations& a, const Copy& c) const {
  auto ts = tensors(t, a);
  if (ts.size() != c.sizes.size())
    throw std::logic_error(fmt::format("{}: the saved copy has {} tensors, the segment {}", P.label(t), c.sizes.size(), ts.size()));
  size_t at = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i]->assign(c.host.begin() + std::ptrdiff_t(at), c.host.begin() + std::ptrdiff_t(at + c.sizes[i]));
    at += c.sizes[i];
  }
}

NvmeStore& ActivationOffloader::store(const Task& t) const {
  if (!store_) throw std::logic_error(fmt::format("{}: an NVMe transfer without an NVMe store", P.label(t)));
  return *store_;
}

NvmeStore::TensorId ActivationOffloader::nvme_tensor(const Key& key, size_t elements) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = on_nvme_.find(key);
  if (it == on_nvme_.end() || nvme_elements_[key] != elements) {
    const auto id = store_->create(fmt::format("act_{}_mb{}", key.first, key.second), elements * sizeof(float));
    on_nvme_[key] = id;
    nvme_elements_[key] = elements;
    return id;
  }
  return it->second;
}

void ActivationOffloader::run(const Task& t, Gpt2Activations& a) {
  const Key key{t.activation, t.micro_batch};
  const bool device_end = t.from == Tier::Device || t.to == Tier::Device;
  switch (t.kind) {
    case TaskKind::CopyD2H: {
      Copy c = pack(t, a);
      std::lock_guard<std::mutex> lock(mu_);
      copies_[key] = std::move(c);
      return;
    }
    case TaskKind::NvmeWrite: {
      Copy c;
      if (device_end) {  // GDS: straight from the device tensors
        c = pack(t, a);
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        c = std::move(copies_.at(key));
      }
      store(t);
      const auto id = nvme_tensor(key, c.elements);
      store(t).write(id, 0, c.host.data(), c.elements * sizeof(float)).wait_or_throw();
      c.host = Staging<float>();  // the host copy goes; the sizes stay for the read
      std::lock_guard<std::mutex> lock(mu_);
      copies_[key] = std::move(c);
      return;
    }
    case TaskKind::NvmeRead: {
      Copy c;
      NvmeStore::TensorId id;
      {
        std::lock_guard<std::mutex> lock(mu_);
        c = std::move(copies_.at(key));
        id = on_nvme_.at(key);
      }
      c.host.resize(c.elements);
      store(t).read(id, 0, c.host.data(), c.elements * sizeof(float)).wait_or_throw();
      if (device_end) {  // GDS: straight into the device tensors
        unpack(t, a, c);
        std::lock_guard<std::mutex> lock(mu_);
        copies_.erase(key);
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      copies_[key] = std::move(c);
      return;
    }
    case TaskKind::CopyH2D: {
      Copy c;
      {
        std::lock_guard<std::mutex> lock(mu_);
        c = std::move(copies_.at(key));
        copies_.erase(key);
      }
      unpack(t, a, c);
      return;
    }
    default:
      throw std::logic_error(fmt::format("{}: no activation transfer of kind {}", P.label(t), core::to_string(t.kind)));
  }
}

size_t ActivationOffloader::copies_held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_.size();
}

}  // namespace zinf::engine
