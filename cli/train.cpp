// `zinf train`: real training of a GPT through the planned Program, with a progress line per step.
// SIGINT, SIGTERM, SIGHUP (a closed terminal or ssh connection), SIGQUIT and SIGUSR1 finish the step
// in progress on every rank, save a checkpoint when a checkpoint directory was given, and exit 128 +
// the signal's number; a second signal stops at once. SIGPIPE is ignored: when the reader of the
// output goes away (`zinf train | head`), training goes on and the progress lines stop. With several
// ranks, any rank's error ends the whole job (MPI_Abort) naming that rank, instead of leaving the
// others to wait out the collective timeout. Not thread-safe; one run per process.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "cli/inputs.hpp"
#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "formats/lr_schedule_reader.hpp"
#include "core/memory_model.hpp"
#include "core/self_exe.hpp"
#include "core/units.hpp"
#include "engine/build_info.hpp"
#include "engine/comm/agreement.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/backend/backend_select.hpp"
#include "engine/io/crc32c.hpp"
#include "engine/io/output_file.hpp"
#include "engine/io/safe_files.hpp"
#include "engine/machine_info.hpp"
#include "engine/memory/heap_release.hpp"
#include "engine/memory/staging_cache.hpp"
#include "engine/train/metrics_log.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::cli {
namespace {

struct TrainArgs {
  std::string model = "gpt-mini";
  std::string hw = "cpu-dev";
  std::string config = "train-nvme";
  std::string data;
  std::string tokenizer;
  std::string metrics;
  std::string val_data;
  double val_fraction = -1;  // -1: not given (0.1 when --eval-every asks for evaluations without --val-data)
  int64_t eval_every = 0;
  int64_t eval_batches = 10;
  std::string nvme_dir;
  int64_t steps = 200;
  int64_t print_every = 10;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  bool overwrite_checkpoints = false;
  bool accept_unverified = false;
  bool allow_changes = false;
  std::string init_from, export_path, timeline, trace;
  std::string export_dtype, export_shard_size;
  uint64_t seed = 1234;
  unsigned adam_threads = 1;
  std::string backend = "auto";
  double device_memory_gib = 0;
  double host_memory_gib = 0;
  int comm_timeout_s = 120;
};

// The signals that ask the loop to stop after the step in progress. The handler only records the
// first (and says so with write(2), which is async-signal-safe); a second ends the process with
// the default action.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1};
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    std::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_stop_signal = sig;
  static const char msg[] = "\nzinf: stopping after the step in progress (again to stop at once)\n";
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kStopSignals) sigaction(sig, &sa, nullptr);
  // A closed pipe on stdout must not end the run: writes fail with EPIPE instead (print_line).
  std::signal(SIGPIPE, SIG_IGN);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

// Standard output may go away mid-run (`zinf train | head -2`, a closed terminal): the first
// failed write says so once on stderr and later lines are dropped; training is not affected.
bool g_stdout_lost = false;

template <typename... Args>
void print_line(fmt::format_string<Args...> format, Args&&... args) {
  if (g_stdout_lost) return;
  const std::string text = fmt::format(format, std::forward<Args>(args)...);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    g_stdout_lost = true;
    fmt::print(stderr, "zinf: standard output is closed ({}); training goes on without progress lines\n",
               std::strerror(errno));
  }
}

// What the run writes must not land in a directory it holds locked: the checkpoint directory, or a
// rank's rank<r>/ in the NVMe directory (the NVMe directory itself is only their parent).
// `--export CK/latest` would replace the file a resume reads.
std::string locked_dir_holding(const std::string& path, const TrainArgs& a) {
  namespace fs = std::filesystem;
  if (!a.checkpoint_dir.empty() && engine::path_inside(path, a.checkpoint_dir))
    return "--checkpoint-dir " + a.checkpoint_dir;
  if (a.nvme_dir.empty() || !engine::path_inside(path, a.nvme_dir)) return "";
  std::error_code ec;
  const fs::path rel = fs::weakly_canonical(fs::absolute(path, ec), ec)
                           .lexically_relative(fs::weakly_canonical(fs::absolute(a.nvme_dir, ec), ec));
  const std::string first = rel.empty() ? "" : rel.begin()->string();
  const bool rank_dir = first.size() > 4 && first.starts_with("rank") &&
                        std::all_of(first.begin() + 4, first.end(), [](char c) { return c >= '0' && c <= '9'; });
  return rank_dir ? "--nvme-dir " + a.nvme_dir + " (its " + first + "/)" : "";
}

void check_outside_locked(const TrainArgs& a) {
  const std::pair<const char*, std::string> outputs[] = {
      {"--export", a.export_path}, {"--timeline", a.timeline}, {"--trace", a.trace}, {"--metrics", a.metrics}};
  for (const auto& [option, path] : outputs) {
    if (path.empty()) continue;
    if (const std::string dir = locked_dir_holding(path, a); !dir.empty())
      throw std::runtime_error(fmt::format("{} {}: it lies inside {}, which zinf holds locked for the run's own files; "
                                           "write it elsewhere",
                                           option, path, dir));
  }
}

// The convention of plan, sim and train: --timeline X.csv writes the Timeline as CSV, --trace X.json
// as a Chrome trace. The old `--timeline PREFIX` (no .csv: both, as PREFIX.csv and PREFIX.trace.json)
// still works, with a warning.
void resolve_timeline_paths(TrainArgs& a) {
  if (a.timeline.empty() || a.timeline.ends_with(".csv")) return;
  fmt::print(stderr, "zinf: --timeline PREFIX is deprecated: write --timeline {0}.csv --trace {0}.trace.json\n",
             a.timeline);
  if (a.trace.empty()) a.trace = a.timeline + ".trace.json";
  a.timeline += ".csv";
}

// Every file the run names, checked before anything is loaded or trained: inputs as the bounded
// reader reads them, outputs as the one writer writes them (a missing directory for --export is
// found now, not after training).
// --export, before training: a bad dtype or shard size is refused, and so is a file target or a
// folder's parent that cannot be written (a folder is created by the export itself).
void check_export(const TrainArgs& a) {
  if (a.export_path.empty()) return;
  const auto target = engine::export_target(a.export_path, a.export_dtype, a.export_shard_size);
  if (!target.folder) return check_output("train", "--export", a.export_path);
  std::string dir = a.export_path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw std::runtime_error(fmt::format("--export {}: a Hugging Face folder export needs a directory here", dir));
  check_output("train", "--export", ::lstat(dir.c_str(), &st) == 0 ? dir + "/model.safetensors" : dir);
}

void check_files(const TrainArgs& a) {
  check_named_input("--model", a.model, "models");
  check_named_input("--hw", a.hw, "hwprofiles");
  check_named_input("--config", a.config, "configs");
  check_input("--data", a.data, kDataInput);
  check_input("--val-data", a.val_data, kDataInput);
  check_input("--tokenizer", a.tokenizer, kTokenizerInput);
  check_input("--init-from", a.init_from, kWeightsInput);
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--timeline", a.timeline},
                                   {"--trace", a.trace}, {"--metrics", a.metrics}})
    check_output("train", flag, path);
  check_export(a);
}

// `path` of rank `rank` when several ranks write: X.csv -> X.rank1.csv.
std::string rank_path(const std::string& path, int rank, int ranks) {
  if (ranks <= 1 || path.empty()) return path;
  const size_t dot = path.find_last_of('.');
  const size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return fmt::format("{}.rank{}", path, rank);
  return fmt::format("{}.rank{}{}", path.substr(0, dot), rank, path.substr(dot));
}

void write_timeline(const core::Timeline& t, const std::string& csv, const std::string& trace) {
  for (const std::string& path : {csv, trace}) {
    if (path.empty()) continue;
    engine::OutputFile out(engine::default_io_env(), path, path == csv ? "zinf train --timeline" : "zinf train --trace");
    if (path == csv) t.write_csv(out.stream());
    else t.write_chrome_trace(out.stream());
    out.commit();
  }
}

void export_weights(engine::Trainer& trainer, const TrainArgs& a, bool lead) {
  const engine::ExportTarget target = engine::export_target(a.export_path, a.export_dtype, a.export_shard_size);
  trainer.export_weights(target);
  if (lead)
    print_line("exported {} (Hugging Face names, {}{})\n", a.export_path, engine::to_string(target.how.dtype),
               target.folder ? ", a folder" : "");
}

void train_loop(const TrainArgs& a, const engine::TrainerOptions& o, engine::Trainer& trainer, engine::Collectives& comm,
                const engine::HeapRelease& heap, engine::MetricsLog* metrics);

// The held-out loss now, printed on its own line (after a progress bar on a terminal) and recorded.
void evaluate(engine::Trainer& trainer, engine::MetricsLog* metrics, bool lead, bool after_bar) {
  const engine::EvalStats e = trainer.evaluate();
  if (metrics) metrics->write(engine::eval_record(e));
  if (!lead) return;
  print_line("{}held-out loss {:.4f} (perplexity {:.2f}) at step {}: {} micro-batches, {} tokens, {:.2f} s\n",
             after_bar ? "\n" : "", e.loss, e.perplexity, e.step, e.batches, e.tokens, e.seconds);
}

// This zinf, for the ranks to compare: its version and a checksum of the executable's bytes (two
// builds of one version differ; the same build copied to each node does not).
std::string zinf_identity() {
  std::error_code ec;
  const auto exe = core::self_exe(ec);
  std::ifstream in(exe, std::ios::binary);
  if (ec || !in) return "zinf 0.1.0 (executable unreadable)";
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  uint64_t bytes = 0;
  while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0) {
    crc = engine::crc32c(buf.data(), size_t(in.gcount()), crc);
    bytes += uint64_t(in.gcount());
  }
  return fmt::format("zinf 0.1.0, executable of {} bytes, CRC32C {:08x}", bytes, crc);
}

// The command line's share of what every rank must agree on (the Trainer adds the rest).
std::map<std::string, std::string> command_line_fields(const TrainArgs& a) {
  return {{"zinf", zinf_identity()},
          {"--steps", std::to_string(a.steps)},
          {"--checkpoint-every", std::to_string(a.checkpoint_every)},
          {"--export", a.export_path},
          {"--timeline", a.timeline},
          {"--trace", a.trace},
          {"--metrics", a.metrics},
          {"--tokenizer", a.tokenizer},
          {"--val-data", a.val_data},
          {"--val-fraction", fmt::format("{}", a.val_fraction)},
          {"--eval-every", std::to_string(a.eval_every)},
          {"--eval-batches", std::to_string(a.eval_batches)},
          {"--device-memory", fmt::format("{}", a.device_memory_gib)},
          {"--host-memory", fmt::format("{}", a.host_memory_gib)},
          {"--comm-timeout", std::to_string(a.comm_timeout_s)},
          {"--accept-unverified", a.accept_unverified ? "yes" : "no"},
          {"--allow-changes", a.allow_changes ? "yes" : "no"}};
}

void run_train(const TrainArgs& a) {
  if (a.resume && a.checkpoint_dir.empty()) throw std::runtime_error("--resume needs --checkpoint-dir");
  if (a.resume && a.overwrite_checkpoints)
    throw std::runtime_error("--resume and --overwrite-checkpoints contradict each other: choose one");
  check_outside_locked(a);
  check_files(a);
  const std::string root = core::zinf_root(source_dir());
  engine::TrainerOptions o;
  o.model = models::find_model(a.model, source_dir());
  models::require_engine_architecture(o.model, "zinf train");
  o.hw = core::load_hwprofile(core::resolve_config(a.hw, "hwprofiles", root));
  const std::string config_path = core::resolve_config(a.config, "configs", root);
  o.config_source = config_path;
  o.data = a.data;
  o.tokenizer = a.tokenizer;
  if (!a.val_data.empty() && a.val_fraction >= 0)
    throw std::runtime_error("--val-data and --val-fraction both give a held-out split: choose one");
  o.val_data = a.val_data;
  o.val_fraction = a.val_fraction >= 0 ? a.val_fraction : (a.eval_every > 0 && a.val_data.empty() ? 0.1 : 0.0);
  o.eval_batches = a.eval_batches;
  o.nvme_dir = a.nvme_dir;
  o.data_seed = a.seed;
  o.total_steps = a.steps;
  o.init_from = a.init_from;
  o.checkpoint_dir = a.checkpoint_dir;
  o.start = a.resume                  ? engine::CheckpointStart::Resume
            : a.overwrite_checkpoints ? engine::CheckpointStart::Overwrite
                                      : engine::CheckpointStart::Fresh;
  o.must_agree = command_line_fields(a);
  o.accept_unverified = a.accept_unverified;
  o.allow_changes = a.allow_changes;
  o.adam_threads = a.adam_threads;
  o.backend = a.backend;
  engine::size_for_this_machine(o, a.device_memory_gib, a.host_memory_gib);

  install_stop_handlers();
  auto comm = engine::make_collectives(std::chrono::seconds(a.comm_timeout_s));
  // A DeepSpeed config's batch triple is checked against the world size mpirun gave.
  std::vector<std::string> warnings;
  {
    core::DeepSpeedContext ctx = deepspeed_context(o.model, o.hw, 1);
    ctx.ranks = comm->size();
    ctx.ranks_text = fmt::format("{} rank{} of zinf train", comm->size(), comm->size() == 1 ? "" : "s");
    o.config = core::load_any_run_config(config_path, warnings, ctx);
  }
  o.lr_schedule = core::load_lr_schedule(config_path, warnings);
  o.resolve_auto = [lead = comm->rank() == 0](const core::ModelSpec& m, const core::HwProfile& hw, int ranks,
                                              const core::RunConfig& c) {
    const auto r = resolve_auto_for_ranks(m, hw, ranks, c);
    if (lead && !r.summary.empty()) fmt::print(stderr, "zinf train: {}\n", r.summary);
    return r.config;
  };
  if (comm->rank() == 0) {
    // GEMMs run in OpenBLAS on the CPU backend: say so when the environment holds them back.
    if (auto w = engine::blas_kernel_warning(engine::cpu_paths(), std::getenv("OPENBLAS_CORETYPE"));
        !w.empty() && a.backend != "cuda")
      warnings.push_back(std::move(w));
    for (const auto& w : warnings) fmt::print(stderr, "zinf: warning: {}\n", w);
  }
  try {
    // Rank 0 writes the metrics; a resumed run appends to them. Opened first: a path that cannot
    // be written is refused before training, not after.
    std::unique_ptr<engine::MetricsLog> metrics;
    if (!a.metrics.empty() && comm->rank() == 0) metrics = std::make_unique<engine::MetricsLog>(a.metrics, a.resume);
    // Before the homes are built: what a step frees must leave the process, or peak RSS outgrows the plan.
    const engine::HeapRelease heap = engine::release_freed_memory_promptly(std::getenv("ZINF_HEAP_RELEASE"));
    engine::Trainer trainer(o, *comm);
    train_loop(a, o, trainer, *comm, heap, metrics.get());
  } catch (const ExitCode&) {
    throw;
  } catch (const engine::TrainingDiverged&) {
    throw;  // every rank saw the same all-reduced figures and stops the same way: exit 4 on each
  } catch (const engine::RanksDisagree&) {
    // Every rank found the same differences and stops; rank 0 says which.
    if (comm->rank() == 0) throw;
    throw ExitCode{1, ""};
  } catch (const std::exception& e) {
    // One rank's error is the job's: end every rank now, naming this one, rather than leave the
    // others waiting for it until the collective timeout.
    if (comm->size() > 1) comm->abort(fmt::format("error: {}", e.what()));
    throw;
  }
}

void train_loop(const TrainArgs& a, const engine::TrainerOptions& o, engine::Trainer& trainer, engine::Collectives& comm,
                const engine::HeapRelease& heap, engine::MetricsLog* metrics) {
  const bool lead = comm.rank() == 0;
  const auto& plan = trainer.plan();
  if (lead) {
    // Under tensor parallelism the plan counts a rank's share; say what the model is and how it is split.
    const int64_t t = o.config.tensor_parallel;
    const std::string ranks =
        t > 1 ? fmt::format("{} ranks (tensor parallel {} x data parallel {}; {} params per rank)", comm.size(), t,
                            comm.size() / t, core::format_count(double(plan.total_params)))
              : fmt::format("{} rank(s)", comm.size());
    print_line("zinf train: {} ({} params) on {}, {}, {} backend | params {}, gradients {}, optimizer {}, "
               "checkpoints {}, tiling {}, {} tasks per step\n",
               o.model.name,
               core::format_count(double(t > 1 ? core::gpt_param_counts(o.model).total(o.model.layers) : plan.total_params)),
               ranks, o.hw.name,
               trainer.backend(),
               core::to_string(plan.params), core::to_string(plan.gradients), core::to_string(plan.optimizer),
               core::to_string(plan.checkpoints), plan.tiling_factor, trainer.program().tasks().size());
    if (trainer.evaluates())
      print_line("held-out loss: {} micro-batches {}, through a forward-only Program of {} tasks\n", a.eval_batches,
                 a.eval_every > 0 ? fmt::format("every {} steps and at the end", a.eval_every) : std::string("at the end"),
                 trainer.eval_program()->tasks().size());
    if (trainer.lr_schedule().kind != core::LrScheduleKind::Constant)
      print_line("lr schedule: {} (peak lr {:g})\n", core::describe(trainer.lr_schedule()), o.config.lr);
    // The GEMMs' BLAS threads, as main or --threads set them: what a profile of this machine must be measured with.
    if (std::string(trainer.backend()) == "cpu") print_line("{}\n", engine::describe(engine::pinned_blas_threads()));
    print_line("{}\n", engine::describe(heap));
    if (trainer.step_count() > 0)
      print_line("resumed at step {} (peak RSS so far {}: the plan counts {} of RAM)\n", trainer.step_count(),
                 core::format_bytes(engine::peak_rss()),
                 core::format_bytes(engine::planned_ram(plan.peak_bytes, std::string(trainer.backend()) == "cpu")));
  }
  const bool tty = ::isatty(STDOUT_FILENO);
  auto stop_requested = [&] { return trainer.any_rank(g_stop_signal != 0); };
  bool stopped = stop_requested();
  int64_t last_saved = -1;
  double arena_peak = -1;
  while (!stopped && trainer.step_count() < a.steps) {
    auto s = trainer.step();
    arena_peak = std::max(arena_peak, double(s.device_arena_peak));
    if (metrics) metrics->write(engine::step_record(s));
    if (lead) {
      const int width = 24;
      const int filled = int(width * std::min(s.step, a.steps) / std::max<int64_t>(1, a.steps));
      std::string bar = std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.');
      const std::string arena =
          s.device_arena_peak >= 0 ? fmt::format(" (arena {})", core::format_bytes(double(s.device_arena_peak))) : "";
      // The rate goes last: scripts read the fields before it (experiments/memory_wall, activation_offload).
      // fp16: the loss scale the step ran with, and whether an overflow skipped it.
      const std::string scale =
          s.loss_scale > 0 ? fmt::format(" | scale {:g}{}", s.loss_scale, s.skipped ? " skipped" : "") : "";
      std::string line = fmt::format("[{}] step {}/{} | loss {:.4f} | {:.0f} tok/s | {:.3f} s | device {}{} host {} nvme {}{} | lr {:.2e}",
                                     bar, s.step, a.steps, s.loss, s.tokens_per_s, s.seconds,
                                     core::format_bytes(core::at(s.peak, core::Tier::Device)), arena,
                                     core::format_bytes(core::at(s.peak, core::Tier::Host)),
                                     core::format_bytes(core::at(s.peak, core::Tier::Nvme)), scale, s.lr);
      if (tty) print_line("\r{}", line);
      else if (s.step % a.print_every == 0 || s.step == 1 || s.step == a.steps) print_line("{}\n", line);
    }
    stopped = stop_requested();
    if (trainer.evaluates() && a.eval_every > 0 && s.step % a.eval_every == 0 && s.step < a.steps && !stopped)
      evaluate(trainer, metrics, lead, tty);
    if ((!a.timeline.empty() || !a.trace.empty()) && (s.step == a.steps || stopped)) {
      const std::string csv = rank_path(a.timeline, comm.rank(), comm.size());
      const std::string trace = rank_path(a.trace, comm.rank(), comm.size());
      write_timeline(s.timeline, csv, trace);
      if (lead)
        print_line("{}timeline of step {}: {}\n", tty ? "\n" : "", s.step,
                   csv.empty() ? trace : trace.empty() ? csv : csv + ", " + trace);
    }
    if (a.checkpoint_every > 0 && s.step % a.checkpoint_every == 0 && !stopped) {
      // Mid-run, `latest` moves once the next step confirms this state (engine/train/trainer.hpp).
      auto dir = trainer.save_checkpoint(s.step == a.steps);
      last_saved = s.step;
      if (lead && !tty) print_line("checkpoint: {}\n", dir);
    }
  }
  if (lead && tty) print_line("\n");
  if (lead && trainer.scales_loss())
    print_line("fp16: {} of {} steps skipped for an overflowing loss scale\n", trainer.skipped_steps(),
               trainer.step_count());
  // The held-out loss of the model as trained (not after a stop signal: the user wants it to end).
  if (trainer.evaluates() && !stopped) evaluate(trainer, metrics, lead, false);
  if (lead) {
    const auto mem = engine::compare_memory(plan.peak_bytes, std::string(trainer.backend()) == "cpu", arena_peak,
                                            engine::peak_rss(), trainer.rss_before_homes());
    print_line("{}\n", mem.text);
    // Device tensors and host staging share one cache of mapped blocks, reused by size class and
    // held within the plan's host (+ device) bytes: it unmaps free blocks rather than map beyond.
    const auto cache = engine::StagingCache::instance().stats();
    print_line("buffers: {} mapped (limit {}: the plan), at most {} in use at once; {} unmapped to stay within it, "
               "{} new mappings, {} blocks cut from larger free ones\n",
               core::format_bytes(double(cache.mapped_bytes)), core::format_bytes(double(cache.budget_bytes)),
               core::format_bytes(double(cache.peak_in_use_bytes)), core::format_bytes(double(cache.unmapped_for_limit)),
               cache.maps, cache.cut_to_size);
  }
  if (last_saved == trainer.step_count()) trainer.publish_pending();  // no next step will confirm it
  if (!a.checkpoint_dir.empty() && last_saved != trainer.step_count()) {
    // After the reset the high-water mark is the RSS the save starts from (freed memory stays in
    // the heap for the next step), so both are shown: what the save added is their difference.
    const bool measured = engine::reset_peak_rss();
    const double before = engine::peak_rss_since_reset();
    auto dir = trainer.save_checkpoint();
    if (lead && measured)
      print_line("checkpoint: {} (peak RSS while saving {}, {} when it began)\n", dir,
                 core::format_bytes(engine::peak_rss_since_reset()), core::format_bytes(before));
    else if (lead) print_line("checkpoint: {}\n", dir);
  }
  if (stopped) {
    const int sig = g_stop_signal != 0 ? int(g_stop_signal) : SIGTERM;  // another rank's signal
    throw ExitCode{128 + sig, fmt::format("zinf: {} after step {}: stopped{}{}", signal_name(sig), trainer.step_count(),
                                          a.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing saved)" : ", checkpoint saved",
                                          a.export_path.empty() ? "" : "; --export skipped: the run is incomplete")};
  }
  if (!a.export_path.empty()) export_weights(trainer, a, lead);
}

// CLI11's Range lets NaN through (every comparison with it is false): memory sizes must be finite.
const CLI::Validator kFinite(
    [](std::string& text) {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      return end != text.c_str() && !std::isfinite(v) ? "must be a finite number of GiB, not " + text : std::string();
    },
    "", "finite");

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a GPT for real through the planned Program (CPU or CUDA backend; mpirun for ranks)");
  add_threads_option(cmd);
  auto a = std::make_shared<TrainArgs>();
  cmd->add_option("--model,-m", a->model, "Model name or path")->capture_default_str();
  cmd->add_option("--hw", a->hw, "Hardware profile of this machine (device budget, rates)")->capture_default_str();
  cmd->add_option("--config,-c", a->config, "Run config (zinf YAML or DeepSpeed JSON)")->capture_default_str();
  cmd->add_option("--data,-d", a->data, "Text file, directory of text files, or .bin tokens (default: the fortunes corpus)");
  cmd->add_option("--tokenizer", a->tokenizer,
                  "GPT-2 BPE for text data: a tokenizer.json, or a directory with vocab.json + merges.txt (default: bytes)");
  cmd->add_option("--metrics", a->metrics,
                  "Write one JSON line per step and per evaluation to FILE.jsonl (appended to with --resume); plot "
                  "it with analysis/train_report.py");
  cmd->add_option("--val-data", a->val_data,
                  "Held-out text or .bin tokens to evaluate on (default: with --eval-every, the last --val-fraction of --data)");
  cmd->add_option("--val-fraction", a->val_fraction,
                  "Hold out the last fraction of --data's tokens (not trained on) and evaluate on it (0.1 when "
                  "--eval-every is given without --val-data)")
      ->check(CLI::Range(0.0, 0.9));
  cmd->add_option("--eval-every", a->eval_every,
                  "Print and record the held-out loss every N steps, and at the end (0: at the end only, given a "
                  "held-out split)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-batches", a->eval_batches, "Held-out micro-batches per evaluation, over all data-parallel ranks")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1'000'000)));
  cmd->add_option("--nvme-dir", a->nvme_dir, "Directory for states placed on NVMe (each rank uses rank<r>/ inside it)");
  cmd->add_option("--steps,-s", a->steps, "Train until this many steps are done")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(99'999'999)));  // step-NNNNNNNN names have 8 digits
  cmd->add_option("--print-every", a->print_every,
                  "When the output is not a terminal, print a step's line every N steps (and the first and last)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir, "Where to save checkpoints (and resume from)");
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "Save every N steps (0: only at the end)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--resume", a->resume, "Continue from <checkpoint-dir>/latest");
  cmd->add_flag("--overwrite-checkpoints", a->overwrite_checkpoints,
                "Start a fresh run in a checkpoint directory that holds an earlier run's checkpoints");
  cmd->add_flag("--accept-unverified", a->accept_unverified,
                "Resume from a checkpoint that has no checksums (written by an older zinf)");
  cmd->add_flag("--allow-changes", a->allow_changes,
                "Resume with another data seed, data, micro-batch or run config than the checkpoint recorded");
  cmd->add_option("--init-from", a->init_from,
                  "Start from Hugging Face weights (GPT-2 or Llama names): a safetensors file, or a folder (model.safetensors or shards "
                  "with model.safetensors.index.json)");
  cmd->add_option("--export", a->export_path,
                  "Write the trained weights in Hugging Face names (GPT-2 or Llama): one safetensors file, or a folder (an existing "
                  "directory, a path ending in '/', or with --export-shard-size) of shards and their index");
  cmd->add_option("--export-dtype", a->export_dtype, "fp32 (the master weights, default), bf16 or fp16")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--export-shard-size", a->export_shard_size,
                  "Largest shard of an exported folder, as transformers counts it (5GB, 500MB, 2GiB; default 5GB)");
  cmd->add_option("--timeline", a->timeline, "Write the last step's Timeline as CSV to this path (X.csv)");
  cmd->add_option("--trace", a->trace, "Write the last step's Timeline as a Chrome trace (Perfetto) to this path");
  cmd->add_option("--seed", a->seed, "Data order seed")->capture_default_str();
  cmd->add_option("--adam-threads", a->adam_threads, "CPU Adam worker threads")
      ->capture_default_str()
      ->check(CLI::Range(1u, std::max(4u, 4 * std::thread::hardware_concurrency())));
  cmd->add_option("--backend", a->backend, "cpu, cuda, or auto (cuda when built with it and a GPU is present)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_option("--device-memory", a->device_memory_gib,
                  "GiB of device memory the plan may use (0: the profile's node.gpu.memory): the CPU backend's arena "
                  "in host memory, or cuda's on the GPU; the arena is the Program's device budget")
      ->check(kFinite)
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--host-memory", a->host_memory_gib,
                  "GiB of host memory the plan may use (0: the profile's, at most this machine's RAM on a CPU profile)")
      ->check(kFinite)
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--comm-timeout", a->comm_timeout_s, "Seconds a rank waits for its peers before it ends the job")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->callback([a] {
    resolve_timeline_paths(*a);
    run_train(*a);
  });
}

}  // namespace zinf::cli
