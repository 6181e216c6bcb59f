#include "engine/train/trainer.hpp"

#include <malloc.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "engine/comm/agreement.hpp"
#include "engine/data/bpe_tokenizer.hpp"
#include "engine/data/token_data.hpp"
#include "engine/backend/backend_select.hpp"
#include "engine/backend/cuda_plugin.hpp"
#include "engine/exec/executor.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/machine_info.hpp"
#include "engine/memory/staging_cache.hpp"
#include "engine/io/io_priority.hpp"
#include "engine/io/crc32c.hpp"
#include "engine/io/safe_files.hpp"
#include "engine/model/hf_weights.hpp"
#include "engine/model/safetensors.hpp"
#include "engine/train/checkpoint_dir.hpp"
#include "engine/train/divergence.hpp"
#include "engine/train/loss_scaler.hpp"
#include "engine/train/trainer_checks.hpp"
#include "engine/train/run_identity.hpp"
#include "models/gpt.hpp"

namespace fs = std::filesystem;

namespace zinf::engine {

namespace {

// Ranks sharing this machine's RAM: OpenMPI's local size, else every rank of the job.
int ranks_on_this_node(int ranks) {
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    const int n = std::atoi(local);
    if (n >= 1) return n;
  }
  return ranks;
}

}  // namespace

// Tensor parallelism t splits the job's ranks into tensor-parallel and data-parallel groups as
// core::parallel_place lays them out (the simulator's layout too). Both are null for t = 1: the
// world is the one data-parallel group. A collective over the world.
struct ParallelGroups {
  std::unique_ptr<Collectives> tensor, data;
};

ParallelGroups split_parallel_groups(const TrainerOptions& o, Collectives& world) {
  const int t = int(std::max<int64_t>(1, o.config.tensor_parallel));
  if (t == 1) return {};
  if (world.size() % t != 0)
    throw std::invalid_argument(fmt::format("{}: tensor_parallel {} does not divide the job's {} rank{}: run "
                                            "under mpirun -np with a multiple of {} ranks",
                                            o.config_source, t, world.size(), world.size() == 1 ? "" : "s", t));
  const core::ParallelPlace at = core::parallel_place(world.rank(), t);
  // The tensor-parallel group (the ranks of one data-parallel place) first: a braced list runs in order.
  return {world.split(at.data, at.tensor, "tensor-parallel group"), world.split(at.tensor, at.data, "data-parallel group")};
}

struct Trainer::Impl {
  TrainerOptions opt;
  // The config and model as given, before the tuner resolves `auto` for this rank count and machine
  // and the config's micro-batch overrides the model's: what a checkpoint records and ranks compare.
  const RunFields given_config;
  Collectives& comm;  // the job's world
  const bool inputs_agreed;  // every rank was started with the same inputs (checked first of all)
  ParallelGroups groups;
  Collectives& dp;  // the data-parallel group this rank's ZeRO partitions span (the world for tensor_parallel 1)
  BackendKind kind;  // resolved once, first: the graph's working precision and the RAM check depend on it
  models::GptPlan gpt;  // the graph and its plan, from models::plan_gpt
  core::ModelGraph& graph = gpt.graph;
  core::PlanResult& planned = gpt.planned;
  // Tensor parallelism: the whole model's graph. Checkpoints, imports and exports hold whole tensors
  // in its shapes (each rank's shares all-gathered over its group on the way out, cut on the way
  // in), so they are the same files at every degree and a run resumes at another degree.
  std::optional<core::ModelGraph> whole_graph;
  // The staging cache maps at most what this Program plans for the host (and for the device, whose
  // memory is the host's on the CPU backend) beyond the states' homes: its blocks are all the
  // Program's buffers (staging_budget_bytes).
  StagingBudget staging_budget;
  Gpt2 model;
  TokenCorpus corpus;
  std::unique_ptr<BatchLoader> loader;
  std::unique_ptr<Collectives> device_comm;  // CUDA: NCCL (or device copies for one rank), bootstrapped over `comm`
  std::unique_ptr<TrainingBackend> backend;  // GptCpuBackend, or the CUDA plugin's backend
  std::unique_ptr<Executor> executor;
  std::optional<TokenCorpus> held_out;     // the held-out split, until the Evaluator takes it
  std::unique_ptr<Evaluator> evaluator;    // with a held-out split: the forward-only Program's runs
  IoEnv& env;
  std::unique_ptr<CheckpointDir> checkpoints;  // rank 0's, locked for the run
  int64_t steps_done = 0;
  // Updates made: steps done less those fp16 skipped.
  int64_t optimizer_steps() const { return steps_done - (scaler ? scaler->skipped() : 0); }
  core::LrSchedule schedule;  // opt.lr_schedule with its `auto` lengths decided
  double last_lr = 0;         // the rate of the last step run
  DivergenceRule rule;
  std::optional<LossScaler> scaler;  // fp16's loss scale (engine/train/loss_scaler.hpp)
  DataIdentity data;
  std::string pending;  // a checkpoint saved but not yet `latest`: the next step's figures confirm it
  double rss_before_homes = 0;  // the process's RSS just before the backend built the homes

  Impl(TrainerOptions o, Collectives& c)
      : opt((models::require_engine_architecture(o.model, "zinf's engine"), std::move(o))), given_config(config_fields(opt.config)), comm(c), inputs_agreed(agree_on_inputs()), groups(split_parallel_groups(opt, c)), dp(groups.data ? *groups.data : c),
        kind(select_backend(opt.backend)), gpt(plan_run(opt, kind, c.size())),
        staging_budget(staging_budget_bytes(planned.program, planned.plan, kind != BackendKind::Cuda, dp.rank())),
        model(graph, KernelImpl::Fast, TensorParallelRank{groups.tensor ? groups.tensor->rank() : 0, groups.tensor.get()}),
        env(opt.env ? *opt.env : default_io_env()), rule(opt.model.vocab) {
    // Under chrt, real time for the NVMe threads only: compute at real time starves the kernel's
    // own block I/O workers (engine/io/io_priority.hpp).
    const auto& pl = planned.plan;
    if (pl.params == core::Tier::Nvme || pl.gradients == core::Tier::Nvme || pl.optimizer == core::Tier::Nvme ||
        pl.checkpoints == core::Tier::Nvme) {
      if (keep_realtime_for_io_only() > 0)
        note(fmt::format("real-time priority kept for the NVMe threads only: compute runs at SCHED_OTHER nice {} "
                         "(ZINF_REALTIME_COMPUTE=1 keeps it real-time)", kComputeNice));
    }
    // Checkpoint directory first: a run that cannot save (unwritable, locked, or holding an
    // earlier run's checkpoints) is refused before it trains, not after.
    open_checkpoint_dir();
    // Every step frees and reallocates the same activation, staging and gradient buffers. Keeping
    // freed memory in the heap (no mmap for large blocks, no trimming) lets the next step reuse
    // pages that are already faulted in: first touch of fresh pages runs at ~0.3 GB/s here.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, INT32_MAX);
    // The Program's invariants (core::validate_program), checked once before anything runs: a
    // planner bug stops here with what it broke, not as a hang or a wrong gradient later.
    if (const auto broken = core::validate_program(planned.program); !broken.empty())
      throw std::logic_error(invalid_program_message("the planner produced a Program that breaks its invariants", broken));
    // Say so up front when the plan cannot fit in this machine's RAM, instead of meeting the OOM
    // killer halfway through initialization.
    const bool device_in_ram = kind != BackendKind::Cuda;
    check_plan_fits_ram(planned.plan.peak_bytes, device_in_ram, ranks_on_this_node(c.size()), available_memory());
    try {
      schedule = core::resolved(opt.lr_schedule, opt.total_steps, opt.config.lr);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", opt.config_source, e.what()));
    }
    if (!opt.sampling) {
      load_data();
      data = data_identity(corpus);
    }
    agree_on_plan_and_data();
    GptBackendOptions bo;
    if (!opt.nvme_dir.empty()) {
      std::error_code ec;
      if (!fs::is_directory(opt.nvme_dir, ec))
        throw std::runtime_error(fmt::format("--nvme-dir {}: no such directory", opt.nvme_dir));
      // The store creates rank<r>/ itself, refuses a link or another user's directory there, and
      // locks it (engine/io/nvme_store.hpp).
      bo.nvme_dir = (fs::path(opt.nvme_dir) / fmt::format("rank{}", comm.rank())).string();
    }
    bo.config = opt.config;
    bo.adam_threads = opt.adam_threads;
    rss_before_homes = current_rss();
    if (groups.tensor) bo.norm_comm = &comm;  // each tensor-parallel rank holds other gradients
    if (kind == BackendKind::Cuda) {
      std::string why;
      const CudaPlugin* cuda = cuda_plugin(&why);
      if (!cuda) throw std::runtime_error("--backend cuda: " + why);
      const int device = cuda_device_for_rank(comm.rank());
      device_comm = cuda->make_device_collectives(comm, device);
      backend = cuda->make_backend(planned.program, planned.plan, model, comm.rank(), *device_comm, bo, device);
    } else {
      backend = make_gpt_cpu_backend(planned.program, planned.plan, model, dp.rank(), dp, bo);
    }
    if (opt.config.precision == core::Precision::Fp16) {
      scaler.emplace(opt.config.loss_scaling);
      backend->set_loss_scale(scaler->scale());
    }
    // A fresh start streams its initialization (or --init-from) a parameter group at a time into
    // the homes the plan chose, on either device, so the model never sits whole in host memory. A
    // resumed run skips it: resume() loads every home from the checkpoint the same way.
    if (groups.tensor) whole_graph = models::build_gpt(opt.model, 1);
    const bool resuming = opt.start == CheckpointStart::Resume;
    if (!resuming && opt.init_from.empty()) {
      Gpt2::InitStream stream(model, opt.init_seed);
      backend->initialize([&stream](int32_t g, std::vector<float>& out) { stream.next(g, out); });
    } else if (!resuming) {
      backend->initialize(this_ranks_share(gpt2_safetensors_groups(opt.init_from, file_graph())));
    }
    executor = std::make_unique<Executor>(planned.program, dp.rank(), *backend);
    if (held_out) {
      // The forward-only Program over this plan's decisions, with the training states beside it.
      core::PlanResult forward = core::make_forward_plan(graph, opt.hw, core::forward_config(opt.config, planned.plan),
                                                         comm.size(), core::ForwardBeside::TrainingStates);
      evaluator = std::make_unique<Evaluator>(std::move(*held_out), std::move(forward), *backend, dp.rank(), dp.size(),
                                              opt.eval_batches, opt.model.micro_batch, opt.model.seq, opt.data_seed);
      held_out.reset();
    }
    if (opt.start == CheckpointStart::Resume) resume();
    // The group tensors initialization or resume read went through the heap, which keeps freed
    // memory (above); the steps stage through the StagingCache, so that memory goes back now.
    malloc_trim(0);
  }

  // The training data (and the held-out split), and the loader that deals it to this rank.
  void load_data() {
    std::optional<BpeTokenizer> tokenizer;
    if (!opt.tokenizer.empty()) tokenizer = BpeTokenizer::load(opt.tokenizer);
    corpus = TokenCorpus::load(opt.data, tokenizer ? &*tokenizer : nullptr);
    if (!tokenizer && corpus.vocab == 256 && opt.model.vocab > 256 && fs::path(corpus.source).extension() != ".bin")
      note(fmt::format("data {} is read as bytes (ids 0-255) for a model with a vocabulary of {}: pass --tokenizer "
                       "(GPT-2's vocab.json + merges.txt or tokenizer.json) to train on BPE tokens",
                       corpus.source, opt.model.vocab));
    corpus.require_vocab(opt.model.vocab, opt.model.name);
    // The held-out split: its own data, or the end of this data, which training then leaves out.
    if (!opt.val_data.empty()) {
      held_out = TokenCorpus::load(opt.val_data, tokenizer ? &*tokenizer : nullptr);
      held_out->require_vocab(opt.model.vocab, opt.model.name, "held-out data");
    } else if (opt.val_fraction > 0) {
      held_out = corpus.split_tail(opt.val_fraction, opt.model.seq + 1);
    }
    // The ranks of a tensor-parallel group train on the same micro-batches: data by data-parallel rank.
    loader = std::make_unique<BatchLoader>(corpus, opt.model.micro_batch, opt.model.seq, dp.rank(), dp.size(),
                                           opt.data_seed);
  }

  // The forward-only Program next_token_logits runs, planned and checked on first use.
  std::unique_ptr<core::PlanResult> sample_forward;
  std::unique_ptr<Executor> sample_executor;

  std::vector<float> next_token_logits(const std::vector<int32_t>& context) {
    if (comm.size() > 1) throw std::logic_error("next_token_logits runs in one process, not over MPI ranks");
    if (context.empty()) throw std::invalid_argument("sampling needs at least one token of context (a prompt)");
    for (int32_t t : context)
      if (t < 0 || t >= opt.model.vocab)
        throw std::invalid_argument(fmt::format("token {} is outside model {}'s vocabulary of {}", t, opt.model.name,
                                                opt.model.vocab));
    if (!sample_forward) {
      sample_forward = std::make_unique<core::PlanResult>(core::make_forward_plan(
          graph, opt.hw, core::forward_config(opt.config, planned.plan), 1, core::ForwardBeside::TrainingStates));
      if (const auto broken = core::validate_program(sample_forward->program); !broken.empty())
        throw std::logic_error(invalid_program_message("the planner produced a forward-only Program that breaks its invariants",
                                                       broken));
      sample_executor = std::make_unique<Executor>(sample_forward->program, 0, *backend);
    }
    // The context's last seq tokens at the start of micro-batch 0's first row; the positions after
    // it (zeros) cannot reach back to it through causal attention. Targets are not used.
    const int64_t seq = opt.model.seq, n = std::min<int64_t>(seq, int64_t(context.size()));
    Batch b;
    b.micro_batch = opt.model.micro_batch;
    b.seq = seq;
    b.inputs.assign(size_t(b.micro_batch * seq), 0);
    b.targets.assign(size_t(b.micro_batch * seq), 0);
    std::copy(context.end() - n, context.end(), b.inputs.begin());
    std::vector<Batch> batches{std::move(b)};
    backend->begin_forward(sample_forward->program, std::move(batches), n - 1);
    sample_executor->run_step();
    return backend->kept_logits();
  }

  // Before anything else, every rank compares what it was given: model, config, seeds, where it
  // starts from, and the command line's own fields (steps, zinf's version).
  bool agree_on_inputs() {
    RunFields fields = given_config;
    for (auto& [k, v] : model_fields(opt.model)) fields[k] = v;
    fields["model.name"] = opt.model.name;
    fields["data seed"] = std::to_string(opt.data_seed);
    fields["init seed"] = std::to_string(opt.init_seed);
    fields["init from"] = opt.init_from;
    fields["checkpoint directory"] = opt.checkpoint_dir;
    fields["start"] = opt.start == CheckpointStart::Resume      ? "resume"
                      : opt.start == CheckpointStart::Overwrite ? "overwrite"
                                                                : "fresh";
    fields["backend"] = opt.backend;
    fields["hwprofile"] = opt.hw.name;
    for (const auto& [k, v] : opt.must_agree) fields[k] = v;
    require_agreement(comm, fields, "before planning");
    return true;
  }

  // After planning and loading the data: the same Program (machines with other memory plan other
  // ones) and the same data.
  void agree_on_plan_and_data() {
    std::ostringstream program;
    planned.program.write_json(program);
    const std::string json = program.str();
    require_agreement(comm,
                      {{"plan (the Program, CRC32C of its JSON)", fmt::format("{:08x}", crc32c(json.data(), json.size()))},
                       {"plan placements", fmt::format("params {}, gradients {}, optimizer {}, checkpoints {}",
                                                       core::to_string(planned.plan.params),
                                                       core::to_string(planned.plan.gradients),
                                                       core::to_string(planned.plan.optimizer),
                                                       core::to_string(planned.plan.checkpoints))},
                       {"data", fmt::format("{} tokens (CRC32C of the head {:08x})", data.tokens, data.head_crc32c)},
                       {"lr schedule", core::to_json(schedule).dump()}},
                      "after planning");
  }

  // The graph whose shapes checkpoints, imports and exports have: the whole model's.
  const core::ModelGraph& file_graph() const { return whole_graph ? *whole_graph : graph; }

  // A source of whole-model group tensors as one of this rank's shares (itself without tensor
  // parallelism).
  TrainingBackend::GroupReader this_ranks_share(TrainingBackend::GroupReader whole_groups) const {
    if (!groups.tensor || !whole_groups) return whole_groups;
    return [this, source = std::move(whole_groups)](int32_t g, std::vector<float>& out) {
      std::vector<float> w;
      source(g, w);
      model.shard_group(g, w, out);
    };
  }

  void note(const std::string& text) const {
    if (comm.rank() != 0) return;
    if (opt.note) opt.note(text);
    else fmt::print(stderr, "zinf: {}\n", text);
  }

  // Rank 0 opens and locks the checkpoint directory; every rank learns whether that worked, so a
  // refusal ends the job on all of them with rank 0's reason.
  void open_checkpoint_dir() {
    if (opt.checkpoint_dir.empty()) {
      if (opt.start == CheckpointStart::Resume) throw std::runtime_error("--resume needs --checkpoint-dir");
      return;
    }
    // One directory for two purposes would have the store's files and the checkpoints (and two
    // locks of one run) in one place: refused by name, not as "in use by" this very process. The
    // store's directories are the ranks' rank<r>/; a checkpoint directory beside them is fine.
    bool twice = !opt.nvme_dir.empty() && path_inside(opt.nvme_dir, opt.checkpoint_dir);
    for (int r = 0; r < comm.size() && !opt.nvme_dir.empty() && !twice; ++r)
      twice = path_inside(opt.checkpoint_dir, (fs::path(opt.nvme_dir) / fmt::format("rank{}", r)).string());
    if (twice)
      throw std::runtime_error(fmt::format("--checkpoint-dir {} and --nvme-dir {} name one directory twice (the "
                                           "checkpoints would share a rank's NVMe directory rank<r>/, or hold the NVMe "
                                           "directory): give the checkpoints a directory of their own",
                                           opt.checkpoint_dir, opt.nvme_dir));
    std::string error;
    if (comm.rank() == 0) {
      try {
        checkpoints = std::make_unique<CheckpointDir>(env, opt.checkpoint_dir);
        if (opt.start == CheckpointStart::Fresh && checkpoints->holds_checkpoints()) {
          const std::string latest = latest_checkpoint_name(env, checkpoints->root());
          error = fmt::format("checkpoint directory {} already holds checkpoints of a run{}; pass --resume to "
                              "continue it, --overwrite-checkpoints to start over in it, or another directory",
                              opt.checkpoint_dir, latest.empty() ? " (no `latest`: it stopped before a step confirmed its "
                                                  "newest checkpoint, which --resume verifies and continues from)"
                                                : " (latest: " + latest + ")");
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    double failed = error.empty() ? 0 : 1;
    comm.all_reduce(&failed, 1, "checkpoint directory check");
    if (!error.empty()) throw std::runtime_error(error);
    if (failed > 0) throw std::runtime_error(fmt::format("rank 0 could not use the checkpoint directory {}", opt.checkpoint_dir));
  }

  static std::string invalid_program_message(const std::string& what, const std::vector<std::string>& errors) {
    std::string m = fmt::format("{} ({} problem{}; a bug in zinf, please report it):", what, errors.size(), errors.size() == 1 ? "" : "s");
    for (size_t i = 0; i < errors.size() && i < 5; ++i) m += "\n  " + errors[i];
    return m;
  }

  static models::GptPlan plan_run(TrainerOptions& o, BackendKind kind, int ranks) {
    if (o.config.micro_batch) o.model.micro_batch = *o.config.micro_batch;
    if (o.config.tensor_parallel > 1) {
      // What tensor-parallel training does not do yet, refused by name before anything runs.
      const auto refuse = [&](const std::string& what) {
        throw std::invalid_argument(fmt::format("{}: tensor_parallel {}: {} with tensor parallelism is not "
                                                "supported yet (tensor_parallel 1 does it)",
                                                o.config_source, o.config.tensor_parallel, what));
      };
      if (kind == BackendKind::Cuda) refuse("the CUDA backend");
      if (o.config.partitioning == core::Partitioning::OwnerBased) refuse("owner-based partitioning");
      // On the CPU backend every rank on this machine is one of its "GPUs": a tensor-parallel group
      // must fit in one node, and the ranks mpirun started here are that node's.
      o.hw.node.gpus = std::max(o.hw.node.gpus, ranks_on_this_node(ranks));
    }
    // The CPU backend's kernels keep fp32 activations, gathered parameters and gradients: its plan
    // counts them at that size, whatever working precision the profile gives its device.
    if (kind != BackendKind::Cuda) o.hw.node.gpu.working_bytes = 4;
    if (o.resolve_auto) o.config = o.resolve_auto(o.model, o.hw, ranks, o.config);
    // A plan that cannot be made is refused in the planner's words first (exit 3, as zinf plan and
    // sim say it); a plan that can, with a setting the engine does not train, is refused after it.
    auto planned = models::plan_gpt(o.model, o.hw, o.config, ranks);
    refuse_untrained_settings(o, kind == BackendKind::Cuda);
    return planned;
  }

  StepStats step() {
    if (!loader) throw std::logic_error("step: a Trainer made for sampling has no training data");
    std::vector<Batch> batches;
    for (int mb = 0; mb < planned.program.micro_batches(); ++mb) batches.push_back(loader->next());
    // Adam's bias correction and the schedule count the updates made: DeepSpeed advances neither
    // on a step fp16 skipped.
    const int64_t update = optimizer_steps() + 1;
    const core::StepRates rates = core::rates_at(schedule, update, opt.config.lr, opt.config.beta1, opt.config.beta2);
    backend->set_step_rates(rates);
    backend->begin_step(update, std::move(batches));
    backend->reset_device_peak();
    const auto t0 = std::chrono::steady_clock::now();
    StepStats s;
    s.timeline = executor->run_step();
    // The first step's Timeline against the Program (core::check_timeline: every task ran once,
    // none before its dependencies, lanes within their slots, memory within budget); 1 ms absorbs
    // the clock. The later steps run the same schedule.
    if (steps_done == 0)
      if (const auto check = core::check_timeline(planned.program, s.timeline, 1e-3); !check.ok())
        throw std::logic_error(invalid_program_message("the first step did not follow the Program", check.errors));
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++steps_done;
    s.step = steps_done;
    s.lr = last_lr = rates.lr;
    // One all-reduce: loss, slowest time, squared gradient norm, weights gone non-finite.
    const auto check = backend->local_grad_check();
    double r[4] = {backend->loss(), s.seconds, check ? check->sumsq : 0, check ? double(check->nonfinite) : 0};
    comm.all_reduce(r, 4, "step loss");
    s.loss = r[0] / comm.size();
    const double slowest = r[1] / comm.size();
    s.tokens_per_s = double(graph.tokens) * planned.program.micro_batches() * dp.size() / std::max(slowest, 1e-9);
    s.grad_norm = check ? std::sqrt(r[2]) : backend->grad_norm();
    // Every rank judges the same all-reduced figures, so all stop or go on together; a step fp16
    // skipped for an overflow (every rank saw it in the all-reduced norm) is judged by its loss.
    s.skipped = backend->step_skipped();
    if (scaler) s.loss_scale = scaler->scale();
    if (const std::string broken = s.skipped ? rule.check_skipped(s.loss) : rule.check(s.loss, s.grad_norm, int64_t(r[3]));
        !broken.empty())
      diverged(s.step, broken, s.lr);
    if (scaler) {
      if (const std::string said = scaler->update(s.skipped); !said.empty()) note(fmt::format("step {}: {}", s.step, said));
      backend->set_loss_scale(scaler->scale());
    }
    // This step's loss was computed from the state a pending checkpoint holds: it passed, so that
    // checkpoint is sound and becomes `latest`.
    publish_pending();
    s.peak = executor->peak_bytes();
    s.device_arena_peak = backend->device_peak_bytes();
    return s;
  }

  // Stops the run at step `step`: a checkpoint waiting for this step's confirmation holds the
  // state that produced the bad figures and is set aside; `latest` stays on the last confirmed one.
  [[noreturn]] void diverged(int64_t step, const std::string& broken, double lr) {
    std::string kept = opt.checkpoint_dir.empty() ? "no --checkpoint-dir: nothing saved"
                                                  : "rank 0 says which checkpoint was kept";
    if (!opt.checkpoint_dir.empty()) {
      std::string error;
      if (comm.rank() == 0) {
        try {
          std::string aside;
          if (!pending.empty()) aside = checkpoints->set_aside(pending, "diverged");
          const std::string latest = latest_checkpoint_name(env, checkpoints->root());
          kept = latest.empty() ? "no checkpoint was kept as `latest` (none was confirmed by a step after it); --resume "
                                  "takes the newest whole step directory left there, if any"
                                : fmt::format("the last checkpoint kept is {}/{}, which a step after it confirmed",
                                              opt.checkpoint_dir, latest);
          if (!aside.empty())
            kept += fmt::format("; {} holds the state this step started from and was set aside as {}", pending, aside);
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      pending.clear();
      if (!error.empty()) kept += "; setting the unconfirmed checkpoint aside failed: " + error;
    }
    throw TrainingDiverged(fmt::format(
        "step {}: {}. The run diverged (lr {} too high?) or its data or state is damaged. Stopped without saving this "
        "step; {}",
        step, broken, lr, kept));
  }

  void publish_pending() {
    if (pending.empty()) return;
    const std::string name = std::exchange(pending, std::string());
    std::string error;
    if (comm.rank() == 0) {
      try {
        checkpoints->publish(name);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    double failed = error.empty() ? 0 : 1;
    comm.all_reduce(&failed, 1, "checkpoint published");
    if (!error.empty()) throw std::runtime_error(error);
    if (failed > 0) throw std::runtime_error("rank 0 could not point latest at checkpoint " + name);
  }

  using StateTensor = TrainingBackend::StateTensor;

  // One group's tensor of the state, gathered from every rank (a collective). The CPU backend
  // gathers just that group; a backend with only the whole-state form (CUDA) gathers the whole
  // state into `whole` on first use and serves the groups from it.
  void gather_group(int32_t g, StateTensor which, std::vector<float>& out, std::optional<TrainingBackend::FullState>& whole) {
    if (backend->streams_state()) {
      backend->gather_group(g, which, out);
    } else {
      if (!whole) whole = backend->gather_state();
      const auto& from = which == StateTensor::Master ? whole->master : which == StateTensor::AdamM ? whole->m : whole->v;
      out = from[size_t(g)];
    }
    if (groups.tensor) {  // the group's shares, rank 0's first, then the whole tensor
      std::vector<float> shares(out.size() * size_t(groups.tensor->size()));
      groups.tensor->all_gather(out.data(), out.size() * sizeof(float), shares.data(), graph.params[size_t(g)].name.c_str());
      model.whole_group(g, shares, out);
    }
  }

  // Every rank runs the same sequence of group gathers whether or not its writes succeed (a rank
  // that stopped early would leave the others waiting in a collective): `gathered` counts what
  // rank 0's writer consumed, and finish() gathers the rest for nothing.
  struct GatherSequence {
    Impl& trainer;
    std::vector<std::pair<int32_t, StateTensor>> order;
    size_t gathered = 0;
    std::optional<TrainingBackend::FullState> whole;
    std::vector<float> scratch;

    void next(std::vector<float>& out) {
      const auto [g, which] = order.at(gathered++);
      trainer.gather_group(g, which, out, whole);
    }
    void finish() {
      while (gathered < order.size()) next(scratch);
    }
  };

  GatherSequence gather_sequence(bool moments) {
    GatherSequence seq{*this, {}, 0, std::nullopt, {}};
    for (const auto& pg : graph.params) {
      seq.order.push_back({pg.id, StateTensor::Master});
      if (moments) {
        seq.order.push_back({pg.id, StateTensor::AdamM});
        seq.order.push_back({pg.id, StateTensor::AdamV});
      }
    }
    return seq;
  }

  // Rank 0 writes the state file as the groups are gathered, one group's tensor at a time, so a
  // checkpoint of a model larger than RAM is written from the tiers straight to the file.
  std::string save_checkpoint(bool final) {
    if (!loader) throw std::logic_error("save_checkpoint: a Trainer made for sampling trains nothing to save");
    if (opt.checkpoint_dir.empty()) throw std::runtime_error("no checkpoint directory was given (--checkpoint-dir)");
    const std::string name = fmt::format("step-{:08d}", steps_done);
    publish_pending();  // an older one, never confirmed (two saves without a step between them)
    GatherSequence seq = gather_sequence(true);
    std::string error;
    if (comm.rank() == 0) {
      try {
        std::vector<TensorToWrite> layout;  // in the order the sequence gathers them
        for (const auto& pg : graph.params)
          for (const char* suffix : {"master", "adam_m", "adam_v"})
            layout.push_back({pg.name + "." + suffix, {file_graph().params[size_t(pg.id)].numel}, nullptr});
        nlohmann::json meta = {{"format", "zinf-checkpoint-1"},
                               {"model", {{"name", opt.model.name}, {"layers", opt.model.layers}, {"hidden", opt.model.hidden},
                                          {"heads", opt.model.heads}, {"seq", opt.model.seq}, {"vocab", opt.model.vocab},
                                          {"micro_batch", opt.model.micro_batch}}},
                               {"step", steps_done},
                               // micro-batch slots consumed by all ranks together: resumable on any rank count
                               {"data_position", loader->position() * uint64_t(dp.size())},
                               {"data_seed", opt.data_seed},
                               {"data", data.to_json()},
                               {"config", fields_to_json(given_config)},
                               {"divergence", rule.to_json()},
                               {"ranks", comm.size()},
                               {"tensor_parallel", groups.tensor ? groups.tensor->size() : 1},
                               // The schedule's state: its parameters and the step it reached (the
                               // next step's rate follows from both, as DeepSpeed's
                               // last_batch_iteration does).
                               {"lr_schedule", {{"schedule", core::to_json(schedule)}, {"step", optimizer_steps()},
                                                {"last_lr", last_lr}}},
                               // Which tokens training drew from: all of `data`, or all but a held-out tail.
                               {"held_out", held_out_record()}};
        if (scaler) meta["loss_scaler"] = scaler->to_json();
        const auto write_state = [&](const ByteSink& sink) {
          const std::string header = safetensors_header(layout, TensorDtype::F32);
          sink(header.data(), header.size());
          std::vector<float> tensor;
          while (seq.gathered < seq.order.size()) {
            seq.next(tensor);
            write_tensor_data(sink, tensor.data(), int64_t(tensor.size()), TensorDtype::F32);
          }
        };
        for (const auto& n : checkpoints->save(name, write_state, meta,
                                               final ? CheckpointDir::Latest::Move : CheckpointDir::Latest::Keep))
          note(n);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    seq.finish();
    double failed = error.empty() ? 0 : 1;
    comm.all_reduce(&failed, 1, "checkpoint saved");
    if (!error.empty()) throw std::runtime_error(error);
    if (failed > 0) throw std::runtime_error("rank 0 could not save checkpoint " + name);
    if (!final) pending = name;
    return (fs::path(opt.checkpoint_dir) / name).string();
  }

  // A resumed run continues the schedule from the checkpoint's step. A schedule other than the
  // checkpoint's (a longer run's `auto` length, a new warmup) is the user's choice: said, then used.
  void resume_schedule(const nlohmann::json& meta, const std::string& meta_path) {
    if (!meta.contains("lr_schedule")) return;  // written before schedules: the rate was constant
    const auto& saved = meta["lr_schedule"];
    if (!saved.is_object() || !saved.contains("schedule") || !saved.contains("step") || !saved["step"].is_number_unsigned() ||
        saved["step"].get<int64_t>() != optimizer_steps())
      throw std::runtime_error(fmt::format("checkpoint {}: field 'lr_schedule' must hold the schedule and the step {} "
                                           "it reached",
                                           meta_path, optimizer_steps()));
    if (saved["schedule"] != core::to_json(schedule) && !opt.sampling)  // sampling takes no step
      note(fmt::format("checkpoint {} was trained with lr schedule {}; continuing at step {} with this run's {}", meta_path,
                       saved["schedule"].dump(), steps_done + 1, core::to_json(schedule).dump()));
  }

  nlohmann::json held_out_record() const {
    if (!opt.val_data.empty()) return {{"data", opt.val_data}};
    if (opt.val_fraction > 0) return {{"fraction", opt.val_fraction}};
    return nlohmann::json::object();
  }

  // What the checkpoint recorded against this run: the data seed, the data, the micro-batch and the
  // run config (as given). Each difference is refused, or noted when changes are allowed.
  void compare_with_recorded(const LoadedCheckpoint& c) {
    const auto& meta = c.meta;
    std::vector<std::string> changes;
    if (meta.contains("data_seed") && meta["data_seed"].is_number_unsigned() &&
        meta["data_seed"].get<uint64_t>() != opt.data_seed)
      changes.push_back(fmt::format("data seed (--seed): {} -> {}", meta["data_seed"].get<uint64_t>(), opt.data_seed));
    if (meta.contains("data")) {
      const DataIdentity before = DataIdentity::from_json(meta["data"], c.meta_path);
      if (!before.same_as(data)) changes.push_back(fmt::format("data (--data): {} -> {}", before.describe(), data.describe()));
    }
    const auto& m = meta.contains("model") ? meta["model"] : nlohmann::json();
    if (m.is_object() && m.contains("micro_batch") && m["micro_batch"].is_number_integer() &&
        m["micro_batch"].get<int64_t>() != opt.model.micro_batch)
      changes.push_back(fmt::format("micro_batch: {} -> {}", m["micro_batch"].get<int64_t>(), opt.model.micro_batch));
    if (meta.contains("config"))
      for (auto& d : field_differences(fields_from_json(meta["config"], c.meta_path, "config"), given_config))
        changes.push_back(std::move(d));
    if (changes.empty()) return;
    std::string list;
    for (const auto& ch : changes) list += "\n  " + ch;
    if (!opt.allow_changes)
      throw std::runtime_error(fmt::format("checkpoint {}: this run differs from the one that saved it in {} way{}:{}\n"
                                           "Resume with the same settings, or pass --allow-changes to resume with these",
                                           c.dir, changes.size(), changes.size() == 1 ? "" : "s", list));
    note(fmt::format("resuming {} with {} change{} (--allow-changes):{}", c.dir, changes.size(),
                     changes.size() == 1 ? "" : "s", list));
  }

  void resume() {
    const LoadedCheckpoint c = load_latest_checkpoint(env, opt.checkpoint_dir, opt.accept_unverified);
    const auto& meta = c.meta;
    for (const auto& s : c.skipped) note("passed over a damaged or unverifiable checkpoint: " + s);
    if (!c.confirmed && !opt.sampling) pending = c.name;  // its first step confirms it or sets it aside
    if (!c.confirmed) note(fmt::format("{} has no `latest`: the run that saved {} stopped before a step confirmed it; "
                                       "resuming from it (verified whole)", opt.checkpoint_dir, c.dir));
    // Training data cut differently (a held-out tail added, dropped or resized) changes the windows the
    // loader deals from the checkpoint's position on: said, then used.
    if (meta.contains("held_out") && meta["held_out"] != held_out_record() && !opt.sampling)  // sampling trains on nothing
      note(fmt::format("checkpoint {} was trained with held-out split {}; this run's is {}, so the training windows "
                       "from here on are cut from different tokens",
                       c.meta_path, meta["held_out"].dump(), held_out_record().dump()));
    for (auto [key, want] : {std::pair{"layers", opt.model.layers}, {"hidden", opt.model.hidden}, {"heads", opt.model.heads},
                             {"seq", opt.model.seq}, {"vocab", opt.model.vocab}}) {
      const int64_t got = meta.contains("model") && meta["model"].is_object() && meta["model"].contains(key) &&
                                  meta["model"][key].is_number_integer()
                              ? meta["model"][key].get<int64_t>()
                              : -1;
      if (got != want)
        throw std::runtime_error(fmt::format("checkpoint {}: field 'model.{}' is {}, but model {} has {}", c.meta_path,
                                             key, got, opt.model.name, want));
    }
    for (const char* key : {"step", "data_position"})
      if (!meta.contains(key) || !meta[key].is_number_unsigned())
        throw std::runtime_error(fmt::format("checkpoint {}: field '{}' must be a non-negative integer", c.meta_path, key));
    if (!c.verified)
      note(fmt::format("checkpoint {} has no checksums: loaded unverified (--accept-unverified); its step, data position "
                       "and state are taken as they are",
                       c.dir));
    if (meta["step"].get<uint64_t>() > 99'999'999)
      throw std::runtime_error(fmt::format("checkpoint {}: field 'step' is above 99999999", c.meta_path));
    if (!opt.sampling) compare_with_recorded(c);  // sampling continues no training: nothing to compare
    if (meta.contains("divergence")) rule.from_json(meta["divergence"], c.meta_path);
    // Group by group from the file into the tiers, each tensor checked before it is used.
    SafetensorsReader reader(c.state_path);
    const auto from_file = [&](const std::string& suffix, bool non_negative) -> TrainingBackend::GroupReader {
      return [this, &reader, &c, suffix, non_negative](int32_t g, std::vector<float>& out) {
        const std::string tensor = graph.params[size_t(g)].name + "." + suffix;
        reader.read_f32(tensor, out);
        check_finite(out, tensor, c.state_path, non_negative);
      };
    };
    const auto master = this_ranks_share(from_file("master", false)), m = this_ranks_share(from_file("adam_m", false)),
               v = this_ranks_share(from_file("adam_v", true));
    if (backend->streams_state()) {
      backend->load_state(master, m, v);
    } else {  // a backend that loads the whole state at once
      TrainingBackend::FullState state;
      for (const auto& pg : graph.params) {
        for (auto [read, into] : {std::pair{&master, &state.master}, {&m, &state.m}, {&v, &state.v}}) {
          into->emplace_back();
          (*read)(pg.id, into->back());
        }
      }
      backend->load_state(state);
    }
    steps_done = meta["step"].get<int64_t>();
    resume_loss_scaler(scaler, meta, c.meta_path);
    if (scaler) backend->set_loss_scale(scaler->scale());
    resume_schedule(meta, c.meta_path);
    // Slots consumed by all ranks together; rank r of N continues at slot position/N (its loader
    // maps its own position q to slot q·N + r, so the ranks together resume where the run stopped).
    const uint64_t slots = meta["data_position"].get<uint64_t>();
    if (slots % uint64_t(dp.size()) != 0)
      throw std::runtime_error(fmt::format("checkpoint {}: field 'data_position' ({}) is not a multiple of {} "
                                           "data-parallel ranks",
                                           c.meta_path, slots, dp.size()));
    if (loader) loader->seek(slots / uint64_t(dp.size()));  // sampling reads no data
  }
};

uint64_t staging_budget_bytes(const core::Program& program, const core::Plan& plan, bool device_in_host, int rank) {
  const auto& homes = program.static_bytes(rank);
  double bytes = plan.peak_bytes[size_t(core::Tier::Host)] - homes[size_t(core::Tier::Host)];
  if (device_in_host) bytes += plan.peak_bytes[size_t(core::Tier::Device)] - homes[size_t(core::Tier::Device)];
  return uint64_t(std::max(0.0, bytes));
}

Trainer::Trainer(TrainerOptions options, Collectives& comm) : impl_(std::make_unique<Impl>(std::move(options), comm)) {}
Trainer::~Trainer() = default;
const core::Plan& Trainer::plan() const { return impl_->planned.plan; }
const core::Program& Trainer::program() const { return impl_->planned.program; }
int64_t Trainer::step_count() const { return impl_->steps_done; }
int64_t Trainer::skipped_steps() const { return impl_->scaler ? impl_->scaler->skipped() : 0; }
bool Trainer::scales_loss() const { return impl_->scaler.has_value(); }
const char* Trainer::backend() const { return to_string(impl_->kind); }
double Trainer::rss_before_homes() const { return impl_->rss_before_homes; }
const core::LrSchedule& Trainer::lr_schedule() const { return impl_->schedule; }
StepStats Trainer::step() { return impl_->step(); }
bool Trainer::evaluates() const { return impl_->evaluator != nullptr; }
const core::Program* Trainer::eval_program() const {
  return impl_->evaluator ? &impl_->evaluator->forward().program : nullptr;
}
std::vector<float> Trainer::next_token_logits(const std::vector<int32_t>& context) {
  return impl_->next_token_logits(context);
}
EvalStats Trainer::evaluate() {
  Impl& I = *impl_;
  if (!I.evaluator) throw std::logic_error("evaluate: the run has no held-out split (val_data or val_fraction)");
  return I.evaluator->evaluate(I.comm, I.groups.tensor ? I.groups.tensor->size() : 1, I.steps_done);
}
std::string Trainer::save_checkpoint(bool final) { return impl_->save_checkpoint(final); }
void Trainer::publish_pending() { impl_->publish_pending(); }
bool Trainer::any_rank(bool mine) {
  double v = mine ? 1 : 0;
  impl_->comm.all_reduce(&v, 1, "stop request");
  return v > 0;
}

void Trainer::export_weights(const ExportTarget& target) {
  const std::string& path = target.path;
  Impl& I = *impl_;
  auto seq = I.gather_sequence(false);
  std::string error;
  if (I.comm.rank() == 0) {
    try {
      save_gpt2_export(target, I.file_graph(), [&seq](int32_t, std::vector<float>& out) { seq.next(out); });
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  seq.finish();
  double failed = error.empty() ? 0 : 1;
  I.comm.all_reduce(&failed, 1, "export");
  if (!error.empty()) throw std::runtime_error(error);
  if (failed > 0) throw std::runtime_error("rank 0 could not export " + path);
}

void size_for_this_machine(TrainerOptions& o, double device_gib, double host_gib) {
  constexpr double GiB = double(1ull << 30);
  if (device_gib > 0) o.hw.node.gpu.memory = device_gib * GiB;
  if (host_gib > 0) {
    o.hw.node.host_memory = host_gib * GiB;
  } else if (o.hw.node.device_shares_host_cores) {
    const double machine = this_machine("").memory;
    if (machine > 0 && machine < o.hw.node.host_memory) o.hw.node.host_memory = machine;
  }
}

}  // namespace zinf::engine
