// `zinf sample`: text from a trained model, streamed a token at a time as the model produces it. The
// weights come from a checkpoint directory (its latest step) or an exported safetensors file; each
// token is one forward pass of the engine through a forward-only Program over the run config's
// tiers, so a model larger than RAM samples through NVMe as it trained (slowly). Byte-level models
// read and write bytes; --tokenizer gives GPT-2's BPE.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "core/hwprofile.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/data/bpe_tokenizer.hpp"
#include "engine/train/sampler.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::cli {
namespace {

struct SampleArgs {
  std::string checkpoint, weights, model, hw = "cpu-dev", config = "zero3", nvme_dir, tokenizer, backend = "auto";
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 1;
  double device_memory_gib = 0, host_memory_gib = 0;
};

// The model a checkpoint directory trained: `model.name` in its latest step's meta.json.
// A file of the checkpoint, read within bounds; a refusal is a plain error naming it (exit 1), as
// the Trainer's own refusals of a checkpoint are.
std::string read_checkpoint_file(const std::string& path, uint64_t limit, const std::string& what) {
  try {
    return core::read_bounded_file(path, limit, what);
  } catch (const core::ConfigError& e) {
    throw std::runtime_error(e.what());
  }
}

std::string checkpoint_model(const std::string& dir) {
  namespace fs = std::filesystem;
  // Read within bounds (a FIFO or a huge file is refused, naming it); the Trainer verifies the step
  // whole against its checksums when it loads it.
  std::string step = read_checkpoint_file((fs::path(dir) / "latest").string(), 4096, "checkpoint's latest file");
  while (!step.empty() && (step.back() == '\n' || step.back() == ' ')) step.pop_back();
  if (step.empty() || step.find('/') != std::string::npos)
    throw std::runtime_error(fmt::format("--checkpoint {}: no readable 'latest' file in it", dir));
  const fs::path meta_path = fs::path(dir) / step / "meta.json";
  const auto meta = nlohmann::json::parse(
      read_checkpoint_file(meta_path.string(), core::kMaxConfigBytes, "checkpoint's meta.json"), nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("model") || !meta["model"].is_object() ||
      !meta["model"].contains("name") || !meta["model"]["name"].is_string())
    throw std::runtime_error(fmt::format("{}: no model name (model.name); give --model", meta_path.string()));
  return meta["model"]["name"].get<std::string>();
}

void run_sample(const SampleArgs& a) {
  if (a.checkpoint.empty() == a.weights.empty())
    throw std::runtime_error("give the weights to sample from: --checkpoint DIR or --weights FILE.safetensors (one of them)");
  if (!a.weights.empty() && a.model.empty()) throw std::runtime_error("--weights needs --model (the model the file holds)");
  if (a.prompt.empty()) throw std::runtime_error("--prompt is empty: give the text to continue");
  if (!a.model.empty()) check_named_input("--model", a.model, "models");
  check_named_input("--hw", a.hw, "hwprofiles");
  check_named_input("--config", a.config, "configs");
  check_input("--weights", a.weights, kWeightsInput);
  check_input("--tokenizer", a.tokenizer, kTokenizerInput);
  const std::string root = core::zinf_root(source_dir());
  engine::TrainerOptions o;
  o.sampling = true;
  o.model = models::find_model(a.model.empty() ? checkpoint_model(a.checkpoint) : a.model, source_dir());
  models::require_engine_architecture(o.model, "zinf sample");
  o.model.micro_batch = 1;  // one sequence per forward pass: the one being continued
  o.hw = core::load_hwprofile(core::resolve_config(a.hw, "hwprofiles", root));
  std::vector<std::string> warnings;
  const std::string config_path = core::resolve_config(a.config, "configs", root);
  o.config = core::load_any_run_config(config_path, warnings);
  o.config_source = config_path;
  for (const auto& w : warnings) fmt::print(stderr, "zinf: warning: {}\n", w);
  o.nvme_dir = a.nvme_dir;
  o.backend = a.backend;
  if (!a.checkpoint.empty()) {
    o.checkpoint_dir = a.checkpoint;
    o.start = engine::CheckpointStart::Resume;
  } else {
    o.init_from = a.weights;
  }
  engine::size_for_this_machine(o, a.device_memory_gib, a.host_memory_gib);

  std::optional<engine::BpeTokenizer> bpe;
  if (!a.tokenizer.empty()) {
    bpe = engine::BpeTokenizer::load(a.tokenizer);
    if (bpe->vocab_size() > o.model.vocab)
      throw std::runtime_error(fmt::format("--tokenizer {}: ids go up to {}, but model {} has a vocabulary of {}",
                                           a.tokenizer, bpe->vocab_size() - 1, o.model.name, o.model.vocab));
  }
  std::vector<int32_t> context;
  if (bpe) {
    context = bpe->encode(a.prompt);
  } else {
    for (unsigned char c : a.prompt) context.push_back(int32_t(c));
  }
  engine::Sampler sampler({a.temperature, a.top_k}, a.seed);  // refuses a bad temperature or top-k first
  engine::LocalCollectives comm;
  engine::Trainer model(o, comm);
  // The prompt, then each token as it comes; stdout is flushed per token so a pipe sees it stream.
  fmt::print("{}", a.prompt);
  std::fflush(stdout);
  for (int64_t n = 0; n < a.tokens; ++n) {
    const std::vector<float> logits = model.next_token_logits(context);
    const int32_t next = sampler.next(logits);
    context.push_back(next);
    if (bpe) {
      fmt::print("{}", bpe->decode_next(next));
    } else {
      std::fputc(next < 256 ? next : '?', stdout);
    }
    std::fflush(stdout);
  }
  fmt::print("\n");
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sample", "Generate text from a trained model (a checkpoint or exported weights)");
  add_threads_option(cmd);
  auto a = std::make_shared<SampleArgs>();
  cmd->add_option("--checkpoint", a->checkpoint, "A checkpoint directory (zinf train --checkpoint-dir): its latest step");
  cmd->add_option("--weights", a->weights, "Weights in safetensors with Hugging Face names, GPT-2 or Llama (zinf train --export)");
  cmd->add_option("--model,-m", a->model, "Model name or path (default with --checkpoint: the one it trained)");
  cmd->add_option("--prompt,-p", a->prompt, "Text to continue")->required();
  cmd->add_option("--tokens,-n", a->tokens, "Tokens to generate")->capture_default_str()->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--temperature,-t", a->temperature, "Softmax temperature; 0 is greedy (reproducible without a seed)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", a->top_k, "Draw among the K likeliest tokens (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a->seed, "Seed of the draws")->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer, "GPT-2 BPE: a tokenizer.json, or a directory with vocab.json + merges.txt (default: bytes)");
  cmd->add_option("--hw", a->hw, "Hardware profile of this machine")->capture_default_str();
  cmd->add_option("--config,-c", a->config, "Run config whose tiers hold the model (zinf YAML or DeepSpeed JSON)")->capture_default_str();
  cmd->add_option("--nvme-dir", a->nvme_dir, "Directory for states the config puts on NVMe");
  cmd->add_option("--backend", a->backend, "cpu, cuda, or auto")->capture_default_str();
  cmd->add_option("--device-memory", a->device_memory_gib, "Device budget in GiB (default: the profile's)")->check(CLI::PositiveNumber);
  cmd->add_option("--host-memory", a->host_memory_gib, "Host budget in GiB (default: the profile's)")->check(CLI::PositiveNumber);
  cmd->callback([a] { run_sample(*a); });
}

}  // namespace zinf::cli
