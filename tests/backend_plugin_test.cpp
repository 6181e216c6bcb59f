// The CUDA plugin (engine/backend/cuda_plugin.hpp) on any machine, GPU or not: nothing of CUDA is in
// the process until CUDA is asked for; the plugin this build wrote loads with every symbol resolved
// and reports the devices (or why there are none); wrong files are refused by name; `auto` without
// the CUDA driver answers cpu without loading the plugin (its libraries would hold about 160 MB of a
// CPU run's RAM); backend names are checked.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "engine/backend/backend_select.hpp"
#include "engine/backend/cuda_plugin.hpp"
#include "skip.hpp"
#include "temp_dir.hpp"

using namespace zinf::engine;
using Catch::Matchers::Contains;

namespace {

std::string mapped_files() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream s;
  s << maps.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("cuda plugin: no CUDA library is mapped until CUDA is asked for", "[plugin]") {
  // Each test case runs in its own process under CTest: nothing has asked for CUDA yet.
  const std::string before = mapped_files();
  CHECK_THAT(before, !Contains("libcublas") && !Contains("libcudart") && !Contains("libnccl"));
  std::string why;
  const bool available = cuda_device_available(&why);
  if (!cuda_built()) {
    CHECK_FALSE(available);
    CHECK_THAT(why, Contains("built without CUDA"));
    return;
  }
  INFO(why);
  REQUIRE(cuda_plugin() != nullptr);  // this build wrote the plugin: it must load
  CHECK_THAT(mapped_files(), Contains("libzinf_cuda.so") && Contains("libcudart"));
  if (!available) CHECK_THAT(why, Contains("cudaGetDeviceCount"));  // no GPU here: the runtime's reason
}

TEST_CASE("cuda plugin: the build's plugin has this build's interface and resolves every symbol", "[plugin]") {
  if (!cuda_built()) ZINF_SKIP("this zinf was built without CUDA");
  const auto paths = cuda_plugin_candidates();
  REQUIRE_FALSE(paths.empty());
  std::string why;
  const CudaPlugin* p = load_cuda_plugin(paths.back(), &why);  // the build's own path (RTLD_NOW)
  INFO(why);
  REQUIRE(p != nullptr);
  CHECK(p->abi == kCudaPluginAbi);
  CHECK(p->device_count != nullptr);
  CHECK(p->make_device_collectives != nullptr);
  CHECK(p->make_backend != nullptr);
  const int n = p->device_count(&why);
  CHECK((n >= 0 || why.find("cudaGetDeviceCount") != std::string::npos));
}

TEST_CASE("cuda plugin: a missing file or a library that is no plugin is refused by name", "[plugin]") {
  zinf::test::TempDir dir("plugin");
  std::string why;
  const std::string missing = (dir.path / "libzinf_cuda.so").string();
  CHECK(load_cuda_plugin(missing, &why) == nullptr);
  CHECK_THAT(why, Contains(missing));
  const std::string junk = (dir.path / "junk.so").string();
  std::ofstream(junk) << "not an ELF file";
  CHECK(load_cuda_plugin(junk, &why) == nullptr);
  CHECK_THAT(why, Contains(junk) && Contains("cannot load"));
  // A real shared library without the entry point: the C library itself.
  CHECK(load_cuda_plugin("libc.so.6", &why) == nullptr);
  CHECK_THAT(why, Contains("not a zinf CUDA plugin"));
}

TEST_CASE("backend auto without a CUDA driver is cpu, and loads no CUDA library", "[plugin]") {
  if (cuda_driver_present()) ZINF_SKIP("a CUDA driver is installed here: auto loads the plugin to count the devices");
  REQUIRE(mapped_files().find("libcublas") == std::string::npos);
  CHECK(select_backend("auto") == BackendKind::Cpu);
  CHECK_THAT(mapped_files(), !Contains("libzinf_cuda") && !Contains("libcublas") && !Contains("libcudart"));
}

TEST_CASE("backend names: cpu always, cuda only with a device, nothing else", "[plugin]") {
  CHECK(select_backend("cpu") == BackendKind::Cpu);
  CHECK_THROWS_WITH(select_backend("gpu"), Contains("--backend 'gpu': expected cpu, cuda or auto"));
  if (!cuda_device_available()) CHECK_THROWS_WITH(select_backend("cuda"), Contains("--backend cuda"));
}
