#include "sim/fat_tree.hpp"

#include <stdexcept>

namespace zinf::sim {

FatTreeRoutes::FatTreeRoutes(std::vector<int> children, std::vector<int> parents)
    : m_(std::move(children)), w_(std::move(parents)) {
  if (m_.empty() || m_.size() != w_.size())
    throw std::invalid_argument("a fat tree needs as many parent counts as child counts, one per level");
  if (w_.front() != 1) throw std::invalid_argument("a fat tree's endpoints (NIC ports) have one leaf switch each: parents[0] must be 1");
  m_prod_.assign(1, 1);
  w_prod_.assign(1, 1);
  for (size_t i = 0; i < m_.size(); ++i) {
    if (m_[i] < 1 || w_[i] < 1) throw std::invalid_argument("a fat tree's child and parent counts must be at least 1");
    m_prod_.push_back(m_prod_.back() * m_[i]);
    w_prod_.push_back(w_prod_.back() * w_[i]);
    if (m_prod_.back() > (int64_t{1} << 40)) throw std::invalid_argument("a fat tree of more than 2^40 endpoints");
  }
  const int h = static_cast<int>(m_.size());
  level_base_.assign(static_cast<size_t>(h) + 1, 0);
  for (int l = 1; l < h; ++l) {
    const int64_t elements = w_prod_[static_cast<size_t>(l)] * (endpoints() / m_prod_[static_cast<size_t>(l)]);
    level_base_[static_cast<size_t>(l) + 1] = level_base_[static_cast<size_t>(l)] + elements * w_[static_cast<size_t>(l)];
  }
  cables_ = level_base_.back();
}

int FatTreeRoutes::common_level(int64_t src, int64_t dst) const {
  int l = 0;
  while (src / m_prod_[static_cast<size_t>(l)] != dst / m_prod_[static_cast<size_t>(l)]) ++l;
  return l;
}

// The cable from the level-`level` element (b digits `bpart` over the subtree holding `endpoint`)
// to its parent number `parent`.
int64_t FatTreeRoutes::cable(int level, int64_t bpart, int64_t endpoint, int64_t parent) const {
  const auto l = static_cast<size_t>(level);
  const int64_t element = bpart + w_prod_[l] * (endpoint / m_prod_[l]);
  return level_base_[l] + element * w_[l] + parent;
}

void FatTreeRoutes::route(int64_t src, int64_t dst, std::vector<int64_t>& up, std::vector<int64_t>& down) const {
  up.clear();
  down.clear();
  if (src < 0 || dst < 0 || src >= endpoints() || dst >= endpoints())
    throw std::out_of_range("fat tree endpoint out of range");
  const int top = common_level(src, dst);
  int64_t bpart = 0;  // the parents chosen so far: b_1 + b_2 w_1 + b_3 w_1 w_2 + ...
  for (int l = 1; l < top; ++l) {
    const auto li = static_cast<size_t>(l);
    const int64_t parent = (dst / w_prod_[li]) % w_[li];
    up.push_back(cable(l, bpart, src, parent));
    bpart += parent * w_prod_[li];
  }
  for (int l = top - 1; l >= 1; --l) {
    const auto li = static_cast<size_t>(l);
    down.push_back(cable(l, bpart % w_prod_[li], dst, (bpart / w_prod_[li]) % w_[li]));
  }
}

std::string FatTreeRoutes::cable_name(int64_t id) const {
  size_t l = 1;
  while (l + 1 < level_base_.size() && id >= level_base_[l + 1]) ++l;
  const int64_t local = id - level_base_[l];
  return "tree.l" + std::to_string(l) + "." + std::to_string(local / w_[l]) + "^" + std::to_string(local % w_[l]);
}

}  // namespace zinf::sim
