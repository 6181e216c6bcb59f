#include "engine/backend/cuda_plugin.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "core/self_exe.hpp"

namespace zinf::engine {

namespace {

constexpr const char* kPluginFile = "libzinf_cuda.so";

struct Loaded {
  const CudaPlugin* plugin = nullptr;
  std::string why;
};

}  // namespace

const CudaPlugin* load_cuda_plugin(const std::string& path, std::string* why) {
  std::string reason;
  const CudaPlugin* plugin = nullptr;
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = ::dlerror();
    reason = fmt::format("cannot load the CUDA plugin {}: {}", path, err ? err : "dlopen failed");
  } else if (void* sym = ::dlsym(handle, "zinf_cuda_plugin"); !sym) {
    reason = fmt::format("{} is not a zinf CUDA plugin (it has no zinf_cuda_plugin)", path);
  } else {
    plugin = reinterpret_cast<const CudaPlugin* (*)()>(sym)();
    const int abi = plugin ? plugin->abi : 0;
    if (abi != kCudaPluginAbi) {
      plugin = nullptr;
      reason = fmt::format("{} is the CUDA plugin of another zinf build (interface {}, this zinf needs {}): "
                           "rebuild it with this zinf, or point ZINF_CUDA_PLUGIN at the right one",
                           path, abi, kCudaPluginAbi);
    }
  }
  if (why) *why = reason;
  return plugin;
}

namespace {

Loaded load() {
#ifndef ZINF_HAVE_CUDA
  return {nullptr, "this zinf was built without CUDA (nvcc was not found when it was configured)"};
#else
  std::string path, tried;
  for (const auto& candidate : cuda_plugin_candidates()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec)) {
      path = candidate;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + candidate;
  }
  if (path.empty()) {
    const char* env = std::getenv("ZINF_CUDA_PLUGIN");
    return {nullptr, env && *env ? fmt::format("ZINF_CUDA_PLUGIN={}: no such file", env)
                                 : fmt::format("the CUDA plugin {} is not installed (looked for {})", kPluginFile, tried)};
  }
  Loaded l;
  l.plugin = load_cuda_plugin(path, &l.why);
  return l;
#endif
}

}  // namespace

std::vector<std::string> cuda_plugin_candidates() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("ZINF_CUDA_PLUGIN"); env && *env) return {env};
  std::error_code ec;
  const auto exe = core::self_exe(ec);
  if (!ec) paths.push_back((exe.parent_path() / kPluginFile).string());
#ifdef ZINF_CUDA_PLUGIN_BUILD_PATH
  if (paths.empty() || paths.front() != ZINF_CUDA_PLUGIN_BUILD_PATH) paths.push_back(ZINF_CUDA_PLUGIN_BUILD_PATH);
#endif
  return paths;
}

const CudaPlugin* cuda_plugin(std::string* why) {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (why) *why = loaded.why;
  return loaded.plugin;
}

}  // namespace zinf::engine
