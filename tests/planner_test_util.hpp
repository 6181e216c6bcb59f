// What the planner's tests share: a small GPT spec, a roomy profile, and the check that a plan's
// Program holds the invariants (validate_program) and its ideal schedule the Timeline's
// (check_timeline). Header-only, for tests/planner_*_test.cpp.
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"

namespace zinf::test {

inline core::ModelSpec tiny_spec(int64_t layers = 2, int64_t hidden = 64, bool tied = true) {
  core::ModelSpec s = core::load_model_spec(source("models/gpt-tiny.yaml"));
  s.layers = layers;
  s.hidden = hidden;
  s.heads = 4;
  s.seq = 32;
  s.vocab = 256;
  s.micro_batch = 2;
  s.tied_embeddings = tied;
  return s;
}

inline core::HwProfile roomy_hw() { return core::load_hwprofile(source("hwprofiles/dgx2-v100.yaml")); }

inline void require_valid(const core::PlanResult& r, const core::HwProfile& hw) {
  auto errors = core::validate_program(r.program);
  INFO((errors.empty() ? std::string() : errors.front()));
  REQUIRE(errors.empty());
  std::vector<int> ranks{0};
  if (r.program.partitioning() == core::Partitioning::OwnerBased)
    for (int k = 1; k < r.program.ranks(); ++k) ranks.push_back(k);
  core::Timeline tl = core::schedule_ideal(r.program, hw, ranks);
  core::TimelineCheck chk = core::check_timeline(r.program, tl);
  INFO((chk.errors.empty() ? std::string() : chk.errors.front()));
  REQUIRE(chk.ok());
}

}  // namespace zinf::test
