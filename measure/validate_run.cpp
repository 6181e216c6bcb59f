// The library behind `zinf validate` (measure/validate_run.hpp).
#include "measure/validate_run.hpp"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "core/plan.hpp"
#include "core/units.hpp"
#include "core/validation.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/backend/backend_select.hpp"
#include "engine/io/output_file.hpp"
#include "engine/machine_info.hpp"
#include "engine/probe/machine_probe.hpp"
#include "engine/train/trainer.hpp"
#include "measure/child_process.hpp"
#include "measure/machine_profile.hpp"
#include "models/gpt.hpp"
#include "tune/auto_config.hpp"
#include "sim/simulator.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::measure {
namespace {

namespace fs = std::filesystem;
using core::Lane;

constexpr int kRanksPerCore = 4;
// A rank's step times and last Timeline: a few MB for the models validate runs.
constexpr uint64_t kMaxRankFileBytes = 1ull << 30;

struct Loaded {
  core::ModelSpec model;
  std::string hw_path;
  core::HwProfile hw;  // colocated for the run's ranks
  core::RunConfig config;
};

Loaded load(const ValidateOptions& a) {
  const std::string root = core::zinf_root(a.source_dir);
  Loaded l;
  l.model = models::find_model(a.model, a.source_dir);
  models::require_engine_architecture(l.model, "zinf validate");
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
  l.config = tune::resolve_auto_for_ranks(l.model, l.hw, a.ranks, l.config).config;
  return l;
}

// One rank of the measured run: trains `steps` steps and writes its step times, per-step lane busy
// times and losses, and the last step's Timeline.
void run_worker_steps(const ValidateOptions& a, const engine::TrainerOptions& o, engine::Collectives& comm) {
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
  engine::write_output_file(engine::default_io_env(), path.string(), j.dump() + "\n", "zinf validate --worker");
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// On several BLAS threads, how cheaply the cores shared data around the run, against the profile's
// phases (a machine whose cores do so at two costs runs shared GEMMs at two rates, and a profile
// holds the one of its moments). Times nothing on one BLAS thread, one core, or against a profile
// that recorded no round trips.
struct StateWatch {
  int blas_threads = engine::this_machine("").blas_threads;
  std::vector<engine::probe::PhaseRoundTrip> profile, run;
  explicit StateWatch(const core::MachineRecord& m) {
    for (const auto& [phase, seconds] : m.round_trips) profile.push_back({phase, seconds});
  }
  void stamp(const char* phase) {
    if (blas_threads <= 1 || engine::usable_cores() < 2 || profile.empty()) return;
    if (const auto t = engine::probe::cache_line_round_trip()) run.push_back({phase, *t});
  }
  // Round trips in seconds; the note is "" where they agree or were not taken.
  nlohmann::json json(const std::string& note) const {
    auto trips = [](const std::vector<engine::probe::PhaseRoundTrip>& side) {
      nlohmann::json t = nlohmann::json::object();
      for (const auto& p : side) t[p.phase] = p.seconds;
      return t;
    };
    return {{"profile_round_trips", trips(profile)}, {"run_round_trips", trips(run)}, {"note", note}};
  }
};

// The output directory: made if missing, and refused unless it is a directory (a file or a device
// named by --out-dir is not written into).
void check_out_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument(fmt::format("--out-dir: {} is not a directory{}", dir, ec ? ": " + ec.message() : ""));
  // Each file the run will write, checked before the run as the one writer will write it.
  for (const char* name : {"validate.json", "measured.csv", "measured.trace.json", "predicted.csv", "predicted.trace.json",
                           "measure.log"})
    engine::check_output_path(engine::default_io_env(), (fs::path(dir) / name).string(), "zinf validate --out-dir");
}

// mpirun would start every rank asked for, each a whole training process: beyond a few per core
// the machine thrashes or runs out of memory long before a step is measured.
void check_ranks(const ValidateOptions& a) {
  if (a.ranks < 1) throw std::invalid_argument("--ranks: at least 1");
  const int most = kRanksPerCore * std::max(1, engine::usable_cores());
  if (a.ranks > most && !a.force_ranks)
    throw std::invalid_argument(fmt::format("--ranks: {} ranks on {} usable core(s); zinf validate runs at most {} per core "
                                            "({}) unless --force-ranks",
                                            a.ranks, engine::usable_cores(), kRanksPerCore, most));
}

// Why the measured run failed, for the user. A run that could not write even its log leaves
// nothing to see there: the message says so when the disk is full.
std::string measured_run_failed(int rc, const std::string& out_dir, const std::string& cmd) {
  struct statvfs disk {};
  const bool full = ::statvfs(out_dir.c_str(), &disk) == 0 && disk.f_bavail == 0;
  return fmt::format("the measured run failed (exit status {}); see {}/measure.log{} (the command was: {})", rc, out_dir,
                     full ? fmt::format(", though the disk holding {} is full", out_dir) : "", cmd);
}

}  // namespace

nlohmann::json validate(const ValidateOptions& a, const std::function<void(const std::string&)>& say) {
  check_ranks(a);
  if (a.warmup >= a.steps)
    throw std::invalid_argument(fmt::format("--warmup: {} warm-up steps leave none of the {} steps to measure", a.warmup, a.steps));
  Loaded l = load(a);
  check_out_dir(a.out_dir);
  for (const auto& e : fs::directory_iterator(a.out_dir))
    if (e.path().filename().string().rfind("measured.rank", 0) == 0) fs::remove(e.path());
  std::string nvme_dir = a.nvme_dir.empty() ? (fs::path(a.out_dir) / "nvme").string() : a.nvme_dir;
  fs::create_directories(nvme_dir);
  const std::string mismatch = profile_machine_mismatch(l.hw, l.hw_path, nvme_dir);
  if (!mismatch.empty()) say("warning: " + mismatch);

  // The same Program the Trainer will plan (same graph, profile, config and ranks).
  const auto planned = models::plan_gpt(l.model, l.hw, l.config, a.ranks).planned;

  // Measure.
  std::string args = fmt::format("validate --worker --model {} --hw {} --config {} --ranks {} --steps {} --out-dir {} --nvme-dir {}",
                                 shell_quote(a.model), shell_quote(a.hw), shell_quote(a.config), a.ranks, a.steps,
                                 shell_quote(a.out_dir), shell_quote(nvme_dir));
  std::string cmd = shell_quote(a.executable) + " " + args;
  if (a.ranks > 1)
    cmd = fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np {} {}", a.ranks, cmd);
  say(fmt::format("{} on {} rank(s), config {}, profile {}; {} steps, the first {} not counted (warm-up)", a.model, a.ranks,
                  a.config, a.hw, a.steps, a.warmup));
  say("measuring: " + cmd);
  StateWatch state(l.hw.measured_on);
  state.stamp("before_run");
  int rc = 0;
  try {
    rc = run_child(cmd, (fs::path(a.out_dir) / "measure.log").string());
  } catch (const ChildStopped& e) {
    throw ChildStopped(e.signal(), fmt::format("{}; {} holds what it wrote so far (measure.log and the ranks' files), no "
                                               "summary", e.what(), a.out_dir));
  }
  if (rc != 0) throw std::runtime_error(measured_run_failed(rc, a.out_dir, cmd));
  state.stamp("after_run");
  const std::string state_note = engine::probe::run_state_note(state.profile, state.run, state.blas_threads);
  if (!state_note.empty()) say("note: " + state_note);

  // Step time of a data-parallel step: the slowest rank's, step by step.
  std::vector<double> step_seconds(size_t(a.steps), 0.0);
  std::vector<core::LaneSeconds> lane_steps(size_t(a.steps), core::LaneSeconds{});
  core::Timeline measured;
  for (int r = 0; r < a.ranks; ++r) {
    const std::string base = (fs::path(a.out_dir) / fmt::format("measured.rank{}", r)).string();
    if (!fs::exists(base + ".json"))
      throw std::runtime_error(fmt::format("rank {} wrote no {}.json; see {}/measure.log", r, base, a.out_dir));
    auto j = nlohmann::json::parse(core::read_bounded_file(base + ".json", kMaxRankFileBytes, "measured rank's file"));
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

  auto& env = engine::default_io_env();
  auto write = [&](const std::string& name, const core::Timeline& tl) {
    engine::OutputFile csv(env, (fs::path(a.out_dir) / (name + ".csv")).string(), "zinf validate");
    tl.write_csv(csv.stream());
    csv.commit();
    engine::OutputFile tr(env, (fs::path(a.out_dir) / (name + ".trace.json")).string(), "zinf validate");
    tl.write_chrome_trace(tr.stream());
    tr.commit();
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
  j["hwprofile"] = core::display_path(a.hw, core::zinf_root(a.source_dir));  // no machine's paths in the report
  j["profile_machine_mismatch"] = mismatch;  // "" when the profile describes this machine as profile-hw measures it now
  j["measured"] = {{"median", meas.median}, {"min", meas.min}, {"max", meas.max}, {"steps", meas.steps},
                   {"all", step_seconds}};
  j["predicted"] = report.step_time;
  j["error"] = err;
  j["machine_state"] = state.json(state_note);
  for (int k = 0; k < core::kLaneCount; ++k) {
    const char* lane = core::to_string(static_cast<Lane>(k));
    j["lanes"][lane] = {{"measured", meas_lanes[size_t(k)]}, {"predicted", pred_lanes[size_t(k)]}};
  }
  engine::write_output_file(env, (fs::path(a.out_dir) / "validate.json").string(), j.dump(2) + "\n", "zinf validate");
  return j;
}

void validate_worker(const ValidateOptions& a) {
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

}  // namespace zinf::measure
