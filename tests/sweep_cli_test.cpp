// `zinf sweep` end to end: rows for refused and failed points, resuming, and results equal to
// those of single `zinf sim` runs on the same files with the values written in.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/sweep_table.hpp"

namespace fs = std::filesystem;
using zinf::core::csv_split;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("zinf-sweep-" + tag + "-" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Runs zinf with `args`; returns its exit status, with stdout and stderr in `out`.
int run_zinf(const std::string& args, std::string& out, const std::string& log) {
  const std::string cmd = std::string(ZINF_BINARY_DIR) + "/zinf " + args + " > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  out = read(log);
  return rc;
}

std::vector<std::map<std::string, std::string>> rows(const std::string& csv) {
  std::istringstream in(read(csv));
  std::string line;
  std::getline(in, line);
  const auto cols = csv_split(line);
  std::vector<std::map<std::string, std::string>> out;
  while (std::getline(in, line)) {
    const auto f = csv_split(line);
    REQUIRE(f.size() == cols.size());
    std::map<std::string, std::string> r;
    for (size_t i = 0; i < f.size(); ++i) r[cols[i]] = f[i];
    out.push_back(r);
  }
  return out;
}

std::vector<std::string> lines(const std::string& csv) {
  std::istringstream in(read(csv));
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("zinf sweep writes a row for every point, refused and failed ones with their reason, and resumes") {
  TempDir dir("rows");
  // 1 MiB of device memory cannot hold gpt-tiny's states without offload; heads 8 does not divide hidden 100.
  write(dir / "spec.yaml",
        "models: [gpt-tiny]\nhwprofiles: [dgx2-v100]\nconfigs: [data-parallel]\nnodes: [1]\n"
        "axes:\n"
        "  - {key: node.gpu.memory, values: [32 GiB, 1 MiB]}\n"
        "  - {key: heads, values: [4, 8]}\n"
        "  - {key: hidden, values: [64, 100]}\n");
  const std::string csv = dir / "out.csv";
  std::string log;
  REQUIRE(run_zinf("sweep " + (dir / "spec.yaml") + " -o " + csv, log, dir / "log1.txt") == 0);
  auto r = rows(csv);
  REQUIRE(r.size() == 8);
  std::map<std::string, int> by_status;
  for (const auto& row : r) ++by_status[row.at("status")];
  CHECK(by_status["ok"] == 3);
  CHECK(by_status["does-not-fit"] == 3);
  CHECK(by_status["error"] == 2);
  for (const auto& row : r) {
    INFO(row.at("message"));
    if (row.at("status") == "does-not-fit") CHECK(row.at("message").find("device is short") != std::string::npos);
    if (row.at("status") == "error") CHECK(row.at("message").find("divisible by heads (8)") != std::string::npos);
    if (row.at("status") == "ok") CHECK(std::stod(row.at("step_time_s")) > 0);
  }
  CHECK(r[0].at("hwprofile.node.gpu.memory") == "32 GiB");

  // Resume: drop the first finished row; error rows run again, the other finished rows are kept as they are.
  auto before = lines(csv);
  std::string trimmed = before[0] + "\n";
  for (size_t i = 2; i < before.size(); ++i) trimmed += before[i] + "\n";
  write(csv, trimmed);
  REQUIRE(run_zinf("sweep " + (dir / "spec.yaml") + " -o " + csv, log, dir / "log2.txt") == 0);
  CHECK(log.find("8 points, 5 already in") != std::string::npos);
  const auto after = lines(csv);
  REQUIRE(after.size() == before.size());
  CHECK(after[0] == before[0]);
  for (size_t i = 2; i < before.size(); ++i) {
    const bool finished = before[i].find(",error,") == std::string::npos;
    if (finished) CHECK(after[i] == before[i]);  // byte for byte, its sim_wall_s included: not run again
  }
  CHECK(rows(csv)[0].at("status") == "ok");
}

TEST_CASE("a sweep point's results equal zinf sim's on files with the swept values written in") {
  TempDir dir("equal");
  write(dir / "spec.yaml",
        "models: [gpt-mini]\nhwprofiles: [dgx2-v100]\nconfigs: [infinity-nvme]\nnodes: [1, 2]\n"
        "axes:\n"
        "  - {key: micro_batch, values: [2]}\n"
        "  - {key: node.nvme.read_bandwidth, scale: [0.5]}\n"
        "  - {key: layers, values: [3]}\n");
  const std::string csv = dir / "out.csv";
  std::string log;
  REQUIRE(run_zinf("sweep " + (dir / "spec.yaml") + " -o " + csv, log, dir / "log.txt") == 0);
  const auto r = rows(csv);
  REQUIRE(r.size() == 2);

  // The same values, written into copies of the files by hand.
  const std::string src = ZINF_SOURCE_DIR;
  write(dir / "config.yaml", read(src + "/configs/infinity-nvme.yaml") + "\nmicro_batch: 2\n");
  std::string hw = read(src + "/hwprofiles/dgx2-v100.yaml");
  const auto at = hw.find("read_bandwidth: 28 GB/s");
  REQUIRE(at != std::string::npos);
  hw.replace(at, std::string("read_bandwidth: 28 GB/s").size(), "read_bandwidth: 14 GB/s");
  write(dir / "hw.yaml", hw);
  std::string model = read(src + "/models/gpt-mini.yaml");
  model.replace(model.find("layers: 4"), 9, "layers: 3");
  write(dir / "model.yaml", model);

  for (const auto& row : r) {
    const std::string nodes = row.at("nodes");
    INFO("nodes " << nodes);
    REQUIRE(run_zinf("sim --json --model " + (dir / "model.yaml") + " --hw " + (dir / "hw.yaml") + " --config " +
                     (dir / "config.yaml") + " --nodes " + nodes,
                 log, dir / "sim.txt") == 0);
    const auto j = nlohmann::json::parse(read(dir / "sim.txt"));
    auto g6 = [](double v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", v);
      return std::string(buf);
    };
    CHECK(row.at("status") == "ok");
    CHECK(row.at("step_time_s") == g6(j["step_time"].get<double>()));
    CHECK(row.at("tflops_per_gpu") == g6(j["tflops_per_gpu"].get<double>()));
    CHECK(row.at("busy_nvme_read") == g6(j["busy"]["nvme_read"].get<double>()));
    CHECK(row.at("peak_host_per_node") == g6(j["peak_memory"]["host_per_node"].get<double>()));
  }
  // And the values did change the result: a sweep point without them differs.
  REQUIRE(run_zinf("sim --json --model gpt-mini --hw dgx2-v100 --config infinity-nvme --nodes 1", log, dir / "base.txt") == 0);
  const auto base = nlohmann::json::parse(read(dir / "base.txt"));
  CHECK(std::stod(r[0].at("step_time_s")) != Approx(base["step_time"].get<double>()).epsilon(1e-4));
}

TEST_CASE("zinf sweep runs a model axis of four Hugging Face families end to end; a bad config.json is refused by name") {
  TempDir dir("hf");
  const std::string hf = std::string(ZINF_SOURCE_DIR) + "/tests/data/hf/";
  const std::vector<std::string> models = {"llama-3.1-8b", "qwen2.5-7b", "gemma-7b", "mixtral-8x7b-v0.1"};
  std::string list;
  for (const auto& m : models) list += (list.empty() ? "" : ", ") + hf + m;
  write(dir / "spec.yaml", "models: [" + list + "]\nhwprofiles: [dgx-h100]\nconfigs: [infinity-cpu]\nnodes: [1]\n"
                           "axes:\n  - {key: config.seq, values: [256]}\n");
  const std::string csv = dir / "out.csv";
  std::string log;
  REQUIRE(run_zinf("sweep " + (dir / "spec.yaml") + " -o " + csv, log, dir / "log.txt") == 0);
  const auto r = rows(csv);
  REQUIRE(r.size() == models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    INFO(r[i].at("message"));
    CHECK(r[i].at("model") == "tests/data/hf/" + models[i]);
    CHECK(r[i].at("status") == "ok");
    CHECK(std::stod(r[i].at("step_time_s")) > 0);
    CHECK(r[i].at("config.seq") == "256");
  }
  // A larger model takes longer a step on the same machine: Mixtral's 47B beside Llama's 8B.
  CHECK(std::stod(r[3].at("step_time_s")) > std::stod(r[0].at("step_time_s")));

  fs::create_directories(dir / "bad");
  write(dir / "bad/config.json", "{\"model_type\": \"mamba\", \"hidden_size\": 768}\n");
  write(dir / "bad.yaml", "models: [" + hf + "llama-3.1-8b, " + (dir / "bad") + "]\nhwprofiles: [dgx-h100]\n"
                          "configs: [infinity-cpu]\nnodes: [1]\n");
  CHECK(run_zinf("sweep " + (dir / "bad.yaml") + " -o " + (dir / "bad.csv"), log, dir / "log-bad.txt") != 0);
  CHECK(log.find(dir / "bad/config.json") != std::string::npos);
  CHECK(log.find("'mamba' is not a family zinf models") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "bad.csv"));
}
