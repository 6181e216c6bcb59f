// `zinf sweep SPEC.yaml`: simulate every point of a sweep spec (formats/sweep_spec_reader.hpp) and write one
// CSV row per point as it finishes. Alone, points run in -j worker processes; under
// `mpirun -np N zinf sweep SPEC` they are spread over the ranks, rank 0 handing out one point at a
// time and writing the CSV (cli/sweep_runner.hpp). Resumable: rows of finished points (ok,
// does-not-fit) in the CSV are kept and their points skipped; points whose row says error run again.
// A point that fails is a row with status error and the reason, never the end of the sweep. The
// CSV is locked for the sweep (a second sweep on it is refused, naming the first) and read back
// within bounds (engine/io/row_file.hpp).
//
// Spec (YAML):
//   models: [gpt-10b, gpt-100b]            # names (models/NAME.yaml) or paths (relative: to the spec)
//                                          # or a Hugging Face config.json or its folder
//   hwprofiles: [dgx2-v100]                # names or paths
//   nodes: [1, 2, 4]
//   configs: [infinity-cpu, infinity-nvme]
//   axes:                                  # optional: fields of those files, a product with the above
//     - {key: node.pcie.bandwidth_per_gpu, scale: [0.5, 1, 2]}      # hwprofile field, times the file's value
//     - {key: micro_batch, values: [1, 2, 4]}                        # run-config key, set
//     - zip:                                                         # advance together
//         - {key: node.nvme.read_bandwidth, values: [25 GB/s, 50 GB/s]}
//         - {key: node.nvme.write_bandwidth, values: [20 GB/s, 40 GB/s]}
//   collective: hierarchical               # optional: hierarchical | ring
//   output: results.csv                    # optional; --out overrides; default SPEC with .csv
// A key names its file by prefix (model., hwprofile., config.) or, without one, by its first word:
// node/fabric/reserve are the hwprofile's, model shape words (layers, hidden, heads, ...) the
// model's, anything else the run config's. models, hwprofiles, configs and nodes may be axes too
// ({key: nodes, values: [...]}), to be zipped with others.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "cli/stop_signals.hpp"
#include "cli/sweep_runner.hpp"
#include "formats/bounded_input.hpp"
#include "formats/config_paths.hpp"
#include "core/errors.hpp"
#include "formats/hjson.hpp"
#include "formats/run_config_reader.hpp"
#include "core/run_config.hpp"
#include "core/sweep_table.hpp"
#include "engine/io/row_file.hpp"
#include "tune/scenario.hpp"
#include "formats/sweep_spec_reader.hpp"

namespace zinf::cli {
namespace {

struct SweepOptions {
  std::string spec, out;
  int jobs = 0;  // 0: 2 worker processes alone, 1 per rank under mpirun
};

// One point, in a child process: plan and simulate, or say why the plan was refused.
std::string run_point(const core::SweepPoint& p, const std::string& collective, const std::string& root) {
  const auto in = core::load_point_inputs(p, root);
  sim::SimOptions opts;
  opts.algorithm = sim::parse_collective_algorithm(collective);
  opts.timeline_ranks.clear();
  nlohmann::json j;
  try {
    auto res = tune::run_scenario({in.model, in.hw, in.config, p.nodes}, opts);
    j = nlohmann::json::parse(sim::report_to_json(res.report));
    j["status"] = "ok";
    j["ideal_step_time"] = res.ideal_step_time;
    j["tiling_factor"] = res.plan.tiling_factor;
    j["sim_wall"] = res.simulate_seconds;
  } catch (const core::PlanError& e) {
    j = {{"status", "does-not-fit"}, {"message", e.what()}};
  }
  j["gpus"] = p.nodes * in.hw.node.gpus;
  return j.dump();
}

// The CSV fields of a point's result (its JSON from run_point), or of its error.
std::map<std::string, std::string> result_fields(bool ok, const std::string& text) {
  if (!ok) return {{"status", "error"}, {"message", text}};
  const auto j = nlohmann::json::parse(text);
  std::map<std::string, std::string> r;
  auto num = [](const nlohmann::json& x) { return x.is_number() ? fmt::format("{:.6g}", x.get<double>()) : std::string(); };
  auto put = [&](const char* col, const char* key) {
    if (j.contains(key)) r[col] = num(j[key]);
  };
  r["status"] = j["status"].get<std::string>();
  r["gpus"] = std::to_string(j["gpus"].get<int>());
  put("step_time_s", "step_time");
  put("samples_per_s", "samples_per_s");
  put("tflops_per_gpu", "tflops_per_gpu");
  put("ideal_step_time_s", "ideal_step_time");
  put("sim_wall_s", "sim_wall");
  if (j.contains("fraction_of_peak")) r["percent_of_peak"] = fmt::format("{:.4g}", 100.0 * j["fraction_of_peak"].get<double>());
  if (j.contains("busy"))
    for (const char* b : {"gpu", "pcie_h2d", "pcie_d2h", "nvme_read", "nvme_write", "comm", "nic", "cpu"})
      if (j["busy"].contains(b)) r[std::string("busy_") + b] = num(j["busy"][b]);
  if (j.contains("peak_memory"))
    for (const char* k : {"device_per_gpu", "host_per_node", "nvme_per_node"})
      if (j["peak_memory"].contains(k)) r[std::string("peak_") + k] = num(j["peak_memory"][k]);
  if (j.contains("within_budget")) r["within_budget"] = j["within_budget"].get<bool>() ? "1" : "0";
  if (j.contains("tiling_factor")) r["tiling_factor"] = std::to_string(j["tiling_factor"].get<int64_t>());
  if (j.contains("message")) r["message"] = j["message"].get<std::string>();
  return r;
}

std::string format_duration(double s) {
  if (s < 90) return fmt::format("{:.0f} s", s);
  if (s < 5400) return fmt::format("{:.0f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

// A progress bar on a terminal, redrawn at most five times a second.
class Progress {
public:
  explicit Progress(size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) != 0) {}
  void update(size_t done, size_t refused, size_t failed) {
    const double t = elapsed();
    if (!tty_ || (done < total_ && t - last_ < 0.2)) return;
    last_ = t;
    const int width = 30;
    const int filled = total_ ? static_cast<int>(width * done / total_) : width;
    const double rate = t > 0 ? double(done) / t : 0.0;
    const std::string eta = done > 0 && done < total_ ? ", ETA " + format_duration(double(total_ - done) / rate) : "";
    fmt::print(stderr, "\r[{}{}] {}/{} points, {} refused, {} failed, {:.2f} points/s, {}{}   ",
               std::string(static_cast<size_t>(filled), '#'), std::string(static_cast<size_t>(width - filled), ' '),
               done, total_, refused, failed, rate, format_duration(t), eta);
    if (done == total_) fmt::print(stderr, "\n");
  }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

private:
  size_t total_;
  bool tty_;
  double last_ = -1;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

// The largest results CSV a sweep reads back to resume (a million points' rows are about 400 MB).
constexpr uint64_t kMaxCsvBytes = 1ull << 30;

// A DeepSpeed config's text is the same for every point that names it: a number past a double's
// range, a key given twice or a syntax error refuses the spec once, naming the file and key, instead
// of failing each of its points. (A YAML run config is read with each point's overrides, so it is
// left to the points.) A name that resolves to nothing is left to the spec's reader.
void check_deepspeed_text(const std::string& text, const std::string& root) {
  std::string path;
  try {
    path = core::resolve_config(core::point_file(text, root), "configs", root);
  } catch (const core::ConfigError&) {
    return;
  }
  const std::string body = core::read_bounded_file(path, core::kMaxConfigBytes, "run config");
  if (core::is_deepspeed_json(body)) core::parse_hjson(body, path);
}

// Every model, profile and config the spec names, checked as --model, --hw and --config are before
// any point runs: a FIFO or a device there is refused at once, naming the spec's field.
void check_spec_files(const core::SweepSpec& spec, const std::string& root) {
  for (const auto& g : spec.groups)
    for (const auto& a : g.axes) {
      const char* folder = a.kind == core::SweepAxis::Kind::Models       ? "models"
                           : a.kind == core::SweepAxis::Kind::Hwprofiles ? "hwprofiles"
                           : a.kind == core::SweepAxis::Kind::Configs    ? "configs"
                                                                         : nullptr;
      if (!folder) continue;
      for (const auto& text : a.texts) {
        check_named_input(fmt::format("{}'s {}", spec.path, folder), core::point_file(text, root), folder);
        if (a.kind == core::SweepAxis::Kind::Configs) check_deepspeed_text(text, root);
      }
    }
}

void run_sweep(const SweepOptions& o) {
  SweepWorld world;
  const std::string root = core::zinf_root(source_dir());
  // Every rank reads the spec (each needs the points); rank 0 alone reads and starts the CSV.
  core::SweepSpec spec;
  std::vector<core::SweepPoint> points;
  std::vector<std::string> columns;
  std::string out_path = o.out;
  std::unique_ptr<engine::RowFile> table;
  std::vector<std::string> rows;  // the CSV's rows as they are now, for the sort at the end
  std::vector<size_t> todo;
  std::exception_ptr error;
  stop_at_once_on_signals("zinf sweep", "nothing written");
  try {
    check_input("spec", o.spec, kConfigInput);
    spec = core::load_sweep_spec(o.spec, root);
    check_spec_files(spec, root);
    core::check_sweep_models(spec, root);
    points = core::expand(spec);
    columns = core::sweep_columns(spec);
    if (world.rank() == 0) {
      if (out_path.empty()) out_path = spec.output;
      if (out_path.empty()) out_path = std::filesystem::path(o.spec).replace_extension(".csv").filename().string();
      // Locked before it is read: a second sweep on the same CSV is refused, naming this one.
      table = std::make_unique<engine::RowFile>(engine::default_io_env(), out_path, "zinf sweep --out", kMaxCsvBytes);
      auto kept = core::read_finished_rows(table->existing(), out_path, columns);
      for (size_t i = 0; i < points.size(); ++i) {
        auto it = kept.find(points[i].key());
        if (it == kept.end()) todo.push_back(i);
        else rows.push_back(it->second);
      }
      StopDeferred hold;
      table->rewrite(core::sweep_header(columns), rows);
      set_stop_leaves(out_path + " holds the rows finished so far; the same command resumes");
    }
  } catch (...) {
    error = std::current_exception();
  }
  const auto verdict = world.agree(!error);
  if (!verdict.rank0_ok) {
    if (world.rank() == 0) std::rethrow_exception(error);
    return;  // rank 0 says why
  }
  if (!verdict.all_ok) {
    if (error) std::rethrow_exception(error);
    throw std::runtime_error("another rank could not read the sweep spec (see its message)");
  }

  const int jobs = o.jobs > 0 ? o.jobs : (world.under_mpi() ? 1 : 2);
  if (world.rank() == 0)
    fmt::print(stderr, "zinf sweep: {} points, {} already in {}, {} to run on {} rank(s) x {} process(es)\n",
               points.size(), points.size() - todo.size(), out_path, todo.size(), world.size(), jobs);
  Progress progress(todo.size());
  size_t done = 0, refused = 0, failed = 0;
  world.run(
      todo, jobs, [&](size_t i) { return run_point(points[i], spec.collective, root); },
      [&](size_t i, bool ok, const std::string& text) {
        ++done;
        const auto fields = result_fields(ok, text);
        const std::string& status = fields.at("status");
        if (status == "does-not-fit") ++refused;
        if (status == "error") {
          ++failed;
          fmt::print(stderr, "{}zinf sweep: point {} failed: {}\n", ::isatty(STDERR_FILENO) ? "\n" : "", points[i].key(),
                     text);
        }
        rows.push_back(core::sweep_row(points[i], fields, columns));
        table->append(rows.back());
        progress.update(done, refused, failed);
      });
  if (world.rank() != 0) return;
  std::vector<std::string> order;
  for (const auto& p : points) order.push_back(p.key());
  {
    StopDeferred hold;
    table->rewrite(core::sweep_header(columns), core::sorted_rows(rows, order, columns));
  }
  const double t = progress.elapsed();
  fmt::print(stderr, "zinf sweep: {} points in {:.1f} s ({:.2f} points/s), {} refused, {} failed; wrote {}\n", done, t,
             t > 0 ? double(done) / t : 0.0, refused, failed, out_path);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sweep", "Simulate the points of a sweep spec (files and fields as axes) to CSV; under mpirun over all ranks");
  auto o = std::make_shared<SweepOptions>();
  cmd->add_option("spec", o->spec, "Sweep spec (YAML)")->required();
  cmd->add_option("--out,-o", o->out, "CSV to write (and resume from)");
  cmd->add_option("--jobs,-j", o->jobs, "Simulations at once per rank (default: 2 alone, 1 per rank under mpirun)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o] { run_sweep(*o); });
}

}  // namespace zinf::cli
