// The Llama family on the engine's CPU backend (engine/model/llama_ops.cpp): the whole model's loss
// and gradients against the plain double-precision Llama of tests/llama_reference.hpp (gradients:
// its central finite differences), then training through planned Programs: offloaded, tiled and
// checkpoint-offloaded configurations against the device-resident one, that against the plain
// reference trainer, per-tensor activation choices against keeping every tensor, and the Trainer
// from a Hugging Face folder with its states on NVMe. The model is tests/data/llama-tiny (hidden
// 64, 2 layers, 4 heads over 2 key/value heads, vocabulary 256, untied head). Training runs in
// fp32, where the stated tolerance is a relative 1e-5 on every step's loss (tiles sum the input
// gradients in another order).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/hwprofile.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/token_data.hpp"
#include "engine/exec/executor.hpp"
#include "engine/model/hf_weights.hpp"
#include "engine/reference_trainer.hpp"
#include "engine/train/trainer.hpp"
#include "llama_reference.hpp"
#include "models/decoder.hpp"
#include "models/gpt.hpp"
#include "formats/hf_config.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"
#include "temp_dir.hpp"
#include "test_paths.hpp"

using namespace zinf;
using zinf::test::source;
namespace llama = zinf::test::llama;

namespace {

core::ModelSpec tiny_llama(int64_t seq, int64_t micro_batch) {
  auto spec = models::load_hf_config(source("tests/data/llama-tiny/config.json"));
  spec.seq = seq;
  spec.micro_batch = micro_batch;
  return spec;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("zinf_llama_" + std::to_string(::getpid()) + "_" + std::to_string(rand()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

engine::TokenCorpus test_corpus() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919 % 1000) + ". ";
  return engine::TokenCorpus::from_text(text);
}

struct Hooks {
  int64_t layers = 2;
  std::function<void(core::HwProfile&)> edit_hw;              // before planning
  std::function<void(const core::PlanResult&)> on_plan;
};

// Trains tiny Llama `steps` steps under a run config; returns each step's loss.
std::vector<double> train(const std::string& config_yaml, int steps, const Hooks& x = {}) {
  auto spec = tiny_llama(32, 2);
  spec.layers = x.layers;
  const auto graph = models::build_decoder(spec);
  auto hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  if (x.edit_hw) x.edit_hw(hw);
  const auto config = core::parse_run_config(config_yaml, "test-config");
  const auto planned = core::make_plan(graph, hw, config, 1);
  if (x.on_plan) x.on_plan(planned);
  REQUIRE(core::validate_program(planned.program).empty());
  engine::Gpt2 model(graph);
  engine::LocalCollectives comm;
  TempDir dir;
  engine::GptBackendOptions o;
  o.nvme_dir = dir.path.string();
  o.config = config;
  auto backend = engine::make_gpt_cpu_backend(planned.program, planned.plan, model, 0, comm, o);
  backend->initialize(model.init_params(7));
  auto corpus = test_corpus();
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  engine::Executor exec(planned.program, 0, *backend);
  std::vector<double> losses;
  for (int s = 1; s <= steps; ++s) {
    std::vector<engine::Batch> batches;
    for (int mb = 0; mb < planned.program.micro_batches(); ++mb) batches.push_back(loader.next());
    backend->begin_step(s, std::move(batches));
    const auto tl = exec.run_step();
    const auto check = core::check_timeline(planned.program, tl, 1e-3);
    INFO((check.errors.empty() ? std::string() : check.errors.front()));
    REQUIRE(check.ok());
    losses.push_back(backend->loss());
  }
  return losses;
}

const char* kResident = "zero_stage: 3\nprecision: fp32\nactivation_checkpoint: {interval: 1, tier: device}\n";

}  // namespace

TEST_CASE("the engine's Llama computes LlamaForCausalLM's loss and gradients", "[llama]") {
  for (const bool tied : {false, true}) {
    INFO("tie_word_embeddings " << tied);
    auto spec = tiny_llama(6, 2);
    spec.tied_embeddings = tied;
    const auto graph = models::build_decoder(spec);
    engine::Gpt2 model(graph);
    auto params = model.init_params(11);
    // Norm weights away from 1, so that a weight applied to the wrong channel shows.
    std::mt19937 rng(5);
    std::normal_distribution<float> noise(0.0f, 0.2f);
    for (const auto& g : graph.params)
      if (g.rows == 1) for (float& w : params[size_t(g.id)]) w += noise(rng);
    std::map<std::string, llama::Tensor> weights;
    for (const auto& g : graph.params) weights[g.name] = llama::Tensor(params[size_t(g.id)].begin(), params[size_t(g.id)].end());
    REQUIRE(weights.count("layers.1.self_attn.k_proj"));
    REQUIRE(weights.count("lm_head") == (tied ? 0u : 1u));
    const llama::Shape shape{spec.micro_batch, spec.seq, spec.hidden, spec.heads, spec.kv_head_count(), spec.ffn_hidden(),
                             spec.vocab, spec.layers, spec.rope_theta, spec.norm_eps, tied};
    CHECK(shape.KV == 2);
    CHECK(shape.eps == 1e-6);

    const std::vector<int32_t> inputs = {3, 77, 200, 5, 5, 9, 250, 1, 0, 42, 42, 100};
    const std::vector<int32_t> targets = {77, 200, 5, 5, 9, 31, 1, 0, 42, 42, 100, 7};
    auto acts = model.make_activations();
    model.set_batch(acts, inputs, targets);
    auto grads = model.zeros();
    const double got = model.forward_backward(params, grads, acts);
    const double want = llama::loss(shape, weights, inputs, targets);
    CHECK(got == Approx(want).epsilon(1e-6));

    // Every group's largest gradient element and a spread of others, against central differences
    // of the double reference.
    int64_t checked = 0;
    for (const auto& g : graph.params) {
      const auto& gv = grads[size_t(g.id)];
      std::vector<size_t> at;
      at.push_back(size_t(std::max_element(gv.begin(), gv.end(), [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                          gv.begin()));
      for (int i = 0; i < 5; ++i) at.push_back(size_t(g.numel) * size_t(2 * i + 1) / 10);
      for (size_t i : at) {
        auto& w = weights.at(g.name);
        const double keep = w[i], eps = 1e-5;
        w[i] = keep + eps;
        const double up = llama::loss(shape, weights, inputs, targets);
        w[i] = keep - eps;
        const double down = llama::loss(shape, weights, inputs, targets);
        w[i] = keep;
        const double numeric = (up - down) / (2 * eps);
        INFO(g.name << "[" << i << "]: engine " << gv[i] << ", finite differences " << numeric);
        CHECK(std::abs(double(gv[i]) - numeric) <= 2e-6 + 1e-3 * std::abs(numeric));
        ++checked;
      }
    }
    CHECK(checked == 6 * int64_t(graph.params.size()));
  }
}

TEST_CASE("the engine refuses a Llama its kernels do not compute, naming what", "[llama]") {
  CHECK_NOTHROW(models::require_engine_architecture(tiny_llama(8, 1), "zinf train"));
  auto scaled = models::load_hf_config(source("tests/data/hf/llama-3.1-8b/config.json"));
  CHECK_THROWS_WITH(models::require_engine_architecture(scaled, "zinf train"),
                    Catch::Contains("llama-3.1-8b/config.json") && Catch::Contains("'rope_scaling'") &&
                        Catch::Contains("'llama3'"));
  CHECK_THROWS_WITH(models::require_engine_architecture(models::load_hf_config(source("tests/data/hf/mistral-7b-v0.1/config.json")),
                                                        "zinf train"),
                    Catch::Contains("GPT-2 and Llama architectures only") && Catch::Contains("mistral"));
  auto spec = tiny_llama(8, 1);
  spec.rope_scaling = "llama3";
  CHECK_THROWS_WITH(engine::Gpt2(models::build_decoder(spec)), Catch::Contains("rope_scaling 'llama3'"));
  spec = tiny_llama(8, 1);
  spec.qkv_bias = spec.attn_out_bias = true;
  CHECK_THROWS_WITH(engine::Gpt2(models::build_decoder(spec)), Catch::Contains("attention_bias"));
}

TEST_CASE("Llama: the planned, partitioned fp32 step matches the plain reference trainer, and the loss falls",
          "[llama][executor]") {
  const int steps = 12;
  const auto got = train(kResident, steps);
  const auto spec = tiny_llama(32, 2);
  const auto graph = models::build_decoder(spec);
  engine::Gpt2 model(graph);
  engine::ReferenceTrainerConfig rc;
  rc.adam.lr = 3e-4;
  rc.adam.beta2 = 0.95;
  rc.precision = core::Precision::Fp32;
  engine::ReferenceTrainer ref(graph, rc, model.init_params(7));
  auto corpus = test_corpus();
  engine::BatchLoader loader(corpus, spec.micro_batch, spec.seq);
  for (int s = 0; s < steps; ++s) {
    std::vector<engine::Batch> b{loader.next()};
    const double want = ref.step(b);
    CHECK(got[size_t(s)] == Approx(want).epsilon(1e-5));
  }
  // Byte text from a uniform start (log 256 = 5.55): twelve steps at 3e-4 bring it down.
  CHECK(got.front() == Approx(std::log(256.0)).epsilon(0.02));
  CHECK(got.back() < got.front() - 0.2);
}

TEST_CASE("Llama: offloaded and tiled configurations match the device-resident losses", "[llama][executor]") {
  const int steps = 8;
  const std::string resident = kResident, accumulated = std::string("gradient_accumulation: 2\n") + kResident;
  const std::pair<std::string, std::string> variants[] = {
      {resident, "zero_stage: 3\nprecision: fp32\noffload: {optimizer: cpu}\nactivation_checkpoint: {interval: 1, tier: device}\n"},
      {resident, "zero_stage: 3\nprecision: fp32\noffload: {params: nvme, optimizer: nvme}\n"
                 "activation_checkpoint: {interval: 1, tier: device}\n"},
      {resident, "zero_stage: 3\nprecision: fp32\ntiling_factor: 4\nactivation_checkpoint: {interval: 1, tier: device}\n"},
      {resident, "zero_stage: 3\nprecision: fp32\nactivation_checkpoint: {interval: 1, tier: host}\n"},
      {resident, "zero_stage: 3\nprecision: fp32\noffload: {params: nvme, optimizer: nvme}\ntiling_factor: 4\n"
                 "activation_checkpoint: {interval: 1, tier: nvme}\n"},
      {accumulated, "gradient_accumulation: 2\nzero_stage: 3\nprecision: fp32\noffload: {params: cpu, optimizer: nvme}\n"
                    "activation_checkpoint: {interval: 1, tier: host}\n"},
  };
  std::map<std::string, std::vector<double>> plain;
  for (const auto& [base, v] : variants) {
    INFO(v);
    if (!plain.count(base)) plain[base] = train(base, steps);
    const auto& want = plain[base];
    const auto got = train(v, steps);
    double worst = 0;
    for (int i = 0; i < steps; ++i) worst = std::max(worst, std::abs(got[size_t(i)] - want[size_t(i)]) / want[size_t(i)]);
    CHECK(worst <= 1e-5);
    CHECK(got.back() < got.front());
  }
}

namespace {
std::string file_bytes(const std::filesystem::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

TEST_CASE("zinf's Trainer fine-tunes tiny Llama from its Hugging Face folder with every state on NVMe, and exports it",
          "[llama][trainer]") {
  namespace fs = std::filesystem;
  test::TempDir tmp("llama_trainer");
  const fs::path in = tmp.path / "in", before = tmp.path / "before", after = tmp.path / "after";
  // The starting folder: tiny Llama's config.json and weights, as transformers would hold them.
  const auto graph = models::build_decoder(tiny_llama(64, 1));
  const engine::Gpt2 start(graph);
  const auto initial = start.init_params(21);
  engine::HfExport f32;
  engine::save_gpt2_hf_folder(in.string(), graph, [&](int32_t g, std::vector<float>& out) { out = initial[size_t(g)]; }, f32);

  engine::TrainerOptions o;
  o.model = models::find_model(in.string(), ZINF_SOURCE_DIR);  // the folder's config.json is the model
  o.model.seq = 32;  // as --seq sets it
  o.hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  o.config = core::parse_run_config("zero_stage: 3\nprecision: fp32\nmicro_batch: 2\n"
                                    "offload: {params: nvme, optimizer: nvme}\n"
                                    "activation_checkpoint: {interval: 1, tier: nvme}\noptimizer: {lr: 1.0e-3}\n",
                                    "test");
  o.nvme_dir = (tmp.path / "nvme").string();
  fs::create_directories(o.nvme_dir);
  o.init_from = in.string();
  o.note = [](const std::string&) {};
  engine::LocalCollectives comm;
  engine::Trainer trainer(o, comm);
  // Through the NVMe homes and back, untouched: the same bytes.
  trainer.export_weights(engine::export_target(before.string() + "/", "fp32", ""));
  CHECK(file_bytes(before / engine::kHfSingleFile) == file_bytes(in / engine::kHfSingleFile));
  std::vector<double> losses;
  for (int s = 0; s < 10; ++s) losses.push_back(trainer.step().loss);
  CHECK(losses.back() < losses.front() - 0.3);
  trainer.export_weights(engine::export_target(after.string() + "/", "fp32", ""));
  const auto trained = engine::load_gpt2_safetensors(after.string(), graph);
  REQUIRE(trained.size() == initial.size());
  CHECK(trained[0] != initial[0]);
  CHECK(models::load_hf_config((after / "config.json").string()).family == core::Family::Llama);
}

TEST_CASE("Llama: per-tensor activation choices (kept, offloaded, recomputed by their operators) give the kept losses, bit for bit",
          "[llama][executor][activation]") {
  // The lifetime pass at the first device budget whose plan mixes the three choices within blocks
  // (measured: it recomputes the RMSNorms, the attention and the SiLU gate by their operators, and
  // keeps or offloads the projections' tensors).
  const int steps = 3;
  Hooks keep;
  keep.layers = 4;
  const std::string kept = "zero_stage: 3\nprecision: fp32\nactivation_checkpoint: {interval: 0}\n";
  const auto ref = train(kept, steps, keep);
  auto spec = tiny_llama(32, 2);
  spec.layers = keep.layers;
  const auto graph = models::build_decoder(spec);
  auto slow_paths = [](core::HwProfile& hw) {
    hw.node.pcie_bandwidth = 1e9;
    hw.node.nvme_read_bandwidth = hw.node.nvme_write_bandwidth = 1e9;
  };
  core::HwProfile base = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  slow_paths(base);
  const std::string yaml = "zero_stage: 3\nprecision: fp32\nactivation_offload: {policy: lifetime, tier: host}\n";
  const double keep_peak =
      core::at(core::make_plan(graph, base, core::parse_run_config(kept, "c.yaml"), 1).plan.peak_bytes, core::Tier::Device);
  std::optional<double> memory;
  for (double f = 0.99; f > 0.8 && !memory; f -= 0.01) {
    core::HwProfile hw = base;
    hw.node.gpu.memory = f * keep_peak / (1.0 - hw.reserve.gpu);
    try {
      const auto r = core::make_plan(graph, hw, core::parse_run_config(yaml, "c.yaml"), 1);
      int kept_n = 0, offloaded = 0, recomputed = 0;
      for (const auto& d : r.plan.activations) {
        if (d.lifetime.tensor < 0 || d.lifetime.pinned) continue;
        kept_n += d.choice.action == core::ActivationAction::Keep;
        offloaded += d.choice.action == core::ActivationAction::Offload;
        recomputed += d.choice.action == core::ActivationAction::Recompute;
      }
      if (kept_n > 0 && offloaded > 0 && recomputed > 0) memory = hw.node.gpu.memory;
    } catch (const core::PlanError&) {  // too small for the pass: try the next
    }
  }
  REQUIRE(memory);
  Hooks x = keep;
  x.edit_hw = [&](core::HwProfile& hw) {
    slow_paths(hw);
    hw.node.gpu.memory = *memory;
  };
  int partial = 0;
  x.on_plan = [&](const core::PlanResult& r) {
    for (const auto& t : r.program.tasks()) partial += t.kind == core::TaskKind::Recompute && t.checkpoint < 0;
  };
  const auto got = train(yaml, steps, x);
  CHECK(partial > 0);
  for (int i = 0; i < steps; ++i) CHECK(got[size_t(i)] == ref[size_t(i)]);
}
