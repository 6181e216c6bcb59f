// The libraries behind `zinf validate` and `zinf profile-hw` (measure/), called directly: what a
// script or another tool gets without the command line.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/hwprofile.hpp"
#include "core/run_config.hpp"
#include "engine/build_info.hpp"
#include "engine/machine_info.hpp"
#include "measure/machine_profile.hpp"
#include "measure/validate_run.hpp"
#include "models/gpt.hpp"
#include "tune/auto_config.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace fs = std::filesystem;

namespace {
struct TempDir {
  fs::path path = fs::temp_directory_path() / ("zinf-measure-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  REQUIRE(out);
}

zinf::measure::ValidateOptions tiny_run(const fs::path& out) {
  zinf::measure::ValidateOptions o;
  o.model = "gpt-tiny";
  o.hw = "local";
  o.config = "train-nvme";
  o.steps = 4;
  o.warmup = 1;
  o.out_dir = out.string();
  o.executable = std::string(ZINF_BINARY_DIR) + "/zinf";
  o.source_dir = ZINF_SOURCE_DIR;
  return o;
}
}  // namespace

TEST_CASE("measure::validate trains in a child process, simulates the same Program and returns the summary") {
  TempDir dir;
  auto o = tiny_run(dir.path / "run");
  std::vector<std::string> said;
  const auto j = zinf::measure::validate(o, [&](const std::string& line) { said.push_back(line); });
  const double measured = j["measured"]["median"], predicted = j["predicted"], error = j["error"];
  CHECK(measured > 0);
  CHECK(predicted > 0);
  CHECK(error == Approx((predicted - measured) / measured));
  CHECK(j["measured"]["steps"] == 3);  // 4 steps, the first not counted
  CHECK(j["measured"]["all"].size() == 4);
  CHECK(j["lanes"]["compute"]["measured"].get<double>() > 0);
  CHECK(j["lanes"]["compute"]["predicted"].get<double>() > 0);
  CHECK(j["label"] == "gpt-tiny train-nvme x1");
  for (const char* f : {"validate.json", "measured.csv", "predicted.csv", "measured.trace.json", "predicted.trace.json"}) {
    INFO(f);
    CHECK(fs::exists(dir.path / "run" / f));
  }
  bool measuring = false;
  for (const auto& s : said) measuring |= s.rfind("measuring: ", 0) == 0 && s.find(o.executable) != std::string::npos;
  CHECK(measuring);
}

TEST_CASE("measure::validate times the round trips around its run on several BLAS threads and notes a change of state") {
  TempDir dir;
  // This machine's profile, as if its phases had seen a cache line take half a millisecond: any run
  // here is far from that.
  std::string profile = read_file(std::string(ZINF_SOURCE_DIR) + "/hwprofiles/local.yaml");
  const std::string key = "measured_on:";
  const size_t at = profile.find('\n', profile.find(key)) + 1;
  profile.insert(at, "  round_trips: {before_kernels: 5.0e-04, after_steps: 5.0e-04}\n");
  const fs::path hw = dir.path / "slow-trips.yaml";
  write_file(hw, profile);
  auto o = tiny_run(dir.path / "run");
  o.hw = hw.string();
  ::setenv("OPENBLAS_NUM_THREADS", "2", 1);  // the measured ranks, as this process
  zinf::engine::pin_blas_threads("2");
  std::vector<std::string> said;
  const auto j = zinf::measure::validate(o, [&](const std::string& line) { said.push_back(line); });
  const bool two = zinf::engine::this_machine("").blas_threads >= 2 && zinf::engine::usable_cores() >= 2;
  ::unsetenv("OPENBLAS_NUM_THREADS");
  zinf::engine::pin_blas_threads(nullptr);
  const auto& state = j["machine_state"];
  CHECK(state["profile_round_trips"]["before_kernels"].get<double>() == Approx(5e-4));
  if (!two) {
    WARN("one BLAS thread or one core here: validate times no round trip");
    CHECK(state["run_round_trips"].empty());
    CHECK(state["note"] == "");
    return;
  }
  REQUIRE(state["run_round_trips"].size() == 2);
  for (const char* phase : {"before_run", "after_run"}) {
    INFO(phase);
    const double t = state["run_round_trips"][phase];
    CHECK((t > 0 && t < 2.5e-4));  // 2x under the profile's
  }
  CHECK_THAT(state["note"].get<std::string>(), Catch::Contains("changed between the profile and this run"));
  bool noted = false;
  for (const auto& s : said) noted |= s.rfind("note: a cache line", 0) == 0;
  CHECK(noted);
}

TEST_CASE("measure::validate refuses a warm-up that leaves no step, naming the option, before it writes anything") {
  TempDir dir;
  auto o = tiny_run(dir.path / "run");
  o.warmup = 4;
  try {
    zinf::measure::validate(o, [](const std::string&) {});
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("--warmup") == 0);
  }
  CHECK_FALSE(fs::exists(dir.path / "run"));
  o.warmup = 1;
  o.ranks = 0;
  CHECK_THROWS_AS(zinf::measure::validate(o, [](const std::string&) {}), std::invalid_argument);
}

TEST_CASE("measure::validate names the log when the measured run fails") {
  TempDir dir;
  auto o = tiny_run(dir.path / "run");
  o.executable = (dir.path / "no-such-zinf").string();
  try {
    zinf::measure::validate(o, [](const std::string&) {});
    FAIL("no error");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("measure.log") != std::string::npos);
  }
}

TEST_CASE("tune::resolve_auto_for_ranks leaves a run of no whole number of nodes to the planner") {
  auto hw = zinf::core::load_hwprofile(std::string(ZINF_SOURCE_DIR) + "/hwprofiles/dgx2-v100.yaml");
  REQUIRE(hw.node.gpus == 16);
  const auto model = zinf::models::find_model("gpt-tiny", ZINF_SOURCE_DIR);
  auto config = zinf::core::parse_run_config("zero_stage: 3\noffload: {params: auto, optimizer: auto}\n", "test");
  const auto r = zinf::tune::resolve_auto_for_ranks(model, hw, 3, config);
  CHECK_FALSE(r.searched);
  CHECK(r.summary.empty());
}
