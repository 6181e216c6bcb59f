// The readers of each family's config.json keys (transformers' configuration classes, their
// defaults, and what the modeling code builds from them). Internal to formats/hf_config.cpp.
// Stateless functions; the HfReader they fill is not shared.
#pragma once
#include "core/model_spec.hpp"
#include "formats/hf_reader.hpp"

namespace zinf::models {

// Fills `m` (whose family and its defaults are set) from `r`; returns max_position_embeddings, or
// 0 for a family without one.
int64_t read_family(HfReader& r, core::ModelSpec& m);

}  // namespace zinf::models
