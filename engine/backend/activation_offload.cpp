#include "engine/backend/activation_offload.hpp"

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

using BT = SavedTensor;

// What a block's backward reads of its forward: the intermediates, not their gradients (which
// backward allocates) nor the residual stream x[l] (the segment's input and output stay).
constexpr BT kForwardTensors[] = {BT::Ln1, BT::Ln1Mean, BT::Ln1Rstd, BT::Qkv,     BT::Atty,    BT::Att,     BT::AttProj,
                                  BT::Res1, BT::Ln2,     BT::Ln2Mean, BT::Ln2Rstd, BT::Fch, BT::FchGelu, BT::MlpProj};

std::string tensor_of(core::OpRole role) {
  for (const auto& t : core::block_tensors(core::ModelSpec{}, false))
    if (t.producer == role) return t.name;
  return "";
}

}  // namespace

std::vector<SavedTensor> activation_tensors(const std::string& name) {
  if (name == "ln1") return {BT::Ln1, BT::Ln1Mean, BT::Ln1Rstd};
  if (name == "qkv") return {BT::Qkv};
  if (name == "attn") return {BT::Atty, BT::Att};
  if (name == "attproj") return {BT::AttProj};
  if (name == "res1") return {BT::Res1};
  if (name == "ln2") return {BT::Ln2, BT::Ln2Mean, BT::Ln2Rstd};
  if (name == "fch") return {BT::Fch};
  if (name == "gelu") return {BT::FchGelu};
  if (name == "mlpproj") return {BT::MlpProj};
  throw std::invalid_argument(fmt::format("the Program names an activation tensor '{}' that the GPT backend does not keep", name));
}

ActivationOffloader::ActivationOffloader(const core::Program& program, const core::ModelGraph& graph, NvmeStore* store,
                                         ActivationDevice& device)
    : P(program), G(graph), store_(store), device_(device) {
  for (const auto& s : P.activations()) {
    if (s.tier == Tier::Nvme && !store_)
      throw std::invalid_argument(fmt::format(
          "the plan offloads activations of blocks {}-{} to NVMe: give an NVMe directory (--nvme-dir)", s.first_block,
          s.last_block));
    for (const auto& t : s.tensors) activation_tensors(t.name);  // names the backend does not keep are refused here, not mid-step
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

void ActivationOffloader::after_forward(const Task& t) {
  if (t.kind != TaskKind::Forward || t.op < 0) return;
  const core::Operator& o = G.ops.at(size_t(t.op));
  if (o.role != core::OpRole::Res2) return;
  const auto it = recomputed_.find(o.block);
  if (it == recomputed_.end()) return;
  for (core::OpRole r : it->second)
    for (BT v : activation_tensors(tensor_of(r))) device_.release_activation(t.micro_batch, {o.block, v});
}

std::vector<ActivationRef> ActivationOffloader::tensors(const Task& t) const {
  if (t.activation < 0 || size_t(t.activation) >= P.activations().size())
    throw std::logic_error(fmt::format("{}: names no activation segment of the Program", P.label(t)));
  const auto& seg = P.activations()[size_t(t.activation)];
  std::vector<ActivationRef> out;
  if (!seg.tensors.empty()) {
    for (const auto& x : seg.tensors)
      for (BT v : activation_tensors(x.name)) out.push_back({x.block, v});
    return out;
  }
  for (int b = seg.first_block; b <= seg.last_block; ++b)
    for (BT v : kForwardTensors) out.push_back({b, v});
  return out;
}

ActivationOffloader::Copy ActivationOffloader::pack(const Task& t) const {
  Copy c;
  const auto refs = tensors(t);
  for (const ActivationRef& r : refs) {
    c.sizes.push_back(device_.activation_elements(t.micro_batch, r));
    c.elements += c.sizes.back();
  }
  c.host = device_.activation_host(c.elements);
  device_.save_activations(t, refs, c.sizes, c.host.get());  // off the device: its memory goes back to the arena
  return c;
}

void ActivationOffloader::unpack(const Task& t, const Copy& c) const {
  const auto refs = tensors(t);
  if (refs.size() != c.sizes.size())
    throw std::logic_error(fmt::format("{}: the saved copy has {} tensors, the segment {}", P.label(t), c.sizes.size(), refs.size()));
  device_.restore_activations(t, refs, c.sizes, c.host.get());
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

void ActivationOffloader::run(const Task& t) {
  const Key key{t.activation, t.micro_batch};
  const bool device_end = t.from == Tier::Device || t.to == Tier::Device;
  switch (t.kind) {
    case TaskKind::CopyD2H: {
      Copy c = pack(t);
      std::lock_guard<std::mutex> lock(mu_);
      copies_[key] = std::move(c);
      return;
    }
    case TaskKind::NvmeWrite: {
      Copy c;
      if (device_end) {  // GDS: straight from the device tensors
        c = pack(t);
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        c = std::move(copies_.at(key));
      }
      store(t);
      const auto id = nvme_tensor(key, c.elements);
      store(t).write(id, 0, c.host.get(), c.elements * sizeof(float)).wait_or_throw();
      c.host.reset();  // the host copy goes; the sizes stay for the read
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
      c.host = device_.activation_host(c.elements);
      store(t).read(id, 0, c.host.get(), c.elements * sizeof(float)).wait_or_throw();
      if (device_end) {  // GDS: straight into the device tensors
        unpack(t, c);
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
      unpack(t, c);
      return;
    }
    default:
      throw std::logic_error(fmt::format("{}: no activation transfer of kind {}", P.label(t), core::to_string(t.kind)));
  }
}

void ActivationOffloader::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  copies_.clear();
}

}  // namespace zinf::engine
