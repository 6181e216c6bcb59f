// Sizing a run to this machine: the RAM check that refuses a plan before anything is allocated, and
// `zinf train` applying --device-memory and --host-memory to the CPU backend's plan.
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/errors.hpp"
#include "engine/machine_info.hpp"
#include "test_paths.hpp"

using namespace zinf;
namespace fs = std::filesystem;

namespace {

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("zinf-sizing-" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir / "nvme"); }
  ~Scratch() { fs::remove_all(dir); }
  std::string run(const std::string& args, int& rc) const {
    const std::string log = (dir / "log.txt").string();
    rc = std::system((std::string(ZINF_BINARY_DIR) + "/zinf " + args + " > " + log + " 2>&1").c_str());
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
};

}  // namespace

TEST_CASE("the RAM check counts every local rank's host tier, and the device arena on the CPU backend") {
  core::PerTier peak{};
  peak[size_t(core::Tier::Device)] = 4e9;
  peak[size_t(core::Tier::Host)] = 1e9;
  CHECK_NOTHROW(engine::check_plan_fits_ram(peak, true, 1, 6e9));
  CHECK_NOTHROW(engine::check_plan_fits_ram(peak, false, 3, 6e9));  // a GPU's arena is not host RAM
  CHECK_THROWS_WITH(engine::check_plan_fits_ram(peak, true, 2, 6e9),
                    Catch::Contains("needs 11.") && Catch::Contains("6.00 GB available (MemAvailable)") &&
                        Catch::Contains("2 rank(s)") && Catch::Contains("--device-memory"));
  // A plan that does not fit (exit 3), not a plain error.
  CHECK_THROWS_AS(engine::check_plan_fits_ram(peak, true, 2, 6e9), core::PlanError);
  CHECK_NOTHROW(engine::check_plan_fits_ram(peak, true, 64, 0));  // unknown: not checked
  CHECK(engine::available_memory() > 0);
}

TEST_CASE("zinf train refuses up front a plan larger than this machine's RAM, and sizes the CPU arena from --device-memory") {
  Scratch s;
  // A model whose resident states are twice the memory available now, every state on the "device".
  const double avail = engine::available_memory();
  REQUIRE(avail > 0);
  const int layers = int(std::ceil(2.0 * avail / (16.0 * 12.0 * 1024.0 * 1024.0)));
  const fs::path model = s.dir / "big.yaml", config = s.dir / "resident.yaml";
  std::ofstream(model) << "name: big\nlayers: " << layers << "\nhidden: 1024\nheads: 8\nseq: 64\nvocab: 256\nmicro_batch: 1\n";
  std::ofstream(config) << "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n";
  int rc = 0;
  std::string out = s.run("train --model " + model.string() + " --config " + config.string() + " --hw cpu-dev --device-memory 100000" +
                              " --host-memory 100000 --steps 1 --nvme-dir " + (s.dir / "nvme").string(),
                          rc);
  CHECK(WEXITSTATUS(rc) == 3);  // plan refused, as the README's exit codes say
  CHECK_THAT(out, Catch::Contains("available (MemAvailable)") && Catch::Contains("device arena"));
  // Without --device-memory the profile's 2 GiB budget refuses the same plan in the planner.
  out = s.run("train --model " + model.string() + " --config " + config.string() + " --hw cpu-dev --steps 1 --nvme-dir " +
                  (s.dir / "nvme").string(),
              rc);
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("device is short"));
  // A small model trains within a --device-memory the profile alone would not give it.
  out = s.run("train --model gpt-tiny --config " + config.string() + " --hw cpu-dev --device-memory 0.05 --steps 1 --nvme-dir " +
                  (s.dir / "nvme").string(),
              rc);
  CHECK(rc == 0);
  out = s.run("train --model gpt-tiny --config " + config.string() + " --hw cpu-dev --device-memory 0.0001 --steps 1 --nvme-dir " +
                  (s.dir / "nvme").string(),
              rc);
  CHECK(rc != 0);
  CHECK_THAT(out, Catch::Contains("device is short"));
}

TEST_CASE("planned and measured memory side by side, with a warning past 10 %") {
  core::PerTier peak{};
  peak[size_t(core::Tier::Device)] = 1e9;
  peak[size_t(core::Tier::Host)] = 1e9;
  const double ram = 2e9 + engine::kProcessOverhead;
  auto c = engine::compare_memory(peak, true, 1.05e9, ram);
  CHECK_FALSE(c.over);
  CHECK_THAT(c.text, Catch::Contains("device 1.00 GB vs arena peak 1.05 GB") && Catch::Contains("vs peak RSS"));
  c = engine::compare_memory(peak, true, 3e9, ram * 1.5);
  CHECK(c.over);
  CHECK_THAT(c.text, Catch::Contains("warning: measured memory is over the plan") && Catch::Contains("arena held 3.00 GB") &&
                         Catch::Contains("the process peaked at"));
  c = engine::compare_memory(peak, false, -1, 1.0e9 + engine::kProcessOverhead);  // a GPU arena is not RAM
  CHECK_FALSE(c.over);
  CHECK_THAT(c.text, Catch::Contains("arena peak (none)"));
  CHECK(engine::peak_rss() > 1e6);
}
