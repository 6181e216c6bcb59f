// Training in each precision the engine runs (bf16, fp16 with DeepSpeed's loss scale, fp32): the
// planned, partitioned CPU backend against the plain reference trainer in the same precision, an
// NVMe-offloaded run against a resident one, the bytes core counts per precision, fp16's skipped
// steps, and a resumed fp16 run that continues its loss scale exactly.
#include <catch2/catch.hpp>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "formats/deepspeed_config.hpp"
#include "core/hwprofile.hpp"
#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/run_config.hpp"
#include "core/timeline.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/reference_trainer.hpp"
#include "engine/train/loss_scaler.hpp"
#include "engine/train/trainer.hpp"
#include "engine/train/trainer_checks.hpp"
#include "models/gpt.hpp"
#include "temp_dir.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
using core::Precision;
using zinf::test::source;
using zinf::test::TempDir;

namespace {

engine::TokenCorpus corpus() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919 % 1000) + ". ";
  return engine::TokenCorpus::from_text(text);
}

struct Run {
  std::vector<double> losses;
  std::vector<bool> skipped;
  std::vector<double> scales;
  engine::Gpt2Params master;
};

const char* kResident = "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n";
const char* kNvme =
    "zero_stage: 3\noffload: {params: nvme, gradients: nvme, optimizer: nvme}\n"
    "activation_checkpoint: {interval: 1, tier: nvme}\noptimizer: {sub_group_size: 20000}\n";

std::string with_precision(const std::string& yaml, Precision p, const std::string& extra = "") {
  return yaml + "precision: " + core::to_string(p) + "\n" + extra;
}

// The engine as the trainer drives it: a loss scale per step in fp16, the update count for Adam.
Run engine_run(const std::string& yaml, int steps) {
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  hw.node.gpu.working_bytes = 4;  // the CPU backend's, as the trainer plans it
  const auto config = core::parse_run_config(yaml, "test-config");
  auto planned = core::make_plan(graph, hw, config, 1);
  REQUIRE(core::validate_program(planned.program).empty());
  engine::Gpt2 model(graph);
  engine::LocalCollectives comm;
  TempDir dir("precision");
  engine::GptBackendOptions o;
  o.nvme_dir = dir.path.string();
  o.config = config;
  auto backend = engine::make_gpt_cpu_backend(planned.program, planned.plan, model, 0, comm, o);
  backend->initialize(model.init_params(7));
  const bool fp16 = config.precision == Precision::Fp16;
  engine::LossScaler scaler(config.loss_scaling);
  if (fp16) backend->set_loss_scale(scaler.scale());
  auto text = corpus();
  engine::BatchLoader loader(text, spec.micro_batch, spec.seq);
  engine::Executor exec(planned.program, 0, *backend);
  Run r;
  int64_t updates = 0;
  for (int s = 1; s <= steps; ++s) {
    std::vector<engine::Batch> batches;
    for (int mb = 0; mb < planned.program.micro_batches(); ++mb) batches.push_back(loader.next());
    backend->begin_step(updates + 1, std::move(batches));
    auto tl = exec.run_step();
    const auto check = core::check_timeline(planned.program, tl, 1e-3);
    INFO((check.errors.empty() ? std::string() : check.errors.front()));
    REQUIRE(check.ok());
    r.losses.push_back(backend->loss());
    r.skipped.push_back(backend->step_skipped());
    r.scales.push_back(fp16 ? scaler.scale() : 1.0);
    if (!backend->step_skipped()) ++updates;
    if (fp16) {
      scaler.update(backend->step_skipped());
      backend->set_loss_scale(scaler.scale());
    }
  }
  r.master = backend->gather_state().master;
  return r;
}

Run reference_run(Precision p, const core::LossScaleConfig& scaling, int steps) {
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  engine::Gpt2 model(graph);
  engine::ReferenceTrainerConfig rc;
  rc.adam.lr = 3e-4;
  rc.adam.beta2 = 0.95;
  rc.precision = p;
  rc.loss_scaling = scaling;
  engine::ReferenceTrainer ref(graph, rc, model.init_params(7));
  auto text = corpus();
  engine::BatchLoader loader(text, spec.micro_batch, spec.seq);
  Run r;
  for (int s = 0; s < steps; ++s) {
    std::vector<engine::Batch> b{loader.next()};
    r.scales.push_back(p == Precision::Fp16 ? ref.scaler().scale() : 1.0);
    r.losses.push_back(ref.step(b));
    r.skipped.push_back(ref.last_skipped());
  }
  r.master = ref.master();
  return r;
}

double max_abs_diff(const engine::Gpt2Params& a, const engine::Gpt2Params& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t g = 0; g < a.size(); ++g) {
    REQUIRE(a[g].size() == b[g].size());
    for (size_t i = 0; i < a[g].size(); ++i) d = std::max(d, std::fabs(double(a[g][i]) - double(b[g][i])));
  }
  return d;
}

}  // namespace

TEST_CASE("precision: each precision's planned run matches the reference trainer in that precision",
          "[precision][equivalence]") {
  // Tolerances, after five steps: fp32 differs from the reference only in the order of its sums and
  // in Adam's arithmetic (the engine's SIMD float against the reference's double): losses within
  // 1e-8 relative, master weights within 2e-6 (a few float ulps of an lr-3e-4 update). bf16 and
  // fp16 round the same values the same way, but a one-ulp difference in a master weight can flip a
  // 16-bit rounding: losses within 1e-7, weights within 1e-5.
  const int steps = 5;
  struct Case {
    Precision p;
    double loss_eps, weight_tol;
  };
  for (const Case c : {Case{Precision::Fp32, 1e-8, 2e-6}, Case{Precision::Bf16, 1e-7, 1e-5}, Case{Precision::Fp16, 1e-7, 1e-5}}) {
    DYNAMIC_SECTION(core::to_string(c.p)) {
      const Run got = engine_run(with_precision(kResident, c.p), steps);
      const Run want = reference_run(c.p, core::LossScaleConfig{}, steps);
      for (int s = 0; s < steps; ++s) CHECK(got.losses[size_t(s)] == Approx(want.losses[size_t(s)]).epsilon(c.loss_eps));
      CHECK(got.skipped == want.skipped);
      const double d = max_abs_diff(got.master, want.master);
      INFO("largest master weight difference " << d);
      CHECK(d <= c.weight_tol);
      double worst = 0;
      for (int s = 0; s < steps; ++s)
        worst = std::max(worst, std::fabs(got.losses[size_t(s)] / want.losses[size_t(s)] - 1));
      WARN(fmt::format("{}: {} steps ({} skipped), losses within {:.2g} relative, master weights within {:.3g}",
                       core::to_string(c.p), steps, std::count(got.skipped.begin(), got.skipped.end(), true), worst, d));
    }
  }
}

TEST_CASE("precision: fp16 skips the steps whose scaled gradients overflow, as the reference does, and then learns",
          "[precision][fp16]") {
  // 2^20 overflows gpt-tiny's fp16 gradients at once: the scale falls (after the hysteresis) until
  // they fit, then grows after each window of clean steps until they overflow again.
  core::LossScaleConfig scaling;
  scaling.initial_scale_power = 20;
  scaling.window = 4;
  const std::string extra = "loss_scale: {initial_scale_power: 20, window: 4}\n";
  const int steps = 20;
  const Run got = engine_run(with_precision(kResident, Precision::Fp16, extra), steps);
  const Run want = reference_run(Precision::Fp16, scaling, steps);
  CHECK(got.skipped == want.skipped);
  CHECK(got.scales == want.scales);
  const auto skipped = std::count(got.skipped.begin(), got.skipped.end(), true);
  CHECK(skipped >= 3);
  CHECK(skipped < steps / 2);
  CHECK(got.scales.back() < std::ldexp(1.0, 20));
  for (int s = 0; s < steps; ++s) CHECK(got.losses[size_t(s)] == Approx(want.losses[size_t(s)]).epsilon(1e-5));
  WARN(fmt::format("fp16 from 2^20: {} of {} steps skipped, the scale ending at {}, master weights within {:.3g}",
                   skipped, steps, got.scales.back(), max_abs_diff(got.master, want.master)));
  CHECK(max_abs_diff(got.master, want.master) <= 1e-4);
  CHECK(got.losses.back() < got.losses.front());
}

TEST_CASE("precision: offloaded to NVMe equals resident in every precision", "[precision][offload]") {
  const int steps = 4;
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    DYNAMIC_SECTION(core::to_string(p)) {
      const Run resident = engine_run(with_precision(kResident, p), steps);
      const Run offloaded = engine_run(with_precision(kNvme, p), steps);
      for (int s = 0; s < steps; ++s) CHECK(offloaded.losses[size_t(s)] == resident.losses[size_t(s)]);
      CHECK(offloaded.skipped == resident.skipped);
      CHECK(max_abs_diff(offloaded.master, resident.master) == 0.0);
    }
  }
}

TEST_CASE("precision: core counts 4-byte parameters and gradients in fp32, 2-byte in bf16 and fp16",
          "[precision][memory]") {
  auto spec = core::load_model_spec(source("models/gpt-tiny.yaml"));
  auto graph = models::build_gpt(spec);
  auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  hw.node.gpu.working_bytes = 4;
  const auto homes = [&](Precision p) {
    const auto c = core::parse_run_config(with_precision(kResident, p), "test");
    const auto planned = core::make_plan(graph, hw, c, 1);
    return std::pair{core::at(planned.program.static_bytes(0), core::Tier::Device), planned.program.shard_space(0)};
  };
  const auto [fp32, space] = homes(Precision::Fp32);
  const auto [bf16, space_bf16] = homes(Precision::Bf16);
  const auto [fp16, space_fp16] = homes(Precision::Fp16);
  REQUIRE(space == space_bf16);
  // Parameters and gradients each 2 more bytes per element of the shard space; fp32 master, m, v alike.
  CHECK(fp32 - bf16 == Approx(4.0 * double(space)));
  CHECK(fp16 == bf16);
  // The closed form: 20 bytes per parameter for fp32 with Adam, 16 for the 16-bit formats.
  core::MemoryModelInput in;
  in.model = spec;
  in.hw = hw;
  in.config = core::parse_run_config(with_precision(kResident, Precision::Fp32), "test");
  const double states32 = core::memory_requirement(in).rows.at(0).bytes.device;
  in.config = core::parse_run_config(with_precision(kResident, Precision::Bf16), "test");
  const double states16 = core::memory_requirement(in).rows.at(0).bytes.device;
  CHECK(states32 / states16 == Approx(20.0 / 16.0));
  // What the simulator costs and the engine moves: the Program's reads and writes of the parameters'
  // and gradients' NVMe homes carry twice the bytes in fp32.
  const auto moved = [&](Precision p) {
    const auto c = core::parse_run_config(with_precision(kNvme, p), "test");
    const auto planned = core::make_plan(graph, hw, c, 1);
    double bytes = 0;
    for (const auto& t : planned.program.tasks())
      if ((t.data == core::Data::Param || t.data == core::Data::Grad) &&
          (t.kind == core::TaskKind::NvmeRead || t.kind == core::TaskKind::NvmeWrite))
        bytes += t.bytes;
    return bytes;
  };
  const double moved16 = moved(Precision::Bf16);
  REQUIRE(moved16 > 0);
  CHECK(moved(Precision::Fp32) == Approx(2 * moved16));
  // fp16's overflow check is an all-reduced norm before every Adam step, as clipping's is.
  const auto c16 = core::parse_run_config(with_precision(kResident, Precision::Fp16), "test");
  CHECK(core::make_plan(graph, hw, c16, 1).plan.grad_clip);
}

TEST_CASE("precision: the engine's device arena holds what the Program counts in every precision",
          "[precision][memory]") {
  // The homes, the staged shards and the gathered copies are sized by the storage type; the Program
  // by core's bytes per element: the arena's peak stays within 10 % of the planned device peak.
  TempDir dir("precarena");
  engine::LocalCollectives comm;
  int i = 0;
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    for (const char* base : {kResident, kNvme}) {
      INFO(core::to_string(p) << "\n" << base);
      engine::TrainerOptions o;
      o.model = core::load_model_spec(source("models/gpt-tiny.yaml"));
      o.hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
      o.config = core::parse_run_config(with_precision(base, p), "test");
      o.nvme_dir = (dir.path / std::to_string(i++)).string();
      std::filesystem::create_directories(o.nvme_dir);
      engine::Trainer t(o, comm);
      const double planned = core::at(t.plan().peak_bytes, core::Tier::Device);
      int64_t measured = 0;
      for (int s = 0; s < 2; ++s) measured = std::max(measured, t.step().device_arena_peak);
      INFO("arena peak " << measured << " bytes, the Program's device peak " << planned);
      CHECK(double(measured) <= 1.1 * planned);
      CHECK(double(measured) >= 0.9 * planned);
    }
  }
}

TEST_CASE("precision: a GPU profile costs fp32 at its fp32 rate, and one without that rate refuses an fp32 run",
          "[precision][sim]") {
  const auto a100 = core::load_hwprofile(source("hwprofiles/dgx-a100.yaml"));
  std::vector<std::string> notes;
  const auto fp32 = core::for_precision(a100, Precision::Fp32, &notes);
  CHECK(fp32.node.gpu.peak_flops == a100.node.gpu.peak_flops_fp32);
  CHECK(fp32.node.gpu.peak_flops < a100.node.gpu.peak_flops);
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("peak_flops_fp32"));
  auto no_rate = a100;
  no_rate.node.gpu.peak_flops_fp32 = 0;
  CHECK_THROWS_WITH(core::for_precision(no_rate, Precision::Fp32), Catch::Contains("peak_flops_fp32"));
}

TEST_CASE("precision: a resumed fp16 run continues its loss scale and skipped steps exactly, an fp32 run its weights",
          "[precision][checkpoint]") {
  TempDir dir("resume");
  engine::LocalCollectives comm;
  for (const char* precision : {"fp16", "fp32"}) {
    INFO(precision);
    const auto options = [&](const std::string& sub) {
      engine::TrainerOptions o;
      o.model = core::load_model_spec(source("models/gpt-tiny.yaml"));
      o.hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
      o.config = core::parse_run_config(std::string(kNvme) + "precision: " + precision +
                                            "\nloss_scale: {initial_scale_power: 30, window: 3}\n",
                                        "test");
      o.nvme_dir = (dir.path / precision / sub / "nvme").string();
      o.checkpoint_dir = (dir.path / precision / sub / "ckpt").string();
      std::filesystem::create_directories(o.nvme_dir);
      return o;
    };
    struct Step {
      double loss, scale;
      bool skipped;
      bool operator==(const Step&) const = default;
    };
    const auto record = [](const engine::StepStats& s) { return Step{s.loss, s.loss_scale, s.skipped}; };
    const int total = 14, cut = 3;
    std::vector<Step> straight, resumed;
    const bool fp16 = std::string(precision) == "fp16";
    {
      engine::Trainer t(options("a"), comm);
      for (int i = 0; i < total; ++i) straight.push_back(record(t.step()));
      CHECK(t.scales_loss() == fp16);
      if (fp16) CHECK(t.skipped_steps() >= 2);
      else CHECK(t.skipped_steps() == 0);
    }
    {
      engine::Trainer t(options("b"), comm);
      for (int i = 0; i < cut; ++i) t.step();
      t.save_checkpoint();
    }
    {
      auto o = options("b");
      o.start = engine::CheckpointStart::Resume;
      engine::Trainer t(o, comm);
      for (int i = cut; i < total; ++i) resumed.push_back(record(t.step()));
      CHECK(t.skipped_steps() == std::count_if(straight.begin(), straight.end(), [](const Step& s) { return s.skipped; }));
    }
    for (int i = cut; i < total; ++i) {
      INFO("step " << i + 1);
      CHECK(resumed[size_t(i - cut)] == straight[size_t(i)]);  // bitwise, the scale and the skips too
    }
  }
}

TEST_CASE("precision: an fp16 run refuses a checkpoint without the loss scale's state", "[precision][checkpoint]") {
  TempDir dir("fp16old");
  engine::LocalCollectives comm;
  auto o = [&](const char* p) {
    engine::TrainerOptions x;
    x.model = core::load_model_spec(source("models/gpt-tiny.yaml"));
    x.hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
    x.config = core::parse_run_config(std::string(kResident) + "precision: " + p + "\n", "test");
    x.checkpoint_dir = (dir.path / "ckpt").string();
    return x;
  };
  {
    engine::Trainer t(o("bf16"), comm);
    t.step();
    t.save_checkpoint();
  }
  auto fp16 = o("fp16");
  fp16.start = engine::CheckpointStart::Resume;
  fp16.allow_changes = true;  // the precision differs on purpose
  CHECK_THROWS_WITH(engine::Trainer(fp16, comm), Catch::Contains("loss_scaler"));
  auto fp32 = o("fp32");
  fp32.start = engine::CheckpointStart::Resume;
  fp32.allow_changes = true;
  engine::Trainer t(fp32, comm);  // bf16 and fp32 keep no scale: it resumes
  CHECK(t.step_count() == 1);
  CHECK(std::isfinite(t.step().loss));
}

TEST_CASE("precision: every real DeepSpeed config DeepSpeed trains passes zinf train's precision, and trains a step",
          "[precision][deepspeed]") {
  // Each config DeepSpeed 0.16.5 trains (tests/data/deepspeed/EXPECTED.yaml, read for its run) is
  // held to `zinf train`'s gate on the CPU backend: no refusal names its precision. One that passes
  // the whole gate trains a step of gpt-tiny on one rank with its placement, optimizer, precision and
  // loss scale; one refused for another setting (listed below with its reason) trains its precision
  // and loss scale at stage 3 instead, once per distinct setting.
  const std::string dir = source("tests/data/deepspeed/");
  engine::LocalCollectives comm;
  TempDir tmp("dsprecision");
  std::map<std::string, int> refused;  // the setting refused -> configs
  std::set<std::tuple<std::string, double, int64_t, int64_t, int64_t, double>> precisions_trained;
  int whole = 0, files = 0;
  const auto train_step = [&](core::RunConfig c, const std::string& name) {
    c.micro_batch.reset();  // gpt-tiny's own, on one rank
    c.gradient_accumulation = 1;
    c.tensor_parallel = 1;
    engine::TrainerOptions o;
    o.model = core::load_model_spec(source("models/gpt-tiny.yaml"));
    o.hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
    o.config = c;
    o.config_source = name;
    o.nvme_dir = (tmp.path / std::to_string(files) / "nvme").string();
    std::filesystem::create_directories(o.nvme_dir);
    engine::Trainer t(o, comm);
    const auto st = t.step();
    CHECK(std::isfinite(st.loss));
  };
  for (const auto& e : YAML::LoadFile(dir + "EXPECTED.yaml")) {
    if (e["refuse"]) continue;  // DeepSpeed itself stops at it
    const std::string file = e["file"].as<std::string>();
    ++files;
    INFO(file);
    std::ifstream in(dir + file);
    std::stringstream text;
    text << in.rdbuf();
    core::DeepSpeedContext ctx;
    ctx.ranks = e["ranks"].as<int>();
    ctx.ranks_text = std::to_string(ctx.ranks) + " GPUs";
    ctx.model_micro_batch = 4;
    ctx.hidden = 4096;
    ctx.hw_precision = e["hw"].as<std::string>() == "fp16" ? Precision::Fp16 : Precision::Bf16;
    ctx.hw_name = "test-gpu";
    const core::RunConfig c = core::read_deepspeed_config(text.str(), file, ctx).config;
    REQUIRE(c.precision);
    const std::string why = engine::untrained_setting(c, false);
    INFO(file << ": " << why);
    CHECK(why.find("precision") == std::string::npos);
    const auto& l = c.loss_scaling;
    const auto key = std::tuple{std::string(core::to_string(*c.precision)), l.static_scale, l.initial_scale_power,
                                l.window, l.hysteresis, l.min_scale};
    if (why.empty()) {
      train_step(c, file);
      precisions_trained.insert(key);
      ++whole;
    } else {
      ++refused[why.substr(0, why.find(':'))];
      if (precisions_trained.insert(key).second) {
        core::RunConfig stage3 = core::parse_run_config(kResident, file);
        stage3.precision = c.precision;
        stage3.loss_scaling = c.loss_scaling;
        train_step(stage3, file);
      }
    }
  }
  std::string table;
  for (const auto& [setting, n] : refused) table += fmt::format("\n  {} config{}: {}", n, n == 1 ? "" : "s", setting);
  std::string settings;
  for (const auto& [p, scale, power, window, hysteresis, min_scale] : precisions_trained)
    settings += p == "fp16" ? fmt::format(" fp16(static {}, 2^{}, window {}, hysteresis {}, min {})", scale, power,
                                          window, hysteresis, min_scale)
                            : " " + p;
  WARN(fmt::format("{} configs DeepSpeed trains: {} trained whole; refused for another setting than precision:{}\n"
                   "precision settings trained:{}",
                   files, whole, table, settings));
  CHECK(whole >= 10);
  CHECK(precisions_trained.size() >= 3);
}

TEST_CASE("precision: DeepSpeed's fp16 loss-scale keys and zinf's loss_scale section are read, bad values refused by key",
          "[precision][config]") {
  std::vector<std::string> warnings;
  const auto ds = core::parse_deepspeed_config(
      R"({"train_batch_size": 1, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
          "loss_scale_window": 500, "hysteresis": 3, "consecutive_hysteresis": true, "min_loss_scale": 0.5}})",
      "ds.json", warnings);
  REQUIRE(ds.precision == Precision::Fp16);
  CHECK(ds.loss_scaling.static_scale == 0);
  CHECK(ds.loss_scaling.initial_scale_power == 12);
  CHECK(ds.loss_scaling.window == 500);
  CHECK(ds.loss_scaling.hysteresis == 3);
  CHECK(ds.loss_scaling.consecutive_hysteresis);
  CHECK(ds.loss_scaling.min_scale == 0.5);
  CHECK(core::parse_deepspeed_config(R"({"train_batch_size": 1, "fp16": {"enabled": true, "loss_scale": 128}})", "ds.json",
                                     warnings)
            .loss_scaling.static_scale == 128);
  CHECK_THROWS_WITH(core::parse_deepspeed_config(
                        R"({"train_batch_size": 1, "fp16": {"enabled": true, "loss_scale_window": "often"}})", "ds.json",
                        warnings),
                    Catch::Contains("fp16.loss_scale_window"));
  CHECK_THROWS_WITH(core::parse_deepspeed_config(
                        R"({"train_batch_size": 1, "fp16": {"enabled": true, "hysteresis": 0}})", "ds.json", warnings),
                    Catch::Contains("fp16.hysteresis"));
  const auto yaml = core::parse_run_config(
      "precision: fp16\nloss_scale: {static: 0, initial_scale_power: 12, window: 500, hysteresis: 3, "
      "consecutive_hysteresis: true, min: 0.5}\n",
      "run.yaml");
  CHECK(yaml.loss_scaling == ds.loss_scaling);
  // zinf's YAML writes it back.
  CHECK(core::parse_run_config(core::run_config_to_yaml(yaml, "round trip"), "again.yaml").loss_scaling ==
        yaml.loss_scaling);
  CHECK_THROWS_WITH(core::parse_run_config("precision: fp16\nloss_scale: {window: 0}\n", "run.yaml"),
                    Catch::Contains("window"));
}
