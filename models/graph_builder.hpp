// The two steps every model builder in models/ takes: add a parameter group and add an operator
// to the graph being built, each numbered in order. Builders of GPT-2 and of the Hugging Face
// families derive from it. Not thread-safe; one builder builds one graph.
#pragma once
#include <cstdint>
#include <string>

#include "core/graph.hpp"

namespace zinf::models {

struct GraphBuilder {
  core::ModelGraph g;

  int add_params(std::string name, int64_t rows, int64_t cols, int64_t numel, bool tileable) {
    core::ParamGroup p;
    p.id = static_cast<int>(g.params.size());
    p.name = std::move(name);
    p.rows = rows;
    p.cols = cols;
    p.numel = numel;
    p.tileable = tileable;
    g.params.push_back(p);
    return p.id;
  }

  // `group` < 0: the operator reads no parameters.
  core::Operator& add_op(std::string name, core::OpKind kind, int block, int group, core::OpRole role) {
    core::Operator o;
    o.id = static_cast<int>(g.ops.size());
    o.name = std::move(name);
    o.kind = kind;
    o.role = role;
    o.block = block;
    if (group >= 0) o.param_groups.push_back(group);
    g.ops.push_back(o);
    return g.ops.back();
  }
};

}  // namespace zinf::models
