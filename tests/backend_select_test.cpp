// Choosing the backend: `auto` on a machine without the CUDA driver answers cpu without loading
// the CUDA plugin (its libraries would hold about 160 MB of a CPU run's RAM); names are checked.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/backend/backend_select.hpp"
#include "skip.hpp"

using namespace zinf::engine;
using Catch::Matchers::Contains;

namespace {

std::string mapped_files() {
  std::ifstream f("/proc/self/maps");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("auto without a CUDA driver is cpu, and loads no CUDA library", "[backend]") {
  if (cuda_driver_present()) ZINF_SKIP("a CUDA driver is installed here: auto loads the plugin to count the devices");
  REQUIRE(mapped_files().find("libcublas") == std::string::npos);
  CHECK(select_backend("auto") == BackendKind::Cpu);
  const std::string maps = mapped_files();
  CHECK(maps.find("libzinf_cuda") == std::string::npos);
  CHECK(maps.find("libcublas") == std::string::npos);
  CHECK(maps.find("libcudart") == std::string::npos);
}

TEST_CASE("backend names: cpu always, cuda only with a device, nothing else", "[backend]") {
  CHECK(select_backend("cpu") == BackendKind::Cpu);
  CHECK_THROWS_WITH(select_backend("gpu"), Contains("--backend 'gpu': expected cpu, cuda or auto"));
  if (!cuda_device_available()) CHECK_THROWS_WITH(select_backend("cuda"), Contains("--backend cuda"));
}
