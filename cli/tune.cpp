// `zinf tune`: searches run configurations for a model on a cluster (tune/tuner.hpp), prints the
// simulated finalists ranked with the lane that bounds each, and writes the best as a zinf run
// config (YAML) and as a DeepSpeed JSON config.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "cli/inputs.hpp"
#include "cli/stop_signals.hpp"
#include "formats/bounded_input.hpp"
#include "formats/deepspeed_config.hpp"
#include "formats/hjson.hpp"
#include "core/units.hpp"
#include "tune/auto_config.hpp"
#include "tune/tuner.hpp"
#include "engine/io/output_file.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::cli {
namespace {

using namespace zinf::core;

struct TuneCliOptions {
  std::string objective = "throughput";
  double time_limit = 0;
  int64_t global_batch = 0;
  int plan_budget = 32;
  int finalists = 4;
  int jobs = 2;
  bool json = false;
  std::string yaml_out = "tuned.yaml";
  std::string deepspeed_out = "tuned.deepspeed.json";
  std::string nvme_dir;  // nvme_path of the DeepSpeed config
};

// A progress bar on stderr when it is a terminal, one line per stage.
class TuneProgressBar {
public:
  TuneProgressBar() : tty_(::isatty(STDERR_FILENO) != 0) {}
  void update(const std::string& stage, size_t done, size_t total) {
    if (!tty_) return;
    if (stage != stage_ && !stage_.empty()) fmt::print(stderr, "\n");
    stage_ = stage;
    const int width = 30;
    const int filled = total ? static_cast<int>(width * std::min(done, total) / total) : width;
    fmt::print(stderr, "\r{:<9}[{}{}] {}/{}  {:.1f} s ", stage, std::string(static_cast<size_t>(filled), '#'),
               std::string(static_cast<size_t>(width - filled), ' '), done, total,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  void finish() {
    if (tty_ && !stage_.empty()) fmt::print(stderr, "\n");
  }

private:
  bool tty_;
  std::string stage_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

std::pair<std::string, double> bottleneck(const tune::TuneEntry& e) {
  if (e.simulated && e.simulated->ok && !e.simulated->busy.empty()) {
    auto it = std::max_element(e.simulated->busy.begin(), e.simulated->busy.end(),
                               [](const auto& a, const auto& b) { return a.second < b.second; });
    return *it;
  }
  return {e.estimate.bottleneck + " (estimated)", -1};
}

// The knobs on which two candidates differ, as "optimizer host (nvme)".
std::string differences(const tune::TuneCandidate& a, const tune::TuneCandidate& b) {
  std::vector<std::string> d;
  const RunConfig &x = a.config, &y = b.config;
  auto add = [&](const char* what, const std::string& u, const std::string& v) {
    if (u != v) d.push_back(fmt::format("{} {} (not {})", what, u, v));
  };
  add("nodes", std::to_string(a.nodes), std::to_string(b.nodes));
  add("tensor parallel", std::to_string(x.tensor_parallel), std::to_string(y.tensor_parallel));
  add("expert parallel", std::to_string(x.expert_parallel), std::to_string(y.expert_parallel));
  add("params", to_string(x.params.tier), to_string(y.params.tier));
  add("optimizer", to_string(x.optimizer.tier), to_string(y.optimizer.tier));
  auto ckpt = [](const RunConfig& c) {
    return c.checkpoint_interval > 0 ? fmt::format("{}/{}", to_string(c.checkpoints.tier), c.checkpoint_interval)
                                     : std::string("off");
  };
  add("checkpoints", ckpt(x), ckpt(y));
  add("tiling", std::to_string(x.tiling_factor), std::to_string(y.tiling_factor));
  add("mb x ga", fmt::format("{}x{}", x.micro_batch.value_or(0), x.gradient_accumulation),
      fmt::format("{}x{}", y.micro_batch.value_or(0), y.gradient_accumulation));
  add("prefetch",
      fmt::format("{}/{}/{}", x.nvme_prefetch_distance, x.h2d_prefetch_distance, x.allgather_prefetch_distance),
      fmt::format("{}/{}/{}", y.nvme_prefetch_distance, y.h2d_prefetch_distance, y.allgather_prefetch_distance));
  add("live", format_bytes(x.max_live_bytes), format_bytes(y.max_live_bytes));
  add("sub-group", format_count(double(x.sub_group_size)), format_count(double(y.sub_group_size)));
  add("optimizer timing", x.optimizer_timing == OptimizerTiming::OverlapBackward ? "overlap" : "after",
      y.optimizer_timing == OptimizerTiming::OverlapBackward ? "overlap" : "after");
  add("partitioning", x.partitioning == Partitioning::OwnerBased ? "owner" : "bandwidth",
      y.partitioning == Partitioning::OwnerBased ? "owner" : "bandwidth");
  if (d.empty()) return "nothing";
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) out += (i ? ", " : "") + d[i];
  return out;
}

void write_text(const std::string& path, const std::string& flag, const std::string& text) {
  engine::write_output_file(engine::default_io_env(), path, text, "zinf tune " + flag);
}

// The DeepSpeed config tune writes: the best finalist DeepSpeed expresses exactly (its file reads
// back to the same RunConfig), or else what DeepSpeed makes of the best one, simulated itself, so
// that the file read back simulates as the figure printed for it.
struct DeepSpeedOutput {
  std::string json;
  std::vector<std::string> not_expressed;  // of the best finalist, when it is not the one written
  int finalist = -1;                       // index of the finalist written, -1: a projection
  int projected_from = -1;                 // which finalist's projection was written
  double samples_per_s = 0, step_time = 0;
};

DeepSpeedOutput deepspeed_output(const Inputs& in, const TuneCliOptions& o, const tune::TuneReport& rep,
                                 const tune::TuneEvaluators& eval) {
  nlohmann::ordered_json base;
  if (in.deepspeed) {
    base = parse_hjson(read_bounded_file(in.config_path, kMaxConfigBytes, "run config"), in.config_path);
  }
  const Precision precision = in.config.precision.value_or(native_precision(in.hw.node.gpu));
  auto write = [&](const tune::TuneCandidate& cand, std::vector<std::string>& missing, RunConfig& read_back) {
    DeepSpeedTarget t;
    t.ranks = cand.nodes * in.hw.node.gpus;
    t.model_micro_batch = in.model.micro_batch;
    t.model_hidden = in.model.hidden;
    t.precision = precision;
    t.nvme_path = o.nvme_dir;
    t.base = in.deepspeed ? &base : nullptr;
    const std::string json = run_config_to_deepspeed_json(cand.config, t, missing);
    read_back = read_deepspeed_config(json, o.deepspeed_out, deepspeed_context(in.model, in.hw, cand.nodes)).config;
    return json;
  };
  DeepSpeedOutput out;
  for (size_t i = 0; i < rep.finalists.size(); ++i) {
    const auto& e = rep.finalists[i];
    if (!e.simulated || !e.simulated->ok) continue;
    std::vector<std::string> missing;
    RunConfig back;
    const std::string json = write(e.candidate, missing, back);
    const auto diff = deepspeed_round_trip(e.candidate.config, back, precision);
    if (i == 0) out.not_expressed = missing.empty() ? diff : missing;
    if (!diff.empty()) continue;
    out.json = json;
    out.finalist = static_cast<int>(i);
    out.samples_per_s = e.samples_per_s;
    out.step_time = e.simulated->step_time;
    return out;
  }
  // No finalist is expressible: DeepSpeed's reading of each, simulated, and the fastest that runs.
  // The best's reading alone may not fit (its tiling or checkpoint placement, which DeepSpeed
  // cannot say, is what made it fit): then a later finalist's reading is the config to write.
  std::vector<tune::TuneCandidate> projected;
  std::vector<std::string> jsons;
  std::vector<size_t> from;
  for (size_t i = 0; i < rep.finalists.size(); ++i) {
    const auto& e = rep.finalists[i];
    if (!e.simulated || !e.simulated->ok) continue;
    std::vector<std::string> missing;
    RunConfig back;
    write(e.candidate, missing, back);
    projected.push_back({back, e.candidate.nodes});
    jsons.push_back(write(projected.back(), missing, back));
    from.push_back(i);
  }
  const auto sims = eval.simulate(projected);
  std::string why = "no result";
  for (size_t k = 0; k < sims.size() && k < projected.size(); ++k) {
    if (!sims[k].ok) {
      if (k == 0) why = sims[k].message;
      continue;
    }
    const double rate = double(rep.global_batch) / sims[k].step_time;
    if (out.projected_from >= 0 && rate <= out.samples_per_s) continue;
    out.json = jsons[k];
    out.projected_from = int(from[k]);
    out.step_time = sims[k].step_time;
    out.samples_per_s = rate;
  }
  if (out.projected_from < 0)
    throw std::runtime_error("DeepSpeed's reading of no finalist fits (of the best: " + why + ")");
  return out;
}

// What tune wrote, and for the DeepSpeed config which finalist it is and what it could not say.
void print_written(const TuneCliOptions& o, const DeepSpeedOutput& ds, const std::string& ds_error) {
  if (!o.yaml_out.empty()) fmt::print("\nwrote {} (zinf run config)\n", o.yaml_out);
  if (!o.deepspeed_out.empty() && !ds_error.empty()) {
    fmt::print("did not write {}: {}\n", o.deepspeed_out, ds_error);
  } else if (!o.deepspeed_out.empty()) {
    if (ds.finalist >= 0)
      fmt::print("wrote {} (DeepSpeed {} config of #{}: predicted {:.4g} samples/s, step {})\n", o.deepspeed_out,
                 kDeepSpeedVersion, ds.finalist + 1, ds.samples_per_s, format_seconds(ds.step_time));
    else
      fmt::print("wrote {} (DeepSpeed {} config of what DeepSpeed can express of #{}, simulated: predicted {:.4g} "
                 "samples/s, step {})\n",
                 o.deepspeed_out, kDeepSpeedVersion, ds.projected_from + 1, ds.samples_per_s, format_seconds(ds.step_time));
    if (ds.finalist != 0 && !ds.not_expressed.empty()) {
      fmt::print("  #1 is not expressible in DeepSpeed: ");
      for (size_t i = 0; i < ds.not_expressed.size(); ++i) fmt::print("{}{}", i ? "; " : "", ds.not_expressed[i]);
      fmt::print("\n");
    }
  }
}

// The finalists ranked, each with the lane that bounds it and why it ranks where it does.
void print_report(const Inputs& in, const InputOptions& in_opts, const TuneCliOptions& o, const tune::TuneRequest& req,
                  const tune::TuneReport& rep) {
  fmt::print("zinf tune: {} on {} x {} node(s) = {} GPUs ({}), global batch {}, objective {}\n", in.model.name,
             in.hw.name, in_opts.nodes, in_opts.nodes * in.hw.node.gpus, in.hw.node.gpu.name, rep.global_batch,
             o.objective == "cost" ? "cost (GPU-seconds per sample)" : "throughput");
  fmt::print("base config: {}\n", in.config_name);
  fmt::print("searched {} configurations: {} fit the memory model, {} planned ({} refused by the planner), {} simulated\n",
             rep.enumerated, rep.memory_fit, rep.plans, rep.plans_refused, rep.simulations);
  fmt::print("time: {:.1f} s (enumerate and estimate {:.2f} s, plan {:.1f} s, simulate {:.1f} s){}\n", rep.seconds_total,
             rep.seconds_enumerate, rep.seconds_plan, rep.seconds_simulate,
             rep.time_limited ? fmt::format("; cut short by --time-limit {} s", o.time_limit) : "");
  fmt::print("not searched: ");
  for (size_t i = 0; i < rep.not_searched.size(); ++i) fmt::print("{}{}", i ? "; " : "", rep.not_searched[i]);
  fmt::print("\n\n");

  const bool cost = req.objective == tune::TuneObjective::Cost;
  fmt::print("{:<3}{}{:>11}{:>9}{:>10}{:>4}  {:<7}{:<7}{:<10}{:>7}{:>8}  {:<9}{:>9}{:>9}  {:<8}{:<20}\n", "#",
             cost ? fmt::format("{:>6}{:>12}", "nodes", "GPU-s/smpl") : "", "samples/s", "TFLOP/s", "step", "tp", "params",
             "optim", "ckpt", "tiling", "mb x ga", "prefetch", "live", "sub-grp", "optim", "busiest lane");
  for (size_t i = 0; i < rep.finalists.size(); ++i) {
    const auto& e = rep.finalists[i];
    const auto& c = e.candidate.config;
    const bool ok = e.simulated && e.simulated->ok;
    const auto [lane, busy] = bottleneck(e);
    fmt::print("{:<3}{}{:>11}{:>9}{:>10}{:>4}  {:<7}{:<7}{:<10}{:>7}{:>8}  {:<9}{:>9}{:>9}  {:<8}{:<20}\n", i + 1,
               cost ? fmt::format("{:>6}{:>12}", e.candidate.nodes, ok ? fmt::format("{:.4g}", e.score) : "-") : "",
               ok ? fmt::format("{:.4g}", e.samples_per_s) : "failed",
               ok ? fmt::format("{:.1f}", e.simulated->tflops_per_gpu) : "-",
               ok ? format_seconds(e.simulated->step_time) : "-", c.tensor_parallel, to_string(c.params.tier),
               to_string(c.optimizer.tier),
               c.checkpoint_interval > 0 ? fmt::format("{}/{}", to_string(c.checkpoints.tier), c.checkpoint_interval)
                                         : "off",
               c.tiling_factor, fmt::format("{}x{}", c.micro_batch.value_or(0), c.gradient_accumulation),
               fmt::format("{}/{}/{}", c.nvme_prefetch_distance, c.h2d_prefetch_distance, c.allgather_prefetch_distance),
               format_bytes(c.max_live_bytes), format_count(double(c.sub_group_size)),
               c.optimizer_timing == OptimizerTiming::OverlapBackward ? "overlap" : "after",
               busy >= 0 ? fmt::format("{} {:.0f}%", lane, 100 * busy) : lane);
  }
  fmt::print("\nwhy:\n");
  for (size_t i = 0; i < rep.finalists.size(); ++i) {
    const auto& e = rep.finalists[i];
    if (!e.simulated || !e.simulated->ok) {
      fmt::print("  #{}: simulation failed: {}\n", i + 1, e.simulated ? e.simulated->message : "not run");
      continue;
    }
    const auto [lane, busy] = bottleneck(e);
    std::string line = fmt::format("  #{}: busiest lane {} ({:.0f}% of the step)", i + 1, lane, 100 * busy);
    if (e.found_by.rfind("closed form", 0) != 0 && e.found_by.rfind("local search", 0) != 0) line += fmt::format(" [{}]", e.found_by);
    if (i + 1 < rep.finalists.size() && rep.finalists[i + 1].simulated && rep.finalists[i + 1].simulated->ok) {
      const auto& n = rep.finalists[i + 1];
      const auto [nlane, nbusy] = bottleneck(n);
      line += fmt::format("; {:.1f}% {} #{}, which has {} and whose busiest lane is {} ({:.0f}%)",
                          100 * (n.score / e.score - 1), cost ? "cheaper per sample than" : "ahead of", i + 2,
                          differences(n.candidate, e.candidate), nlane, 100 * nbusy);
    }
    line += fmt::format("; found by {}", e.found_by);
    fmt::print("{}\n", line);
  }
}

void run_tune(const InputOptions& in_opts, const TuneCliOptions& o) {
  check_output("tune", "--yaml", o.yaml_out);
  check_output("tune", "--deepspeed", o.deepspeed_out);
  stop_at_once_on_signals("zinf tune", "nothing written");
  Inputs in = load_inputs(in_opts, /*for_tune=*/true);
  tune::TuneRequest req;
  req.model = in.model;
  req.hw = in.hw;
  req.nodes = in_opts.nodes;
  req.base = in.config;
  req.global_batch = o.global_batch;
  req.objective = o.objective == "cost" ? tune::TuneObjective::Cost : tune::TuneObjective::Throughput;
  req.time_limit = o.time_limit;
  req.plan_budget = o.plan_budget;
  req.finalists = o.finalists;
  // What plan, sim and train run for the base config (its `auto` resolved as they resolve it), and
  // the whole activation choices it leaves open: simulated beside the finalists, so that the pick
  // is never slower than what plan chose.
  const tune::AutoResolution as_planned = tune::resolve_auto(in.model, in.hw, in_opts.nodes, in.config);
  req.incumbents.push_back({"the base config, as zinf plan resolves it", as_planned.config});
  const auto alternatives = tune::activation_alternatives(as_planned.config, in.hw);
  for (size_t i = 1; i < alternatives.size(); ++i) req.incumbents.push_back(alternatives[i]);

  TuneProgressBar bar;
  const tune::TuneEvaluators eval = tune::isolated_evaluators(in.model, in.hw, o.jobs);
  const tune::TuneReport rep = tune::tune(req, eval,
                                        [&](const std::string& stage, size_t done, size_t total) {
                                          bar.update(stage, done, total);
                                        });
  bar.finish();
  if (rep.finalists.empty() || !rep.finalists.front().simulated || !rep.finalists.front().simulated->ok)
    throw std::runtime_error("no finalist could be simulated: " +
                             (rep.finalists.empty() ? std::string("none") : rep.finalists.front().simulated->message));
  const tune::TuneEntry& best = rep.finalists.front();

  const std::string description =
      fmt::format("zinf tune: {} on {} x {} node(s), global batch {}, objective {}: predicted {:.3g} samples/s, "
                  "{:.1f} TFLOP/s per GPU",
                  in.model.name, in.hw.name, best.candidate.nodes, rep.global_batch, o.objective, best.samples_per_s,
                  best.simulated->tflops_per_gpu);
  // Both outputs are made before either is written; one that cannot be made is said beside the
  // report, never in place of it.
  DeepSpeedOutput ds;
  std::string ds_error;
  if (!o.deepspeed_out.empty()) {
    try {
      ds = deepspeed_output(in, o, rep, eval);
    } catch (const std::exception& e) {
      ds_error = e.what();
    }
  }
  {
    StopDeferred hold;  // a signal now waits for the files: none is left half written
    if (!o.yaml_out.empty()) write_text(o.yaml_out, "--yaml", run_config_to_yaml(best.candidate.config, description));
    // The run config is on disk by now: a DeepSpeed config that cannot be written (a full disk) is
    // said beside the report, with the file that was written, like one that cannot be made.
    if (!o.deepspeed_out.empty() && ds_error.empty()) {
      try {
        write_text(o.deepspeed_out, "--deepspeed", ds.json);
      } catch (const std::exception& e) {
        ds_error = e.what();
      }
    }
    set_stop_leaves("the configs are written, the report is not printed");
  }
  const auto fail_if_partial = [&] {
    if (ds_error.empty()) return;
    throw ExitCode{1, fmt::format("zinf tune: error: the DeepSpeed config {} was not written: {}{}", o.deepspeed_out,
                                  ds_error,
                                  o.yaml_out.empty() ? std::string()
                                                     : fmt::format(" ({} holds the best as a zinf run config)", o.yaml_out))};
  };

  if (o.json) {
    std::cout << tune::tune_report_json(req, rep) << "\n";
    return fail_if_partial();
  }

  print_report(in, in_opts, o, req, rep);
  if (best.candidate.nodes != in_opts.nodes) fmt::print("\nthe best runs on {} node(s) (objective cost)\n", best.candidate.nodes);
  print_written(o, ds, ds_error);
  fail_if_partial();
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tune", "Search run configurations (memory model, closed form, planner, simulator) and write the best");
  auto in = std::make_shared<InputOptions>();
  auto o = std::make_shared<TuneCliOptions>();
  add_input_options(*cmd, *in);
  cmd->add_option("--objective", o->objective, "throughput (samples/s) | cost (GPU-seconds per sample, up to --nodes)")
      ->check(CLI::IsMember({"throughput", "cost"}))
      ->capture_default_str();
  cmd->add_option("--time-limit", o->time_limit, "Seconds for the whole search (0: no limit)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--global-batch", o->global_batch,
                  "Sequences per step (default: ranks x the base config's micro-batch x its accumulation)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--plan-budget", o->plan_budget, "Candidates planned before the local search")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--finalists", o->finalists, "Candidates simulated")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--jobs,-j", o->jobs, "Plans and simulations at once, each in its own process")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the report as JSON (every planned candidate, for analysis/tune_report.py)");
  cmd->add_option("--yaml", o->yaml_out, "Write the best as a zinf run config here ('' to skip)")->capture_default_str();
  cmd->add_option("--deepspeed", o->deepspeed_out,
                  "Write the best finalist DeepSpeed can express as a DeepSpeed config here ('' to skip)")
      ->capture_default_str();
  cmd->add_option("--nvme-dir", o->nvme_dir, "nvme_path for states the DeepSpeed config offloads to NVMe");
  cmd->callback([in, o] { run_tune(*in, *o); });
}

}  // namespace zinf::cli
