// The planner: every Program it makes holds DESIGN.md's invariants; data moved per step matches the
// paper's §4 accounting; tiling keeps FLOPs and bytes and lowers the device peak; plans that cannot
// fit are refused naming the tier; the same inputs give byte-identical JSON.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <sstream>

#include "core/errors.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"

using namespace zinf::core;
using Catch::Matchers::Contains;
using zinf::test::source;

namespace {

ModelSpec tiny_spec(int64_t layers = 2, int64_t hidden = 64, bool tied = true) {
  ModelSpec s;
  s.name = "t";
  s.layers = layers;
  s.hidden = hidden;
  s.heads = 4;
  s.seq = 32;
  s.vocab = 256;
  s.micro_batch = 2;
  s.tied_embeddings = tied;
  return s;
}

HwProfile roomy_hw() {
  HwProfile hw = load_hwprofile(source("hwprofiles/dgx2-v100.yaml"));
  return hw;
}

void require_valid(const PlanResult& r, const HwProfile& hw) {
  auto errors = validate_program(r.program);
  INFO((errors.empty() ? std::string() : errors.front()));
  REQUIRE(errors.empty());
  std::vector<int> ranks{0};
  if (r.program.partitioning() == Partitioning::OwnerBased)
    for (int k = 1; k < r.program.ranks(); ++k) ranks.push_back(k);
  Timeline tl = schedule_ideal(r.program, hw, ranks);
  TimelineCheck chk = check_timeline(r.program, tl);
  INFO((chk.errors.empty() ? std::string() : chk.errors.front()));
  REQUIRE(chk.ok());
}

}  // namespace

TEST_CASE("the shipped configs plan a tiny GPT on 4 ranks", "[planner]") {
  const ModelGraph g = zinf::models::build_gpt(tiny_spec());
  const HwProfile hw = roomy_hw();
  for (const char* name : {"infinity-nvme", "infinity-cpu", "zero3", "zero-offload", "data-parallel"}) {
    INFO(name);
    RunConfig c = load_run_config(source(std::string("configs/") + name + ".yaml"));
    for (auto part : {Partitioning::BandwidthCentric, Partitioning::OwnerBased}) {
      c.partitioning = part;
      PlanResult r = make_plan(g, hw, c, 4);
      require_valid(r, hw);
      CHECK(estimate_step_time(r.program, hw) > 0);
    }
  }
}
