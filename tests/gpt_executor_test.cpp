// The executor running a planned Program with the GPT CPU backend: the measured Timeline obeys the
// Program, and offloaded, tiled, checkpoint-offloaded configurations give the same losses as the
// configuration with everything on the device.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/hwprofile.hpp"
#include "core/kernel_activations.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/backend/activation_offload.hpp"
#include "engine/exec/executor.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/reference_trainer.hpp"
#include "models/gpt.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using zinf::test::source;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("zinf_exec_" + std::to_string(::getpid()) + "_" + std::to_string(rand()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

engine::TokenCorpus test_corpus() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919 % 1000) + ". ";
  return engine::TokenCorpus::from_text(text);
}

struct TrainExtras {
  core::Timeline* last = nullptr;
  std::function<void(core::HwProfile&)> edit_hw;   // applied to the profile before planning
  std::function<void(core::ModelSpec&)> edit_model;  // applied to gpt-tiny's spec
  std::function<void(const core::PlanResult&)> on_plan;
  int64_t* device_peak = nullptr;                  // the backend's arena peak over the run
};

std::vector<double> train(const std::string& config_yaml, int steps, const TrainExtras& x);
std::vector<double> train(const std::string& config_yaml, int steps, core::Timeline* last = nullptr) {
  TrainExtras x;
  x.last = last;
  return train(config_yaml, steps, x);
}

std::vector<double> train(const std::string& config_yaml, int steps, const TrainExtras& x) {
  core::Timeline* last = x.last;
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  if (x.edit_model) x.edit_model(spec);
  auto graph = models::build_gpt(spec);
  auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  if (x.edit_hw) x.edit_hw(hw);
  auto config = core::parse_run_config(config_yaml, "test-config");
  auto planned = core::make_plan(graph, hw, config, 1);
  if (x.on_plan) x.on_plan(planned);
  REQUIRE(core::validate_program(planned.program).empty());
  engine::Gpt2 model(graph);
  engine::LocalCollectives comm;
  TempDir dir;
  engine::GptBackendOptions o;
  o.nvme_dir = dir.path.string();
  o.config = config;
  engine::GptCpuBackend backend(planned.program, planned.plan, model, 0, comm, o);
  backend.initialize(model.init_params(7));
  auto corpus = test_corpus();
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  engine::Executor exec(planned.program, 0, backend);
  std::vector<double> losses;
  for (int s = 1; s <= steps; ++s) {
    std::vector<engine::Batch> batches;
    for (int mb = 0; mb < planned.program.micro_batches(); ++mb) batches.push_back(loader.next());
    backend.begin_step(s, std::move(batches));
    auto tl = exec.run_step();
    auto check = core::check_timeline(planned.program, tl, 1e-3);
    INFO((check.errors.empty() ? std::string() : check.errors.front()));
    REQUIRE(check.ok());
    if (last) *last = tl;
    losses.push_back(backend.loss());
  }
  if (x.device_peak) *x.device_peak = backend.device_peak_bytes();
  return losses;
}

const char* kBase = "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n";

}  // namespace

TEST_CASE("executor: a device-resident step runs and its Timeline obeys the Program", "[executor]") {
  core::Timeline tl;
  auto losses = train(kBase, 3, &tl);
  REQUIRE(losses.size() == 3);
  CHECK(losses[2] < losses[0]);
  CHECK(!tl.events.empty());
}

TEST_CASE("executor: the planned, partitioned step matches the plain reference trainer", "[executor][equivalence]") {
  const int steps = 5;
  auto got = train(kBase, steps);
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  engine::Gpt2 model(graph);
  engine::ReferenceTrainerConfig rc;
  rc.adam.lr = 3e-4;
  rc.adam.beta2 = 0.95;
  engine::ReferenceTrainer ref(graph, rc, model.init_params(7));
  auto corpus = test_corpus();
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  for (int s = 0; s < steps; ++s) {
    std::vector<engine::Batch> b{loader.next()};
    double want = ref.step(b);
    CHECK(got[size_t(s)] == Approx(want).epsilon(1e-5));
  }
}

TEST_CASE("executor: offloaded and tiled configurations match the device-resident losses", "[executor][equivalence]") {
  const int steps = 20;
  auto ref = train(kBase, steps);
  const char* variants[] = {
      "zero_stage: 3\noffload: {optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: device}\n",
      "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: device}\n",
      "zero_stage: 3\ntiling_factor: 4\nactivation_checkpoint: {interval: 1, tier: device}\n",
      "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: host}\n",
      "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: nvme}\n",
      "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\ntiling_factor: 4\nactivation_checkpoint: {interval: 1, tier: nvme}\n"
      "prefetch: {nvme_distance: 5, h2d_distance: 3, allgather_distance: 2}\n",
      "zero_stage: 3\nprefetch: {nvme_distance: 1, h2d_distance: 1, allgather_distance: 0}\n",
      // Parameters fetched again for backward: a unit's forward and backward fetches overlap.
      "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: host}\n"
      "prefetch: {max_live_bytes: 1 MB, reuse_distance_bytes: 0}\n",
  };
  for (const char* v : variants) {
    INFO(v);
    auto got = train(v, steps);
    for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == Approx(ref[size_t(i)]).epsilon(1e-5));
  }
}

TEST_CASE("executor: gradient accumulation, clipping and optimizer overlap stay exact under offload",
          "[executor][equivalence]") {
  const int steps = 4;
  const std::string common = "gradient_accumulation: 2\n";
  auto ref = train(common + "zero_stage: 3\noptimizer: {grad_clip: 0.05}\nactivation_checkpoint: {interval: 1, tier: device}\n",
                   steps);
  auto unclipped = train(common + "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n", steps);
  CHECK(unclipped[3] != Approx(ref[3]).epsilon(1e-6));  // clipping at 0.05 changes the updates
  const std::string variants[] = {
      common + "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\noptimizer: {grad_clip: 0.05}\n"
               "activation_checkpoint: {interval: 1, tier: host}\n",
      common + "zero_stage: 3\noffload: {params: cpu, optimizer: nvme}\noptimizer: {grad_clip: 0.05, timing: overlap-backward, "
               "sub_group_size: 5000}\ntiling_factor: 2\n",
      common + "zero_stage: 3\npartitioning: owner-based\noffload: {optimizer: cpu}\noptimizer: {grad_clip: 0.05}\n",
  };
  for (const auto& v : variants) {
    INFO(v);
    auto got = train(v, steps);
    for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == Approx(ref[size_t(i)]).epsilon(1e-5));
  }
}

TEST_CASE("a streamed initialization (one parameter group at a time) fills the homes exactly as the whole model does") {
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  // States on NVMe and tiled linears (a group split over several units), both partitionings; the
  // multi-rank scatter runs under mpirun in tests/mpi/mpi_train_check.cpp.
  for (const char* partitioning : {"bandwidth-centric", "owner-based"}) {
    INFO(partitioning);
    auto config = core::parse_run_config(std::string("zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\n"
                                                     "tiling_factor: 2\npartitioning: ") + partitioning + "\n",
                                         "test-config");
    auto planned = core::make_plan(graph, hw, config, 1);
    engine::Gpt2 model(graph);
    engine::LocalCollectives comm;
    auto state_after = [&](bool streamed) {
      TempDir dir;
      engine::GptBackendOptions o;
      o.nvme_dir = dir.path.string();
      o.config = config;
      engine::GptCpuBackend backend(planned.program, planned.plan, model, 0, comm, o);
      if (streamed) {
        engine::Gpt2::InitStream stream(model, 7);
        backend.initialize([&](int32_t g, std::vector<float>& out) { stream.next(g, out); });
      } else {
        backend.initialize(model.init_params(7));
      }
      return backend.gather_state();
    };
    const auto whole = state_after(false), streamed = state_after(true);
    CHECK(streamed.master == whole.master);
    CHECK(streamed.master == model.init_params(7));
    CHECK(streamed.m == whole.m);
    CHECK(streamed.v == whole.v);
  }
}

TEST_CASE("the init stream gives init_params group by group and refuses groups out of order") {
  auto graph = models::build_gpt(core::load_model_spec(source("models/gpt-tiny.yaml")));
  engine::Gpt2 model(graph);
  const auto whole = model.init_params(3);
  engine::Gpt2::InitStream stream(model, 3);
  std::vector<float> g;
  for (size_t i = 0; i < whole.size(); ++i) {
    stream.next(int32_t(i), g);
    CHECK(g == whole[i]);
  }
  engine::Gpt2::InitStream other(model, 3);
  CHECK_THROWS_WITH(other.next(1, g), Catch::Contains("group 1 asked for, next is 0"));
}

TEST_CASE("executor: offloaded activations (host, NVMe, NVMe over GDS) give the losses of kept ones, bit for bit",
          "[executor][equivalence][activation]") {
  const int steps = 6;
  const auto ref = train("zero_stage: 3\nactivation_checkpoint: {interval: 0}\n", steps);
  struct Variant {
    const char* yaml;
    bool gds;
  };
  const Variant variants[] = {
      {"zero_stage: 3\nactivation_offload: {policy: offload_all, tier: host}\n", false},
      {"zero_stage: 3\nactivation_offload: {policy: offload_all, tier: nvme, prefetch_blocks: 1}\n", false},
      {"zero_stage: 3\nactivation_offload: {policy: offload_all, tier: nvme}\n", true},
  };
  for (const auto& v : variants) {
    INFO(v.yaml << (v.gds ? " with node.gds" : ""));
    TrainExtras x;
    x.edit_hw = [&](core::HwProfile& hw) {
      if (v.gds) hw.node.gds_bandwidth = 4e9;
    };
    size_t segments = 0;
    bool any_gds = false;
    x.on_plan = [&](const core::PlanResult& r) {
      segments = r.program.activations().size();
      for (const auto& a : r.program.activations()) any_gds |= a.gds;
    };
    const auto got = train(v.yaml, steps, x);
    CHECK(segments > 0);
    CHECK(any_gds == v.gds);
    for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == ref[size_t(i)]);
  }
}

TEST_CASE("executor: per-tensor choices (some tensors of a block kept, some offloaded, some recomputed by their operator) give the losses of kept ones, bit for bit",
          "[executor][equivalence][activation]") {
  // The lifetime pass at budgets between keeping everything and offloading everything: the first
  // budget whose plan mixes the three within blocks, with the tensors offloaded to the host or NVMe.
  const int steps = 3;
  auto deeper = [](core::ModelSpec& s) { s.layers = 4; };
  TrainExtras keep;
  keep.edit_model = deeper;
  const auto ref = train("zero_stage: 3\nactivation_checkpoint: {interval: 0}\n", steps, keep);
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  deeper(spec);
  const auto graph = models::build_gpt(spec);
  // Paths slow enough that recomputing the cheapest tensors beats moving them.
  auto slow_paths = [](core::HwProfile& hw) {
    hw.node.pcie_bandwidth = 1e9;
    hw.node.nvme_read_bandwidth = hw.node.nvme_write_bandwidth = 1e9;
  };
  core::HwProfile base = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  slow_paths(base);
  for (const char* tier : {"host", "nvme"}) {
    const std::string yaml = fmt::format("zero_stage: 3\nactivation_offload: {{policy: lifetime, tier: {}}}\n", tier);
    const auto config = core::parse_run_config(yaml, "c.yaml");
    auto peak = [&](const std::string& c) {
      return core::at(core::make_plan(graph, base, core::parse_run_config(c, "c.yaml"), 1).plan.peak_bytes, core::Tier::Device);
    };
    const double keep_peak = peak("zero_stage: 3\nactivation_checkpoint: {interval: 0}\n");
    std::optional<double> memory;
    for (double f = 0.99; f > 0.85 && !memory; f -= 0.01) {
      core::HwProfile hw = base;
      hw.node.gpu.memory = f * keep_peak / (1.0 - hw.reserve.gpu);
      try {
        const auto r = core::make_plan(graph, hw, config, 1);
        int kept = 0, offloaded = 0, recomputed = 0;
        for (const auto& d : r.plan.activations) {
          if (d.lifetime.tensor < 0 || d.lifetime.pinned) continue;
          kept += d.choice.action == core::ActivationAction::Keep;
          offloaded += d.choice.action == core::ActivationAction::Offload;
          recomputed += d.choice.action == core::ActivationAction::Recompute;
        }
        if (kept > 0 && offloaded > 0 && recomputed > 0) memory = hw.node.gpu.memory;
      } catch (const core::PlanError&) {  // this budget is too small for the pass: try the next
      }
    }
    INFO(yaml);
    REQUIRE(memory);
    TrainExtras x = keep;
    x.edit_hw = [&](core::HwProfile& hw) {
      slow_paths(hw);
      hw.node.gpu.memory = *memory;
    };
    int partial = 0;
    size_t listed = 0;
    x.on_plan = [&](const core::PlanResult& r) {
      for (const auto& t : r.program.tasks()) partial += t.kind == core::TaskKind::Recompute && t.checkpoint < 0;
      for (const auto& a : r.program.activations()) listed += a.tensors.size();
    };
    const auto got = train(yaml, steps, x);
    CHECK(partial > 0);
    CHECK(listed > 0);
    for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == ref[size_t(i)]);
  }
}

TEST_CASE("executor: offloading a deep model's activations lowers the device arena's peak", "[executor][activation]") {
  // Six blocks, each loaded back one block ahead of its backward: the arena holds about two
  // blocks' activations at a time instead of six.
  auto deeper = [](core::ModelSpec& s) { s.layers = 6; };
  TrainExtras keep;
  int64_t keep_peak = 0;
  keep.edit_model = deeper;
  keep.device_peak = &keep_peak;
  const auto ref = train("zero_stage: 3\nactivation_checkpoint: {interval: 0}\n", 2, keep);
  TrainExtras off = keep;
  int64_t off_peak = 0;
  off.device_peak = &off_peak;
  const auto got = train("zero_stage: 3\nactivation_offload: {policy: offload_all, tier: host, prefetch_blocks: 1}\n", 2, off);
  CHECK(got == ref);
  CHECK(off_peak < keep_peak);
}

TEST_CASE("executor: gradient accumulation with offloaded activations matches keeping them", "[executor][equivalence][activation]") {
  const int steps = 4;
  const auto ref = train("zero_stage: 3\ngradient_accumulation: 2\nactivation_checkpoint: {interval: 0}\n", steps);
  const auto got = train("zero_stage: 3\ngradient_accumulation: 2\nactivation_offload: {policy: offload_all, tier: nvme}\n", steps);
  for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == ref[size_t(i)]);
}

namespace {

// A device that keeps each block tensor as a host vector of distinct values and records what the
// offloader asks of it: the shared task logic as any device (the CUDA one included) sees it.
class RecordingDevice final : public engine::ActivationDevice {
public:
  using Id = std::tuple<int32_t, int, int>;  // (micro-batch, block, tensor)
  std::map<Id, std::vector<float>> device, original;
  int saves = 0, restores = 0, releases = 0, hosts = 0;
  size_t saved_elements = 0;

  RecordingDevice(int micro_batches, int layers) {
    for (int mb = 0; mb < micro_batches; ++mb)
      for (int b = 0; b < layers; ++b)
        for (int k = 0; k < 14; ++k) {
          std::vector<float> v(size_t(3 + k + b));
          for (size_t i = 0; i < v.size(); ++i) v[i] = float(mb * 10000 + b * 100 + k) + float(i) / 64.0f;
          device[{mb, b, k}] = original[{mb, b, k}] = v;
        }
  }
  std::vector<float>& at(int32_t mb, engine::ActivationRef r) { return device.at({mb, r.block, int(r.tensor)}); }
  size_t activation_elements(int32_t mb, engine::ActivationRef r) override { return at(mb, r).size(); }
  std::vector<std::weak_ptr<std::vector<float>>> lent;  // the host memory handed out
  size_t host_held() const {
    return size_t(std::count_if(lent.begin(), lent.end(), [](const auto& w) { return !w.expired(); }));
  }
  engine::HostFloats activation_host(size_t n) override {
    ++hosts;
    auto owner = std::make_shared<std::vector<float>>(std::max<size_t>(n, 1), -1.0f);
    lent.push_back(owner);
    return engine::HostFloats(owner, owner->data());
  }
  void save_activations(const core::Task& t, std::span<const engine::ActivationRef> refs,
                        std::span<const size_t> sizes, float* host) override {
    ++saves;
    for (size_t i = 0; i < refs.size(); ++i) {
      auto& v = at(t.micro_batch, refs[i]);
      REQUIRE(v.size() == sizes[i]);
      host = std::copy(v.begin(), v.end(), host);
      saved_elements += v.size();
      v.clear();
    }
  }
  void restore_activations(const core::Task& t, std::span<const engine::ActivationRef> refs,
                           std::span<const size_t> sizes, const float* host) override {
    ++restores;
    for (size_t i = 0; i < refs.size(); ++i) {
      auto& v = at(t.micro_batch, refs[i]);
      REQUIRE(v.empty());  // the save freed it
      v.assign(host, host + sizes[i]);
      host += sizes[i];
    }
  }
  void release_activation(int32_t mb, engine::ActivationRef r) override {
    ++releases;
    at(mb, r).clear();
  }
};

}  // namespace

TEST_CASE("the activation offloader's task logic, on a recording device: every saved tensor comes back equal, GDS without a host copy",
          "[executor][activation]") {
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  const auto graph = models::build_gpt(spec);
  struct Variant {
    const char* yaml;
    bool gds;
  };
  const Variant variants[] = {
      {"zero_stage: 3\ngradient_accumulation: 2\nactivation_offload: {policy: offload_all, tier: host, granularity: block}\n", false},
      {"zero_stage: 3\nactivation_offload: {policy: offload_all, tier: host, granularity: tensor}\n", false},
      {"zero_stage: 3\nactivation_offload: {policy: offload_all, tier: nvme, granularity: block}\n", false},
      {"zero_stage: 3\ngradient_accumulation: 2\nactivation_offload: {policy: offload_all, tier: nvme, granularity: tensor}\n", false},
      {"zero_stage: 3\nactivation_offload: {policy: offload_all, tier: nvme}\n", true},
  };
  for (const auto& v : variants) {
    INFO(v.yaml << (v.gds ? " with node.gds" : ""));
    auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
    if (v.gds) hw.node.gds_bandwidth = 4e9;
    const auto config = core::parse_run_config(v.yaml, "c.yaml");
    const auto planned = core::make_plan(graph, hw, config, 1);
    const core::Program& P = planned.program;
    REQUIRE(!P.activations().empty());
    TempDir dir;
    engine::NvmeStore store(engine::NvmeStoreOptions::from_run_config(config, dir.path.string()));
    RecordingDevice dev(P.micro_batches(), spec.layers);
    engine::ActivationOffloader off(P, graph, &store, dev);
    int saves = 0, restores = 0, host_copies = 0;
    // Tasks in id order (a topological order): each segment's save precedes its load.
    for (const auto& t : P.tasks()) {
      if (core::is_compute(t.kind)) off.after_forward(t);
      if (core::is_compute(t.kind) || t.data != core::Data::Activation) continue;
      const bool device_end = t.from == core::Tier::Device || t.to == core::Tier::Device;
      saves += device_end && (t.kind == core::TaskKind::CopyD2H || t.kind == core::TaskKind::NvmeWrite);
      restores += device_end && (t.kind == core::TaskKind::CopyH2D || t.kind == core::TaskKind::NvmeRead);
      host_copies += t.kind == core::TaskKind::CopyD2H || t.kind == core::TaskKind::CopyH2D;
      off.run(t);
    }
    CHECK(saves > 0);
    CHECK(dev.saves == saves);
    CHECK(dev.restores == restores);
    CHECK(dev.releases == 0);  // offload_all recomputes nothing per tensor
    CHECK(dev.saved_elements > 0);
    CHECK((host_copies == 0) == v.gds);  // over GDS, nothing stops in the Program's host tier
    CHECK(dev.device == dev.original);   // every tensor back, equal
    CHECK(dev.host_held() == 0);         // and every host copy given back

    // A step stopped after its saves: clear() gives back the host memory the copies hold (a
    // device whose host memory they borrow calls it before that memory goes).
    RecordingDevice dev2(P.micro_batches(), spec.layers);
    engine::ActivationOffloader stopped(P, graph, &store, dev2);
    for (const auto& t : P.tasks())
      if (t.data == core::Data::Activation && !core::is_compute(t.kind) &&
          (t.kind == core::TaskKind::CopyD2H || t.kind == core::TaskKind::NvmeWrite))
        stopped.run(t);
    // On the host tier each save holds its copy; an NVMe write gives its copy (or bounce buffer) back.
    const bool host_tier = P.activations().front().tier == core::Tier::Host;
    CHECK(dev2.host_held() == (host_tier ? size_t(dev2.saves) : 0));
    CHECK(dev2.saves > 0);
    stopped.clear();
    CHECK(dev2.host_held() == 0);
  }
}

TEST_CASE("the activation offloader releases the tensors the Program recomputes per tensor after their block's forward",
          "[executor][activation]") {
  // The budget search of the per-tensor test above, at the first budget whose plan recomputes some
  // tensors by their own operator.
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  spec.layers = 4;
  const auto graph = models::build_gpt(spec);
  core::HwProfile base = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  base.node.pcie_bandwidth = 1e9;
  base.node.nvme_read_bandwidth = base.node.nvme_write_bandwidth = 1e9;
  const auto config = core::parse_run_config("zero_stage: 3\nactivation_offload: {policy: lifetime, tier: host}\n", "c.yaml");
  const double keep_peak = core::at(
      core::make_plan(graph, base, core::parse_run_config("zero_stage: 3\nactivation_checkpoint: {interval: 0}\n", "c.yaml"), 1)
          .plan.peak_bytes,
      core::Tier::Device);
  std::optional<core::PlanResult> planned;
  for (double f = 0.99; f > 0.85 && !planned; f -= 0.01) {
    core::HwProfile hw = base;
    hw.node.gpu.memory = f * keep_peak / (1.0 - hw.reserve.gpu);
    try {
      auto r = core::make_plan(graph, hw, config, 1);
      const bool recomputes = std::any_of(r.program.tasks().begin(), r.program.tasks().end(), [](const core::Task& t) {
        return t.kind == core::TaskKind::Recompute && t.checkpoint < 0;
      });
      if (recomputes) planned = std::move(r);
    } catch (const core::PlanError&) {  // too small for the pass: try the next
    }
  }
  REQUIRE(planned);
  const core::Program& P = planned->program;
  RecordingDevice dev(P.micro_batches(), spec.layers);
  engine::ActivationOffloader off(P, graph, nullptr, dev);
  int recomputes = 0;
  for (const auto& t : P.tasks()) {
    if (t.kind == core::TaskKind::Recompute && t.checkpoint < 0) {
      // What its operator writes left the device after the block's forward (and is there before).
      const auto& op = graph.ops[size_t(t.op)];
      std::string name;
      for (const auto& bt : core::block_tensors(spec, false))
        if (bt.producer == op.role) name = bt.name;
      REQUIRE(!name.empty());
      for (engine::SavedTensor k : engine::activation_tensors(name)) {
        CHECK(dev.device.at({t.micro_batch, op.block, int(k)}).empty());
        CHECK(!dev.original.at({t.micro_batch, op.block, int(k)}).empty());
      }
      ++recomputes;
    }
    if (core::is_compute(t.kind)) off.after_forward(t);
    else if (t.data == core::Data::Activation) off.run(t);
  }
  CHECK(recomputes > 0);
  CHECK(dev.releases > 0);
  CHECK_THROWS_WITH(engine::activation_tensors("logits"), Catch::Matchers::Contains("'logits'"));
}

TEST_CASE("executor: NVMe lanes with several tasks in flight give the losses of one at a time, bit for bit",
          "[executor][equivalence][slots]") {
  // Every state and the checkpoints on NVMe, gradients accumulated over two micro-batches (each
  // unit's gradient written, read back and written again), optimizer overlapping backward in small
  // sub-groups, activations offloaded to NVMe: every NVMe path of the backend, with its tasks
  // overlapping on the lanes when aio.tasks_in_flight > 1.
  const int steps = 3;
  const std::string variants[] = {
      "zero_stage: 3\ngradient_accumulation: 2\noffload: {params: nvme, gradients: nvme, optimizer: nvme}\n"
      "optimizer: {grad_clip: 0.05, timing: overlap-backward, sub_group_size: 5000}\ntiling_factor: 2\n"
      "activation_checkpoint: {interval: 1, tier: nvme}\nprefetch: {nvme_distance: 6}\n",
      "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_offload: {policy: offload_all, tier: nvme}\n"
      "activation_checkpoint: {interval: 0}\n",
  };
  for (const auto& v : variants) {
    INFO(v);
    const auto one = train(v + "aio: {tasks_in_flight: 1}\n", steps);
    for (int slots : {2, 4}) {
      INFO("tasks_in_flight " << slots);
      core::Timeline tl;
      TrainExtras x;
      x.last = &tl;
      int planned_slots = 0;
      x.on_plan = [&](const core::PlanResult& r) { planned_slots = r.program.lane_slots(core::Lane::NvmeRead); };
      const auto got = train(v + "aio: {tasks_in_flight: " + std::to_string(slots) + "}\n", steps, x);
      CHECK(planned_slots == slots);
      for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == one[size_t(i)]);
    }
  }
}

TEST_CASE("executor: the NVMe optimizer's depth, waves and reads ahead give the losses of the 3-deep interleaved pipeline, bit for bit",
          "[executor][equivalence][optimizer]") {
  // Optimizer states, gradients and parameters on NVMe in small sub-groups, the update overlapping
  // backward with clipping (states read ahead of the norm) and without: the order in which
  // sub-groups are read, updated and written back changes nothing in the losses.
  const int steps = 3;
  for (const std::string clip : {"grad_clip: 0.05, ", ""}) {
    const std::string v = "zero_stage: 3\noffload: {params: nvme, gradients: nvme, optimizer: nvme}\n"
                          "aio: {tasks_in_flight: 2}\ntiling_factor: 2\n"
                          "optimizer: {" + clip + "timing: overlap-backward, sub_group_size: 5000, ";
    INFO(v);
    const auto old = train(v + "sub_groups_in_flight: 3, nvme_phases: false}\n", steps);
    for (const std::string depth : {"1", "4", "auto"})
      for (const std::string phases : {"true", "false"}) {
        INFO("sub_groups_in_flight " << depth << ", nvme_phases " << phases);
        int64_t planned = 0, sub_groups = 0;
        TrainExtras x;
        x.on_plan = [&](const core::PlanResult& r) {
          planned = r.plan.sub_groups_in_flight;
          sub_groups = r.plan.sub_groups;
        };
        const auto got = train(v + "sub_groups_in_flight: " + depth + ", nvme_phases: " + phases + "}\n", steps, x);
        if (depth != "auto") CHECK(planned == std::stoll(depth));
        else CHECK(planned >= 3);
        CHECK(sub_groups > 4);
        for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == old[size_t(i)]);
      }
    // States read ahead of their gradients (the default above) or once the gradients are stored, and
    // ahead over two micro-batches: the same losses.
    const auto plain = train(v + "sub_groups_in_flight: 4, read_ahead: false}\n", steps);
    for (int i = 0; i < steps; ++i) CHECK(plain[size_t(i)] == old[size_t(i)]);
    const std::string two = "gradient_accumulation: 2\n" + v + "sub_groups_in_flight: 4";
    const auto acc = train(two + "}\n", steps), acc_plain = train(two + ", read_ahead: false}\n", steps);
    for (int i = 0; i < steps; ++i) CHECK(acc[size_t(i)] == acc_plain[size_t(i)]);
  }
}
