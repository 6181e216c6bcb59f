// `zinf validate`: runs real training of a model for K steps and the simulation of the same Program
// on this machine's profile, then prints the step time measured vs predicted, the error, and each
// lane's busy time measured vs predicted; writes both Timelines (CSV and Chrome trace) and a JSON
// summary. The measurement runs in child processes (mpirun -np N of this binary for N > 1 ranks),
// so the simulation has this process's SimGrid engine to itself.
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "core/config_paths.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "core/validation.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/exec/backend_select.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "sim/simulator.hpp"

namespace zinf::cli {
namespace {

namespace fs = std::filesystem;
using core::Lane;

struct ValidateArgs {
  std::string model = "gpt-mini";
  std::string hw = "local";
  std::string config = "train-nvme";
  int ranks = 1;
  int steps = 8;
  int warmup = 3;  // steps not summarized: staging caches, arena and page faults settle
  std::string out_dir = "validate-out";
  std::string nvme_dir;
  std::string label;
  bool json = false;
  bool worker = false;  // internal: one measuring rank
};

struct Loaded {
  core::ModelSpec model;
  std::string hw_path;
  core::HwProfile hw;  // colocated for the run's ranks
  core::RunConfig config;
};

Loaded load(const ValidateArgs& a) {
  const std::string root = core::zinf_root(source_dir());
  Loaded l;
  l.model = models::find_model(a.model, source_dir());
  std::string hw_path;
  try {
    hw_path = core::resolve_config(a.hw, "hwprofiles", root);
  } catch (const std::exception&) {
    throw std::runtime_error(fmt::format("no hwprofile '{}': run `zinf profile-hw --out hwprofiles/{}.yaml` once on this machine",
                                         a.hw, a.hw));
  }
  l.hw_path = hw_path;
  l.hw = core::colocate(core::load_hwprofile(hw_path), a.ranks);
  // As the Trainer plans it: the CPU backend keeps fp32 working tensors, whatever the profile says,
  // so the simulated Program is the measured one.
  if (engine::select_backend(engine::TrainerOptions{}.backend) != engine::BackendKind::Cuda)
    l.hw.node.gpu.working_bytes = 4;
  std::vector<std::string> warnings;
  l.config = core::load_any_run_config(core::resolve_config(a.config, "configs", root), warnings);
  // `auto` as zinf train decides it (the measuring ranks load the same and get the same answer).
  l.config = resolve_auto_for_ranks(l.model, l.hw, a.ranks, l.config).config;
  return l;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  buf[n] = 0;
  return buf;
}

void run_worker_steps(const ValidateArgs& a, const engine::TrainerOptions& o, engine::Collectives& comm);

// One rank of the measured run: trains `steps` steps and writes its step times, per-step lane busy
// times and the last step's Timeline.
void run_worker(const ValidateArgs& a) {
  Loaded l = load(a);
  auto comm = engine::make_collectives();
  engine::TrainerOptions o;
  o.model = l.model;
  o.hw = l.hw;
  o.config = l.config;
  o.nvme_dir = a.nvme_dir;
  try {
    run_worker_steps(a, o, *comm);
  } catch (const std::exception& e) {
    // One rank's error ends every rank now, naming it (as in `zinf train`).
    if (comm->size() > 1) comm->abort(fmt::format("error: {}", e.what()));
    throw;
  }
}

void run_worker_steps(const ValidateArgs& a, const engine::TrainerOptions& o, engine::Collectives& comm) {
  engine::Trainer trainer(o, comm);
  nlohmann::json j;
  j["rank"] = comm.rank();
  core::Timeline last;
  for (int s = 0; s < a.steps; ++s) {
    auto st = trainer.step();
    j["step_seconds"].push_back(st.seconds);
    j["lane_busy"].push_back(core::lane_busy(st.timeline));
    j["loss"].push_back(st.loss);
    last = std::move(st.timeline);
  }
  for (const auto& e : last.events)
    j["events"].push_back({int(e.lane), e.task, int(e.kind), e.start, e.end, e.bytes, e.flops});
  const auto path = fs::path(a.out_dir) / fmt::format("measured.rank{}.json", comm.rank());
  std::ofstream out(path);
  out << j.dump() << "\n";
  out.flush();
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path.string()));
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void run_validate(const ValidateArgs& a) {
  if (a.worker) return run_worker(a);
  if (a.ranks < 1) throw CLI::ValidationError("--ranks", "at least 1");
  if (a.warmup >= a.steps)
    throw CLI::ValidationError("--warmup", fmt::format("{} warm-up steps leave none of the {} steps to measure", a.warmup, a.steps));
  Loaded l = load(a);
  fs::create_directories(a.out_dir);
  for (const auto& e : fs::directory_iterator(a.out_dir))
    if (e.path().filename().string().rfind("measured.rank", 0) == 0) fs::remove(e.path());
  std::string nvme_dir = a.nvme_dir.empty() ? (fs::path(a.out_dir) / "nvme").string() : a.nvme_dir;
  fs::create_directories(nvme_dir);
  const std::string mismatch = profile_machine_mismatch(l.hw, l.hw_path, nvme_dir);
  if (!mismatch.empty()) fmt::print(stderr, "zinf validate: warning: {}\n", mismatch);

  // The same Program the Trainer will plan (same graph, profile, config and ranks).
  const auto graph = models::build_gpt(l.model, l.config);
  const auto planned = core::make_plan(graph, l.hw, l.config, a.ranks);

  // Measure.
  std::string args = fmt::format("validate --worker --model {} --hw {} --config {} --ranks {} --steps {} --out-dir {} --nvme-dir {}",
                                 shell_quote(a.model), shell_quote(a.hw), shell_quote(a.config), a.ranks, a.steps,
                                 shell_quote(a.out_dir), shell_quote(nvme_dir));
  std::string cmd = shell_quote(self_exe()) + " " + args;
  if (a.ranks > 1)
    cmd = fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np {} {}", a.ranks, cmd);
  if (!a.json) {
    fmt::print("zinf validate: {} on {} rank(s), config {}, profile {}; {} steps, the first {} not counted (warm-up)\n",
               a.model, a.ranks, a.config, a.hw, a.steps, a.warmup);
    fmt::print("measuring: {}\n", cmd);
    std::fflush(stdout);
  }
  if (int rc = std::system((cmd + " < /dev/null > " + shell_quote((fs::path(a.out_dir) / "measure.log").string()) + " 2>&1").c_str()); rc != 0)
    throw std::runtime_error(fmt::format("the measured run failed (exit status {}); see {}/measure.log (the command was: {})", rc,
                                         a.out_dir, cmd));

  // Step time of a data-parallel step: the slowest rank's, step by step.
  std::vector<double> step_seconds(size_t(a.steps), 0.0);
  std::vector<core::LaneSeconds> lane_steps(size_t(a.steps), core::LaneSeconds{});
  core::Timeline measured;
  for (int r = 0; r < a.ranks; ++r) {
    const std::string base = (fs::path(a.out_dir) / fmt::format("measured.rank{}", r)).string();
    std::ifstream in(base + ".json");
    if (!in) throw std::runtime_error(fmt::format("rank {} wrote no {}.json; see {}/measure.log", r, base, a.out_dir));
    auto j = nlohmann::json::parse(in);
    for (int s = 0; s < a.steps; ++s) {
      step_seconds[size_t(s)] = std::max(step_seconds[size_t(s)], j["step_seconds"][size_t(s)].get<double>());
      auto lb = j["lane_busy"][size_t(s)].get<std::vector<double>>();
      for (size_t k = 0; k < lb.size() && k < size_t(core::kLaneCount); ++k) lane_steps[size_t(s)][k] += lb[k] / a.ranks;
    }
    for (const auto& e : j["events"]) {
      core::TimelineEvent ev;
      ev.rank = r;
      ev.lane = static_cast<Lane>(e[0].get<int>());
      ev.task = e[1].get<int32_t>();
      ev.kind = static_cast<core::TaskKind>(e[2].get<int>());
      ev.label = planned.program.label(planned.program.task(ev.task));
      ev.start = e[3];
      ev.end = e[4];
      ev.bytes = e[5];
      ev.flops = e[6];
      measured.events.push_back(std::move(ev));
    }
  }
  const auto meas = core::summarize_steps(step_seconds, a.warmup);
  std::vector<core::LaneSeconds> kept(lane_steps.begin() + a.warmup, lane_steps.end());
  const auto meas_lanes = core::median_lane_busy(kept);

  // Predict.
  sim::SimOptions so;
  so.timeline_all_ranks = true;
  so.fold_symmetric_nodes = false;
  const auto report = sim::simulate(planned.program, l.hw, so);
  const auto pred_lanes = core::lane_busy(report.timeline);
  const double err = core::relative_error(report.step_time, meas.median);

  auto write = [&](const std::string& name, const core::Timeline& tl) {
    std::ofstream csv(fs::path(a.out_dir) / (name + ".csv")), tr(fs::path(a.out_dir) / (name + ".trace.json"));
    tl.write_csv(csv);
    tl.write_chrome_trace(tr);
  };
  write("measured", measured);
  write("predicted", report.timeline);

  nlohmann::json j;
  j["label"] = a.label.empty() ? fmt::format("{} {} x{}", a.model, a.config, a.ranks) : a.label;
  j["model"] = a.model;
  j["config"] = a.config;
  j["ranks"] = a.ranks;
  j["steps"] = a.steps;
  j["warmup"] = a.warmup;
  j["hwprofile"] = a.hw;
  j["profile_machine_mismatch"] = mismatch;  // "" when the profile was measured on this machine
  j["measured"] = {{"median", meas.median}, {"min", meas.min}, {"max", meas.max}, {"steps", meas.steps},
                   {"all", step_seconds}};
  j["predicted"] = report.step_time;
  j["error"] = err;
  for (int k = 0; k < core::kLaneCount; ++k) {
    const char* lane = core::to_string(static_cast<Lane>(k));
    j["lanes"][lane] = {{"measured", meas_lanes[size_t(k)]}, {"predicted", pred_lanes[size_t(k)]}};
  }
  std::ofstream(fs::path(a.out_dir) / "validate.json") << j.dump(2) << "\n";
  if (a.json) {
    fmt::print("{}\n", j.dump(2));
    return;
  }

  fmt::print("\nstep time   measured {} (median of {} steps, {} .. {})   predicted {}   error {:+.1f}%\n",
             core::format_seconds(meas.median), meas.steps, core::format_seconds(meas.min), core::format_seconds(meas.max),
             core::format_seconds(report.step_time), 100.0 * err);
  fmt::print("\nbusy time per lane and step (mean over ranks)\n  {:<11}{:>12}{:>12}{:>9}\n", "lane", "measured", "predicted",
             "error");
  for (int k = 0; k < core::kLaneCount; ++k) {
    const double m = meas_lanes[size_t(k)], p = pred_lanes[size_t(k)];
    if (m == 0 && p == 0) continue;
    const double e = core::relative_error(p, m);
    fmt::print("  {:<11}{:>12}{:>12}{:>9}\n", core::to_string(static_cast<Lane>(k)), core::format_seconds(m),
               core::format_seconds(p), std::isfinite(e) ? fmt::format("{:+.0f}%", 100 * e) : std::string("-"));
  }
  fmt::print("\ntimelines: {0}/measured.csv, {0}/predicted.csv (and .trace.json); summary {0}/validate.json\n", a.out_dir);
}

Registration reg(50, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "Train for real and simulate the same Program: step time and lanes, measured vs predicted");
  auto a = std::make_shared<ValidateArgs>();
  cmd->add_option("--model,-m", a->model, "Model name or path")->capture_default_str();
  cmd->add_option("--hw", a->hw, "This machine's measured profile (zinf profile-hw)")->capture_default_str();
  cmd->add_option("--config,-c", a->config, "Run config")->capture_default_str();
  cmd->add_option("--ranks,-n", a->ranks, "Data-parallel ranks (mpirun -np N on this machine)")->capture_default_str();
  cmd->add_option("--steps,-s", a->steps, "Steps to run, warm-up included")->capture_default_str()->check(CLI::Range(2, 1000));
  cmd->add_option("--warmup", a->warmup, "Steps at the start not counted in the summary")->capture_default_str()->check(CLI::Range(0, 999));
  cmd->add_option("--out-dir,-o", a->out_dir, "Where the Timelines and the summary go")->capture_default_str();
  cmd->add_option("--nvme-dir", a->nvme_dir, "Directory for NVMe tiers (default: <out-dir>/nvme)");
  cmd->add_option("--label", a->label, "Name of this configuration in the summary");
  cmd->add_flag("--json", a->json, "Print the summary as JSON");
  cmd->add_flag("--worker", a->worker, "(internal) one measuring rank")->group("");
  cmd->callback([a] { run_validate(*a); });
});

}  // namespace
}  // namespace zinf::cli