// `zinf sweep SPEC.yaml`: simulate a grid of (model, hwprofile, nodes, config) in parallel worker
// processes and write one CSV row per point as it finishes. Resumable: points already in the CSV
// with status ok or does-not-fit are kept and skipped; failed points are run again.
//
// Spec (YAML):
//   models: [gpt-10b, gpt-100b]          # names (models/NAME.yaml) or paths (relative: to the spec)
//   hwprofiles: [dgx2-v100]              # names or paths
//   nodes: [1, 2, 4]
//   configs: [infinity-cpu, infinity-nvme]
//   collective: hierarchical             # optional: hierarchical | ring
//   output: results.csv                  # optional; --out overrides; default SPEC with .csv
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.hpp"
#include "cli/inputs.hpp"
#include "core/errors.hpp"
#include "sim/isolate.hpp"
#include "sim/scenario.hpp"

namespace zinf::cli {
namespace {

struct Point {
  std::string model, hw, config;
  int nodes = 1;
  std::string key() const { return model + "|" + hw + "|" + std::to_string(nodes) + "|" + config; }
};

struct Spec {
  std::vector<std::string> models, hws, configs;
  std::vector<int> nodes;
  std::string collective = "hierarchical";
  std::string output;
};

std::vector<std::string> string_list(const YAML::Node& root, const std::string& key, const std::string& file) {
  const auto n = root[key];
  if (!n || !n.IsSequence() || n.size() == 0)
    throw core::ConfigError(file, key, "expected a non-empty list, e.g. " + key + ": [a, b]");
  std::vector<std::string> out;
  for (const auto& v : n) {
    if (!v.IsScalar()) throw core::ConfigError(file, key, "every entry must be a name or a path");
    out.push_back(v.as<std::string>());
  }
  return out;
}

Spec load_spec(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw core::ConfigError(path, "", std::string("cannot read the sweep spec: ") + e.what());
  }
  if (!root.IsMap()) throw core::ConfigError(path, "", "a sweep spec is a mapping with models, hwprofiles, nodes, configs");
  for (const auto& kv : root) {
    const auto k = kv.first.as<std::string>();
    if (k != "models" && k != "hwprofiles" && k != "nodes" && k != "configs" && k != "collective" && k != "output" &&
        k != "description")
      throw core::ConfigError(path, k, "unknown key (allowed: models, hwprofiles, nodes, configs, collective, output, description)");
  }
  Spec s;
  s.models = string_list(root, "models", path);
  s.hws = string_list(root, "hwprofiles", path);
  s.configs = string_list(root, "configs", path);
  for (const auto& n : string_list(root, "nodes", path)) {
    int v = 0;
    try {
      v = std::stoi(n);
    } catch (const std::exception&) {
    }
    if (v < 1) throw core::ConfigError(path, "nodes", "'" + n + "' is not a positive node count");
    s.nodes.push_back(v);
  }
  if (root["collective"]) {
    s.collective = root["collective"].as<std::string>();
    if (s.collective != "ring" && s.collective != "hierarchical")
      throw core::ConfigError(path, "collective", "expected ring or hierarchical");
  }
  if (root["output"]) s.output = root["output"].as<std::string>();
  // Paths in a spec are relative to the spec's folder; bare names are looked up as usual.
  const auto dir = std::filesystem::path(path).parent_path();
  for (auto* list : {&s.models, &s.hws, &s.configs})
    for (auto& e : *list)
      if (e.find('/') != std::string::npos && std::filesystem::path(e).is_relative()) e = (dir / e).lexically_normal().string();
  return s;
}

const std::vector<std::string> kColumns = {
    "model", "hwprofile", "nodes", "config", "gpus", "status", "step_time_s", "samples_per_s", "tflops_per_gpu",
    "percent_of_peak", "ideal_step_time_s", "busy_gpu", "busy_pcie_h2d", "busy_pcie_d2h", "busy_nvme_read",
    "busy_nvme_write", "busy_comm", "busy_nic", "busy_cpu", "peak_device_per_gpu", "peak_host_per_node",
    "peak_nvme_per_node", "within_budget", "tiling_factor", "sim_wall_s", "message"};

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out(1);
  bool in_quotes = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (in_quotes) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        in_quotes = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      in_quotes = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// One point in a worker process: plan and simulate, or say why the model does not fit.
std::string run_point(const Point& p, const std::string& collective) {
  InputOptions o{p.model, p.hw, p.nodes, p.config};
  Inputs in = load_inputs(o);
  sim::SimOptions opts;
  opts.algorithm = sim::parse_collective_algorithm(collective);
  opts.timeline_ranks.clear();
  nlohmann::json j;
  try {
    auto res = sim::run_scenario({in.model, in.hw, in.config, p.nodes}, opts);
    j = nlohmann::json::parse(sim::report_to_json(res.report));
    j["status"] = "ok";
    j["ideal_step_time"] = res.ideal_step_time;
    j["tiling_factor"] = res.plan.tiling_factor;
    j["sim_wall"] = res.simulate_seconds;
    j["gpus"] = p.nodes * in.hw.node.gpus;
  } catch (const core::PlanError& e) {
    j = {{"status", "does-not-fit"}, {"message", e.what()}, {"gpus", p.nodes * in.hw.node.gpus}};
  }
  return j.dump();
}

std::string csv_row(const Point& p, bool ok, const std::string& text) {
  std::vector<std::string> v = {quote(p.model), quote(p.hw), std::to_string(p.nodes), quote(p.config)};
  nlohmann::json j;
  if (ok) j = nlohmann::json::parse(text);
  auto num = [&](const nlohmann::json& x) { return x.is_number() ? fmt::format("{:.6g}", x.get<double>()) : std::string(); };
  auto get = [&](const char* k) { return j.contains(k) ? num(j[k]) : std::string(); };
  auto busy = [&](const char* k) { return j.contains("busy") && j["busy"].contains(k) ? num(j["busy"][k]) : std::string(); };
  auto peak = [&](const char* k) {
    return j.contains("peak_memory") ? num(j["peak_memory"][k]) : std::string();
  };
  v.push_back(j.contains("gpus") ? std::to_string(j["gpus"].get<int>()) : "");
  v.push_back(ok ? j["status"].get<std::string>() : "error");
  v.push_back(get("step_time"));
  v.push_back(get("samples_per_s"));
  v.push_back(get("tflops_per_gpu"));
  v.push_back(j.contains("fraction_of_peak") ? fmt::format("{:.4g}", 100.0 * j["fraction_of_peak"].get<double>()) : "");
  v.push_back(get("ideal_step_time"));
  for (const char* b : {"gpu", "pcie_h2d", "pcie_d2h", "nvme_read", "nvme_write", "comm", "nic", "cpu"}) v.push_back(busy(b));
  v.push_back(peak("device_per_gpu"));
  v.push_back(peak("host_per_node"));
  v.push_back(peak("nvme_per_node"));
  v.push_back(j.contains("within_budget") ? (j["within_budget"].get<bool>() ? "1" : "0") : "");
  v.push_back(j.contains("tiling_factor") ? std::to_string(j["tiling_factor"].get<int64_t>()) : "");
  v.push_back(get("sim_wall"));
  v.push_back(quote(ok ? (j.contains("message") ? j["message"].get<std::string>() : "") : text));
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + v[i];
  return out;
}

void progress(size_t done, size_t total, size_t failed, double seconds) {
  if (!isatty(STDERR_FILENO) && done != total) return;
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  fmt::print(stderr, "\r[{}{}] {}/{} points, {} failed, {:.0f} s", std::string(static_cast<size_t>(filled), '#'),
             std::string(static_cast<size_t>(width - filled), ' '), done, total, failed, seconds);
  if (done == total) fmt::print(stderr, "\n");
}

void run_sweep(const std::string& spec_path, std::string out_path, int jobs) {
  const Spec spec = load_spec(spec_path);
  if (out_path.empty()) out_path = spec.output;
  if (out_path.empty()) out_path = std::filesystem::path(spec_path).replace_extension(".csv").filename().string();

  std::vector<Point> grid;
  for (const auto& hw : spec.hws)
    for (const auto& m : spec.models)
      for (const auto& c : spec.configs)
        for (int n : spec.nodes) grid.push_back({m, hw, c, n});

  // Resume: keep finished rows, drop failed ones (they run again).
  std::map<std::string, std::string> kept;
  if (std::ifstream in(out_path); in) {
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      auto f = split_csv(line);
      if (f.size() != kColumns.size()) continue;
      if (f[5] != "ok" && f[5] != "does-not-fit") continue;
      kept[Point{f[0], f[1], f[3], std::stoi(f[2])}.key()] = line;
    }
  }
  {
    std::ofstream out(out_path, std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + out_path);
    for (size_t i = 0; i < kColumns.size(); ++i) out << (i ? "," : "") << kColumns[i];
    out << "\n";
    for (const auto& p : grid)
      if (auto it = kept.find(p.key()); it != kept.end()) out << it->second << "\n";
  }
  std::vector<Point> todo;
  for (const auto& p : grid)
    if (!kept.count(p.key())) todo.push_back(p);

  fmt::print(stderr, "zinf sweep: {} points, {} already in {}, {} to run on {} worker(s)\n", grid.size(),
             grid.size() - todo.size(), out_path, todo.size(), jobs);
  std::ofstream out(out_path, std::ios::app);
  const auto t0 = std::chrono::steady_clock::now();
  size_t done = 0, failed = 0;
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  progress(0, todo.size(), 0, 0);
  sim::run_isolated_parallel(
      todo.size(), jobs, [&](size_t i) { return run_point(todo[i], spec.collective); },
      [&](size_t i, bool ok, const std::string& text) {
        ++done;
        if (!ok) {
          ++failed;
          fmt::print(stderr, "\nzinf sweep: {} failed: {}\n", todo[i].key(), text);
        }
        out << csv_row(todo[i], ok, text) << "\n";
        out.flush();
        progress(done, todo.size(), failed, elapsed());
      });
  fmt::print(stderr, "zinf sweep: wrote {}\n", out_path);
}

Registration reg(40, [](CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "Simulate a grid of models, node counts, configs and hwprofiles to CSV");
  auto spec = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto jobs = std::make_shared<int>(2);
  cmd->add_option("spec", *spec, "Sweep spec (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out,-o", *out, "CSV to write (and resume from)");
  cmd->add_option("--jobs,-j", *jobs, "Worker processes")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->callback([spec, out, jobs] { run_sweep(*spec, *out, *jobs); });
});

}  // namespace
}  // namespace zinf::cli
