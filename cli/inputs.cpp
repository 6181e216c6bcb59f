#include "cli/inputs.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "models/gpt.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::cli {

void add_input_options(CLI::App& cmd, InputOptions& o) {
  cmd.add_option("--model,-m", o.model, "Model name (models/NAME.yaml) or path")->capture_default_str();
  cmd.add_option("--hw", o.hw, "Hardware profile name (hwprofiles/NAME.yaml) or path")->capture_default_str();
  cmd.add_option("--nodes,-n", o.nodes, "Number of nodes")->check(CLI::PositiveNumber)->capture_default_str();
  cmd.add_option("--gpus-per-node", o.gpus_per_node,
                 "GPUs per node in place of the profile's (on a CPU profile: the MPI ranks zinf train runs on one "
                 "machine)")
      ->check(CLI::Range(1, 65536));
  cmd.add_option("--config,-c", o.config, "Run config name (configs/NAME.yaml), path, or DeepSpeed JSON")
      ->capture_default_str();
  cmd.add_option("--seq", o.seq,
                 "Sequence length in place of the run config's `seq` or the model's (a Hugging Face config.json's "
                 "default is min(max_position_embeddings, 4096))")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
}

core::DeepSpeedContext deepspeed_context(const core::ModelSpec& model, const core::HwProfile& hw, int nodes) {
  core::DeepSpeedContext ctx;
  ctx.ranks = nodes * hw.node.gpus;
  ctx.ranks_text = fmt::format("{} node{} x {} GPUs of {}", nodes, nodes == 1 ? "" : "s", hw.node.gpus, hw.name);
  ctx.model_micro_batch = model.micro_batch;
  ctx.hidden = model.hidden;
  ctx.hw_precision = core::native_precision(hw.node.gpu);
  ctx.hw_name = hw.name;
  return ctx;
}

// The most GPUs a run may span: beyond any cluster zinf is meant to plan, and far below where
// counts of ranks, shards and bytes per rank would overflow.
constexpr int64_t kMaxGpus = 1 << 20;

Inputs load_inputs(const InputOptions& o, bool for_tune) {
  const std::string root = core::zinf_root(source_dir());
  check_named_input("--model", o.model, "models");
  check_named_input("--hw", o.hw, "hwprofiles");
  check_named_input("--config", o.config, "configs");
  Inputs in;
  in.model = models::find_model(o.model, source_dir());
  core::HwProfile hw = core::load_hwprofile(core::resolve_config(o.hw, "hwprofiles", root));
  if (o.gpus_per_node > 0) hw.node.gpus = o.gpus_per_node;
  // Every command counts GPUs in an int: the product is checked before anything multiplies it.
  if (int64_t(o.nodes) * int64_t(hw.node.gpus) > kMaxGpus)
    throw CLI::ValidationError("--nodes", fmt::format("{} nodes x {} GPUs per node ({}) is {} GPUs; zinf plans at most {}",
                                                      o.nodes, hw.node.gpus, hw.name,
                                                      int64_t(o.nodes) * int64_t(hw.node.gpus), kMaxGpus));
  std::string path = core::resolve_config(o.config, "configs", root);
  const std::string text = core::read_bounded_file(path, core::kMaxConfigBytes, "run config");
  std::vector<std::string> warnings;
  if (core::is_deepspeed_json(text)) {
    core::DeepSpeedContext ctx = deepspeed_context(in.model, hw, o.nodes);
    ctx.for_tune = for_tune;
    in.deepspeed = core::read_deepspeed_config(text, path, ctx);
    in.config = in.deepspeed->config;
    for (const auto& m : in.deepspeed->messages) warnings.push_back(path + ": " + m);
  } else {
    in.config = core::parse_run_config(text, path);
  }
  if (o.seq > 0) in.config.seq = o.seq;
  if (in.config.seq) in.model.seq = *in.config.seq;  // every consumer of the model sees the run's sequence
  in.hw = core::for_precision(hw, in.config.precision, &warnings);
  for (const auto& w : warnings) fmt::print(stderr, "zinf: warning: {}\n", w);
  in.config_path = path;
  in.config_name = core::display_path(path, root);  // results name it without this machine's paths
  return in;
}

}  // namespace zinf::cli
