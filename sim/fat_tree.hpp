// Static routing in a multi-stage fat tree, as InfiniBand subnet managers route one: an extended
// generalized fat tree XGFT(h; m1..mh; w1..wh) (Ohring et al.), where a switch of level i has m_i
// children and an element of level i-1 has w_i parents; the endpoints (level 0) are NIC ports.
// A transfer climbs to the lowest level where its two endpoints share a subtree and comes down the
// one path below the switch it reached. The climb is destination-mod-k (D-mod-k): at level l the
// parent taken is floor(d / (w_1 ... w_l)) mod w_{l+1}, d the destination endpoint, so every route
// to one destination converges on the same switches, and two routes that pick the same parent from
// the same switch share that cable (Hoefler, Schneider and Lumsdaine, "Multistage switches are not
// crossbars", Cluster 2008: static routing is what makes a full-bisection tree block).
//
// Only the switch-to-switch cables are numbered here (levels 1 .. h-1, each one link per direction):
// an endpoint's own cable to its leaf is its NIC, which the platform already has (w_1 must be 1).
// Pure arithmetic, no SimGrid; thread-safe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zinf::sim {

class FatTreeRoutes {
public:
  // children: m_1..m_h (leaf first); parents: w_1..w_h. Throws std::invalid_argument on a shape
  // that is not a tree (sizes differ, a zero, w_1 != 1).
  FatTreeRoutes(std::vector<int> children, std::vector<int> parents);

  int64_t endpoints() const { return m_prod_.back(); }  // NIC ports the tree can hold
  int64_t cables() const { return cables_; }            // switch-to-switch cables
  // Cables from endpoint `src` to endpoint `dst`: those climbed (crossed upwards, leaf first) and
  // those descended (crossed downwards, top first). Cleared first.
  void route(int64_t src, int64_t dst, std::vector<int64_t>& up, std::vector<int64_t>& down) const;
  // Lowest level whose switch holds both endpoints (1: the same leaf).
  int common_level(int64_t src, int64_t dst) const;
  // "l<level>.<element>-><parent>", for the platform's link names.
  std::string cable_name(int64_t cable) const;

private:
  int64_t cable(int level, int64_t bpart, int64_t endpoint, int64_t parent) const;

  std::vector<int> m_, w_;
  std::vector<int64_t> m_prod_;  // m_prod_[l] = m_1 ... m_l (m_prod_[0] = 1)
  std::vector<int64_t> w_prod_;  // w_prod_[l] = w_1 ... w_l
  std::vector<int64_t> level_base_;  // first cable id of each level
  int64_t cables_ = 0;
};

}  // namespace zinf::sim
