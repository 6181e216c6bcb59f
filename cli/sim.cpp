// `zinf sim`: plan one training step and run its Program on SimGrid against a hardware profile;
// print step time, throughput, busy fraction of each resource and peak memory per tier, and write
// the Timeline (CSV) and a Chrome trace. With --range, the step again at every combination of the
// bounds of the profile inputs no source fixes (each bound from a source, given by the user), and the
// range it spans.
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "cli/inputs.hpp"
#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "core/errors.hpp"
#include "engine/io/output_file.hpp"
#include "core/units.hpp"
#include "sim/isolate.hpp"
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
  std::vector<std::string> ranges;  // --range PATH=LOW:HIGH
};

// One profile input given as a range: a key path of the hwprofile YAML and its two bounds, written as
// the profile writes the value ("200 Gb/s").
struct RangedInput {
  std::vector<std::string> path;
  std::string key, low, high;
};

RangedInput parse_range(const std::string& text) {
  const size_t eq = text.find('='), colon = text.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos || colon == eq + 1 || colon + 1 == text.size())
    throw CLI::ValidationError("--range", fmt::format("'{}': expected PATH=LOW:HIGH, e.g. node.nic.bandwidth=200 Gb/s:400 Gb/s",
                                                      text));
  RangedInput r{{}, text.substr(0, eq), text.substr(eq + 1, colon - eq - 1), text.substr(colon + 1)};
  for (size_t pos = 0; pos <= r.key.size();) {
    const size_t dot = std::min(r.key.find('.', pos), r.key.size());
    if (dot == pos) throw CLI::ValidationError("--range", fmt::format("'{}': an empty key in the path", r.key));
    r.path.push_back(r.key.substr(pos, dot - pos));
    pos = dot + 1;
  }
  return r;
}

// The profile's YAML with each ranged key set to its value in `values`; a key the profile does not have
// (or that is not a single value) is refused, naming the profile and the key.
std::string profile_with(const std::string& path, const std::vector<RangedInput>& ranges, const std::vector<std::string>& values) {
  YAML::Node root = core::load_bounded_yaml(core::read_bounded_file(path, core::kMaxConfigBytes, "hwprofile"), path);
  for (size_t i = 0; i < ranges.size(); ++i) {
    std::vector<YAML::Node> chain{root};
    for (const auto& k : ranges[i].path) {
      if (!chain.back().IsMap() || !chain.back()[k])
        throw core::ConfigError(path, ranges[i].key, "--range names a key this profile does not have");
      chain.push_back(chain.back()[k]);
    }
    if (!chain.back().IsScalar())
      throw core::ConfigError(path, ranges[i].key, "--range needs a key that holds one value");
    chain.back() = values[i];
  }
  YAML::Emitter out;
  out << root;
  return out.c_str();
}

// The step at every combination of the ranges' bounds (expected slowest GPU, seed 0): each combination's
// profile written to a temporary file and read as --hw, so that it is loaded as the run's own, and each
// simulated in a child process (SimGrid runs one engine per process: call this before any simulation).
nlohmann::json simulate_range(const InputOptions& in_opts, const SimCliOptions& o, const sim::SimOptions& base) {
  std::vector<RangedInput> ranges;
  for (const auto& t : o.ranges) ranges.push_back(parse_range(t));
  if (ranges.size() > 4) throw CLI::ValidationError("--range", "at most 4 ranged inputs (16 combinations of bounds)");
  const std::string path = core::resolve_config(in_opts.hw, "hwprofiles", core::zinf_root(source_dir()));
  nlohmann::json per = nlohmann::json::array();
  double lo = 0, hi = 0;
  for (size_t combo = 0; combo < (size_t(1) << ranges.size()); ++combo) {
    std::vector<std::string> values;
    nlohmann::json at;
    for (size_t i = 0; i < ranges.size(); ++i) {
      values.push_back((combo >> i) & 1 ? ranges[i].high : ranges[i].low);
      at[ranges[i].key] = values.back();
    }
    const std::string text = profile_with(path, ranges, values);
    // A bound the profile reader refuses is refused here, naming the profile and the bound, before any simulation.
    core::parse_hwprofile(text, fmt::format("{} with --range {}", path, at.dump()));
    char name[] = "/tmp/zinf-range-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) throw std::runtime_error("zinf sim --range: cannot create a temporary profile");
    const bool written = write(fd, text.data(), text.size()) == ssize_t(text.size());
    close(fd);
    InputOptions bound = in_opts;
    bound.hw = name;
    double step = 0;
    try {
      if (!written) throw std::runtime_error("zinf sim --range: cannot write a temporary profile");
      step = std::stod(sim::run_isolated([&] {
        const Inputs in = load_inputs(bound);
        sim::SimOptions opts = base;
        opts.seed = 0;
        return fmt::format("{:.17g}", tune::run_scenario({in.model, in.hw, in.config, in_opts.nodes}, opts, 0, 1).report.step_time);
      }));
    } catch (...) {
      unlink(name);
      throw;
    }
    unlink(name);
    lo = combo == 0 ? step : std::min(lo, step);
    hi = combo == 0 ? step : std::max(hi, step);
    per.push_back({{"inputs", at}, {"step_time", step}});
  }
  return {{"step_time", {{"low", lo}, {"high", hi}}}, {"per_bound", per}};
}

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
  const nlohmann::json range = o.ranges.empty() ? nlohmann::json() : simulate_range(in_opts, o, opts);
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
    if (!range.is_null()) j["range"] = range;
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
  if (!range.is_null()) {
    fmt::print("step time range    {} .. {} over {} combination(s) of the --range bounds (expected slowest GPU)\n",
               format_seconds(range["step_time"]["low"].get<double>()), format_seconds(range["step_time"]["high"].get<double>()),
               range["per_bound"].size());
    for (const auto& b : range["per_bound"]) fmt::print("  {}  {}\n", format_seconds(b["step_time"].get<double>()), b["inputs"].dump());
  }
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
  cmd->add_option("--range", o->ranges,
                  "A profile input no source fixes, as PATH=LOW:HIGH with sourced bounds (node.nic.bandwidth=200 Gb/s:400 Gb/s); "
                  "repeatable: the step is simulated at every combination of bounds and its range printed");
  cmd->add_option("--jobs", o->jobs, "Seeds simulated at once, each in its own process (with --seeds)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();

  cmd->callback([in, o] { run_sim(*in, *o); });
}

}  // namespace zinf::cli
