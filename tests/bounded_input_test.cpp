// Bounded reading of user files (formats/bounded_input.hpp): devices, FIFOs and directories are
// refused without blocking, files over the limit are refused by size, YAML alias bombs and deep
// nesting are refused by their expansion, and each refusal names the file. The readers of
// configs, models, profiles and sweep specs go through it.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/bounded_input.hpp"
#include "core/errors.hpp"
#include "core/model_spec.hpp"
#include "core/run_config.hpp"
#include "core/sweep_spec.hpp"
#include "temp_dir.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"
#include "formats/sweep_spec_reader.hpp"

using namespace zinf;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Eight levels of ten aliases each: 444 bytes standing for 10^9 scalars.
std::string alias_bomb() {
  std::ostringstream s;
  s << "a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n";
  for (int i = 1; i < 9; ++i) {
    s << "a" << i << ": &a" << i << " [";
    for (int k = 0; k < 10; ++k) s << (k ? ",*a" : "*a") << i - 1;
    s << "]\n";
  }
  s << "zero_stage: 3\n";
  return s.str();
}

}  // namespace

TEST_CASE("a device, a FIFO or a directory is refused at once, naming it and what it is", "[bounded]") {
  test::TempDir tmp;
  CHECK_THROWS_WITH(core::read_bounded_file("/dev/zero", core::kMaxConfigBytes, "run config"),
                    Contains("/dev/zero") && Contains("character device"));
  const std::string fifo = (tmp.path / "c.yaml").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(core::load_run_config(fifo), Contains(fifo) && Contains("FIFO"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK_THROWS_WITH(core::load_model_spec(tmp.path.string()), Contains("directory"));
  CHECK_THROWS_WITH(core::require_regular_file(fifo, "safetensors file"), Contains("FIFO"));
  CHECK_THROWS_WITH(core::load_sweep_spec("/dev/zero", ZINF_SOURCE_DIR), Contains("/dev/zero"));
}

TEST_CASE("a file over its limit is refused by its size, naming it", "[bounded]") {
  test::TempDir tmp;
  const std::string path = (tmp.path / "big.yaml").string();
  std::ofstream(path) << "zero_stage: 3\n# " << std::string(core::kMaxConfigBytes, 'x') << "\n";
  CHECK_THROWS_WITH(core::load_run_config(path), Contains(path) && Contains("larger than"));
  std::ofstream(path, std::ios::trunc) << "zero_stage: 3\n";
  CHECK(core::load_run_config(path).zero_stage == 3);
  CHECK(core::read_bounded_file(path, 14, "x") == "zero_stage: 3\n");
  CHECK_THROWS_WITH(core::read_bounded_file(path, 13, "x"), Contains("larger than"));
}

TEST_CASE("YAML aliases are bounded by their expansion, and nesting by depth", "[bounded]") {
  const std::string bomb = alias_bomb();
  CHECK(bomb.size() < 500);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(core::parse_run_config(bomb, "bomb.yaml"), Contains("bomb.yaml") && Contains("aliases"));
  CHECK_THROWS_AS(core::parse_model_spec(bomb, "bomb.yaml"), core::ConfigError);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
  CHECK_THROWS_WITH(core::load_bounded_yaml("a: " + std::string(100, '[') + std::string(100, ']') + "\n", "deep.yaml"),
                    Contains("deep.yaml") && Contains("deeper"));
  // A few aliases, as people use them, are fine.
  CHECK(core::parse_run_config("optimizer: &o {lr: 2.0e-3}\n", "ok.yaml").lr == 2e-3);
  CHECK_NOTHROW(core::load_bounded_yaml("a: &x [1, 2]\nb: *x\nc: *x\n", "ok.yaml"));
}
