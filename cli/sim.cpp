// `zinf sim`: plan one training step and run its Program on SimGrid against a hardware profile;
// print step time, throughput, busy fraction of each resource and peak memory per tier, and write
// the Timeline (CSV) and a Chrome trace.
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "cli/inputs.hpp"
#include "engine/io/output_file.hpp"
#include "core/units.hpp"
#include "tune/scenario.hpp"

namespace zinf::cli {
namespace {

using namespace zinf::core;

struct SimCliOptions {
  std::string collective = "hierarchical";
  std::string timeline_csv;
  std::string chrome_trace;
  std::string timeline_ranks = "0";
  bool json = false;
  bool no_fold = false;
  uint64_t seed = 0;
  int seeds = 0;
  int jobs = 1;
};

std::vector<int> parse_ranks(const std::string& text, bool& all) {
  all = text == "all";
  std::vector<int> out;
  if (all || text.empty() || text == "none") return out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string part = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    try {
      out.push_back(std::stoi(part));
    } catch (const std::exception&) {
      throw CLI::ValidationError("--timeline-ranks", "expected 'all', 'none' or a comma-separated list of ranks");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void write_file(const std::string& path, const std::string& flag, const std::function<void(std::ostream&)>& write) {
  engine::OutputFile out(engine::default_io_env(), path, "zinf sim " + flag);
  write(out.stream());
  out.commit();
}

void run_sim(const InputOptions& in_opts, const SimCliOptions& o) {
  check_output("sim", "--timeline", o.timeline_csv);
  check_output("sim", "--trace", o.chrome_trace);
  Inputs in = load_inputs(in_opts);
  sim::SimOptions opts;
  opts.algorithm = sim::parse_collective_algorithm(o.collective);
  opts.timeline_ranks = parse_ranks(o.timeline_ranks, opts.timeline_all_ranks);
  opts.fold_symmetric_nodes = !o.no_fold;
  opts.seed = o.seed;
  if (o.seeds > 0 && (!o.timeline_csv.empty() || !o.chrome_trace.empty()))
    throw CLI::ValidationError("--seeds", "writes no Timeline: simulate one seed (--seed S) with --timeline or --trace");
  tune::ScenarioResult res = tune::run_scenario({in.model, in.hw, in.config, in_opts.nodes}, opts, o.seeds, o.jobs);
  const auto& r = res.report;

  if (!o.timeline_csv.empty()) write_file(o.timeline_csv, "--timeline", [&](std::ostream& f) { r.timeline.write_csv(f); });
  if (!o.chrome_trace.empty()) write_file(o.chrome_trace, "--trace", [&](std::ostream& f) { r.timeline.write_chrome_trace(f); });

  if (o.json) {
    auto j = nlohmann::json::parse(sim::report_to_json(r));
    j["model"] = in.model.name;
    j["hwprofile"] = in.hw.name;
    j["gpus_per_node"] = in.hw.node.gpus;
    j["config"] = in.config_name;
    j["collective"] = o.collective;
    j["ideal_step_time"] = res.ideal_step_time;
    j["program_tasks"] = res.program_tasks;
    j["wall_seconds"] = {{"plan", res.plan_seconds}, {"auto", res.auto_seconds}, {"simulate", res.simulate_seconds}};
    if (!res.auto_summary.empty()) j["auto"] = res.auto_summary;
    j["seed"] = o.seeds > 0 ? nlohmann::json(nullptr) : nlohmann::json(o.seed);
    if (o.seeds > 0) {
      const auto& b = res.band;
      j["band"] = {{"seeds", b.seeds.size()},
                   {"step_time", {{"p10", b.step_p10}, {"median", b.step_median}, {"p90", b.step_p90}}},
                   {"tflops_per_gpu", {{"p10", b.tflops_p10}, {"median", b.tflops_median}, {"p90", b.tflops_p90}}},
                   {"per_seed", {{"step_time", b.step_time}, {"tflops_per_gpu", b.tflops_per_gpu}, {"slowest_gpu", b.slowest_gpu}}}};
    }
    std::cout << j.dump(2) << "\n";
    return;
  }

  fmt::print("zinf sim: {} on {} x {} node(s) = {} GPUs ({}), config {}\n", in.model.name, in.hw.name, r.nodes, r.ranks,
             in.hw.node.gpu.name, in.config_name);
  fmt::print("plan: params {} | gradients {} | optimizer {} | checkpoints {} | tiling {} | {} micro-batch(es)\n",
             to_string(res.plan.params), to_string(res.plan.gradients), to_string(res.plan.optimizer),
             to_string(res.plan.checkpoints), res.plan.tiling_factor, res.plan.micro_batches);
  if (!res.auto_summary.empty()) fmt::print("{}\n", res.auto_summary);
  fmt::print("collectives: {}{}\n", o.collective,
             r.folded ? "; identical nodes folded: node 0's ranks simulated, the others mirrored (--no-fold: all)" : "");
  if (in.hw.fabric.is_tree())
    fmt::print("fabric: fat tree ({} placement), every node simulated\n", in.hw.fabric.placement);
  if (in.hw.node.gpu.has_variability())
    fmt::print("GPU variability: {}\n",
               o.seeds > 0 ? fmt::format("{} seeds; the median seed's run below", o.seeds)
               : o.seed > 0 ? fmt::format("ranks drawn from seed {}; slowest GPU {:.3f}x the median", o.seed, r.slowest_gpu)
                            : fmt::format("every rank at the expected slowest of {} GPUs, {:.3f}x the median (--seeds K: a band)",
                                          r.ranks, r.slowest_gpu));
  fmt::print("\n");
  if (o.seeds > 0) {
    const auto& b = res.band;
    fmt::print("over {} seeds      step time p10 {} | median {} | p90 {}\n", b.seeds.size(), format_seconds(b.step_p10),
               format_seconds(b.step_median), format_seconds(b.step_p90));
    fmt::print("                   TFLOP/s per GPU p10 {:.1f} | median {:.1f} | p90 {:.1f}\n\n", b.tflops_p10,
               b.tflops_median, b.tflops_p90);
  }
  fmt::print("step time          {}   (idealized list schedule: {}, {:+.1f}%)\n", format_seconds(r.step_time),
             format_seconds(res.ideal_step_time),
             res.ideal_step_time > 0 ? 100.0 * (r.step_time / res.ideal_step_time - 1) : 0.0);
  fmt::print("samples/s          {:.2f}\n", r.samples_per_s);
  fmt::print("TFLOP/s per GPU    {:.1f}  ({:.1f}% of {} peak)\n\n", r.tflops_per_gpu, 100.0 * r.fraction_of_peak,
             format_flops(in.hw.node.gpu.peak_flops));
  fmt::print("busy fraction of the step\n");
  for (const auto& b : r.busy) fmt::print("  {:<12}{:6.1f}%\n", b.resource, 100.0 * b.busy);
  fmt::print("\npeak memory        device / GPU {}   host / node {}   NVMe / node {}   ({})\n",
             format_bytes(r.peak_device_per_gpu), format_bytes(r.peak_host_per_node), format_bytes(r.peak_nvme_per_node),
             r.within_budget ? "within budget" : "OVER BUDGET");
  fmt::print("simulated {} tasks ({} per rank) with {} activities in {} (planning {})\n", r.tasks_run, res.program_tasks,
             r.activities, format_seconds(res.simulate_seconds), format_seconds(res.plan_seconds));
  if (!o.timeline_csv.empty()) fmt::print("timeline: {}\n", o.timeline_csv);
  if (!o.chrome_trace.empty()) fmt::print("chrome trace: {}\n", o.chrome_trace);
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sim", "Simulate one training step on SimGrid against a hardware profile");
  auto in = std::make_shared<InputOptions>();
  auto o = std::make_shared<SimCliOptions>();
  add_input_options(*cmd, *in);
  cmd->add_option("--collective", o->collective, "Collective algorithm: hierarchical | ring")
      ->check(CLI::IsMember({"hierarchical", "ring"}))
      ->capture_default_str();
  cmd->add_option("--timeline", o->timeline_csv, "Write the Timeline as CSV to this path");
  cmd->add_option("--trace", o->chrome_trace, "Write the Timeline as a Chrome trace (Perfetto) to this path");
  cmd->add_option("--timeline-ranks", o->timeline_ranks, "Ranks to record: all | none | 0,3,...")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print the report as JSON");
  cmd->add_flag("--no-fold", o->no_fold, "Simulate every node, not node 0 with the others folded onto a mirror");
  cmd->add_option("--seed", o->seed,
                  "Draw each rank's GPU rate (and a scattered fat tree's node places) from this seed; "
                  "0: every rank at the expected slowest GPU")
      ->capture_default_str();
  cmd->add_option("--seeds", o->seeds, "Simulate seeds 1..K and report the step's p10, median and p90")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--jobs", o->jobs, "Seeds simulated at once, each in its own process (with --seeds)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();

  cmd->callback([in, o] { run_sim(*in, *o); });
}

}  // namespace zinf::cli
