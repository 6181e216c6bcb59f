// `zinf train`: real training of a GPT through the planned Program, with a progress line per step.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "cli/command.hpp"
#include "core/config_paths.hpp"
#include "core/units.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/exec/backend_select.hpp"
#include "engine/machine_info.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"

namespace zinf::cli {
namespace {

struct TrainArgs {
  std::string model = "gpt-mini";
  std::string hw = "cpu-dev";
  std::string config = "train-nvme";
  std::string data;
  std::string nvme_dir;
  int64_t steps = 200;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  std::string init_from, export_path, timeline;
  uint64_t seed = 1234;
  unsigned adam_threads = 1;
  std::string backend = "auto";
  double device_memory_gib = 0;
  double host_memory_gib = 0;
};

// Memory sizes from the command line and the machine: on the CPU backend --device-memory is the
// device arena's budget (the profile's node.gpu.memory); --host-memory caps the host tier; a profile
// of a CPU machine never plans more host memory than this machine has.
void size_for_this_machine(const TrainArgs& a, engine::TrainerOptions& o) {
  constexpr double GiB = double(1ull << 30);
  if (a.device_memory_gib > 0 && engine::select_backend(a.backend) != engine::BackendKind::Cuda)
    o.hw.node.gpu.memory = a.device_memory_gib * GiB;
  if (a.host_memory_gib > 0) {
    o.hw.node.host_memory = a.host_memory_gib * GiB;
  } else if (o.hw.node.device_shares_host_cores) {
    const double machine = engine::this_machine("").memory;
    if (machine > 0 && machine < o.hw.node.host_memory) o.hw.node.host_memory = machine;
  }
}

void run_train(const TrainArgs& a) {
  const std::string root = core::zinf_root(source_dir());
  engine::TrainerOptions o;
  o.model = models::find_model(a.model, source_dir());
  o.hw = core::load_hwprofile(core::resolve_config(a.hw, "hwprofiles", root));
  std::vector<std::string> warnings;
  o.config = core::load_any_run_config(core::resolve_config(a.config, "configs", root), warnings);
  o.data = a.data;
  o.nvme_dir = a.nvme_dir;
  o.data_seed = a.seed;
  o.init_from = a.init_from;
  o.checkpoint_dir = a.checkpoint_dir;
  o.adam_threads = a.adam_threads;
  o.backend = a.backend;
  o.device_memory = uint64_t(a.device_memory_gib * double(1ull << 30));
  size_for_this_machine(a, o);

  auto comm = engine::make_collectives();
  const bool lead = comm->rank() == 0;
  if (lead)
    for (const auto& w : warnings) fmt::print(stderr, "zinf: warning: {}\n", w);
  engine::Trainer trainer(o, *comm);
  if (a.resume) trainer.resume();
  const auto& plan = trainer.plan();
  if (lead) {
    fmt::print("zinf train: {} ({} params) on {} rank(s), {}, {} backend | params {}, gradients {}, optimizer {}, "
               "checkpoints {}, tiling {}, {} tasks per step\n",
               o.model.name, core::format_count(double(plan.total_params)), comm->size(), o.hw.name, trainer.backend(),
               core::to_string(plan.params), core::to_string(plan.gradients), core::to_string(plan.optimizer),
               core::to_string(plan.checkpoints), plan.tiling_factor, trainer.program().tasks().size());
    if (trainer.step_count() > 0) fmt::print("resumed at step {}\n", trainer.step_count());
  }
  const bool tty = ::isatty(STDOUT_FILENO);
  double first_loss = 0;
  double arena_peak = -1;
  while (trainer.step_count() < a.steps) {
    auto s = trainer.step();
    arena_peak = std::max(arena_peak, double(s.device_arena_peak));
    if (s.step == 1 || first_loss == 0) first_loss = s.loss;
    if (lead) {
      const int width = 24;
      const int filled = int(width * s.step / std::max<int64_t>(1, a.steps));
      std::string bar = std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.');
      const std::string arena =
          s.device_arena_peak >= 0 ? fmt::format(" (arena {})", core::format_bytes(double(s.device_arena_peak))) : "";
      std::string line = fmt::format("[{}] step {}/{} | loss {:.4f} | {:.0f} tok/s | {:.3f} s | device {}{} host {} nvme {}",
                                     bar, s.step, a.steps, s.loss, s.tokens_per_s, s.seconds,
                                     core::format_bytes(core::at(s.peak, core::Tier::Device)), arena,
                                     core::format_bytes(core::at(s.peak, core::Tier::Host)),
                                     core::format_bytes(core::at(s.peak, core::Tier::Nvme)));
      if (tty) fmt::print("\r{}", line);
      else if (s.step % 10 == 0 || s.step == 1 || s.step == a.steps) fmt::print("{}\n", line);
      std::fflush(stdout);
    }
    if (!a.timeline.empty() && s.step == a.steps) {
      const std::string base = comm->size() > 1 ? fmt::format("{}.rank{}", a.timeline, comm->rank()) : a.timeline;
      std::ofstream csv(base + ".csv"), trace(base + ".trace.json");
      s.timeline.write_csv(csv);
      s.timeline.write_chrome_trace(trace);
      if (lead) fmt::print("{}timeline of step {}: {}.csv, {}.trace.json\n", tty ? "\n" : "", s.step, base, base);
    }
    if (a.checkpoint_every > 0 && s.step % a.checkpoint_every == 0) {
      auto dir = trainer.save_checkpoint();
      if (lead && !tty) fmt::print("checkpoint: {}\n", dir);
    }
  }
  if (lead && tty) fmt::print("\n");
  if (lead) {
    const auto mem = engine::compare_memory(plan.peak_bytes, std::string(trainer.backend()) == "cpu", arena_peak, engine::peak_rss());
    fmt::print("{}\n", mem.text);
  }
  if (!a.checkpoint_dir.empty() && (a.checkpoint_every == 0 || trainer.step_count() % a.checkpoint_every != 0)) {
    auto dir = trainer.save_checkpoint();
    if (lead) fmt::print("checkpoint: {}\n", dir);
  }
  if (!a.export_path.empty()) {
    trainer.export_safetensors(a.export_path);
    if (lead) fmt::print("exported {} (Hugging Face GPT-2 names, F32)\n", a.export_path);
  }
}

Registration reg(20, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a GPT for real through the planned Program (CPU or CUDA backend; mpirun for ranks)");
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("--model,-m", a->model, "Model name or path")->capture_default_str();
  cmd->add_option("--hw", a->hw, "Hardware profile of this machine (device budget, rates)")->capture_default_str();
  cmd->add_option("--config,-c", a->config, "Run config (zinf YAML or DeepSpeed JSON)")->capture_default_str();
  cmd->add_option("--data,-d", a->data, "Text file, directory of text files, or .bin tokens (default: the fortunes corpus)");
  cmd->add_option("--nvme-dir", a->nvme_dir, "Directory for states placed on NVMe (each rank uses rank<r>/ inside it)");
  cmd->add_option("--steps,-s", a->steps, "Train until this many steps are done")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir, "Where to save checkpoints (and resume from)");
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "Save every N steps (0: only at the end)");
  cmd->add_flag("--resume", a->resume, "Continue from <checkpoint-dir>/latest");
  cmd->add_option("--init-from", a->init_from, "Start from a safetensors file with Hugging Face GPT-2 names");
  cmd->add_option("--export", a->export_path, "Write the trained weights as safetensors (Hugging Face GPT-2 names)");
  cmd->add_option("--timeline", a->timeline, "Write the last step's Timeline to PREFIX.csv and PREFIX.trace.json");
  cmd->add_option("--seed", a->seed, "Data order seed")->capture_default_str();
  cmd->add_option("--adam-threads", a->adam_threads, "CPU Adam worker threads")->capture_default_str();
  cmd->add_option("--backend", a->backend, "cpu, cuda, or auto (cuda when built with it and a GPU is present)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--device-memory", a->device_memory_gib,
                  "GiB of device memory the plan may use: the CPU backend's arena in host memory (0: the profile's), "
                  "or cuda's arena (0: free memory less a reserve)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--host-memory", a->host_memory_gib,
                  "GiB of host memory the plan may use (0: the profile's, at most this machine's RAM on a CPU profile)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->callback([a] { run_train(*a); });
});

}  // namespace
}  // namespace zinf::cli
