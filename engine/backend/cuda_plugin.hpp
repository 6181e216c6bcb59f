// The CUDA backend lives in a plugin, libzinf_cuda.so, that zinf loads (dlopen) the first time a
// command asks for CUDA: a device check, `--backend cuda` or `auto`. Loading cuBLAS, cuBLASLt,
// the CUDA runtime and NCCL costs about 190 MB of resident memory and a quarter of a second per
// process, and makes every fork() of that process several milliseconds dearer; a simulation,
// a sweep of thousands of forked points or a CPU training run pays none of it this way.
//
// The plugin is found, in this order, at $ZINF_CUDA_PLUGIN, beside the running executable, and
// where the build wrote it. It is built from the same sources as zinf, with the same compiler; the
// table it exports carries kCudaPluginAbi, and a plugin of another build is refused by name.
// cuda_plugin() is thread-safe and loads at most once per process; the plugin is never unloaded.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/program.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/backend/cpu/gpt_cpu_backend.hpp"
#include "engine/backend/training_backend.hpp"
#include "engine/model/gpt2.hpp"

namespace zinf::engine {

// Bump when CudaPlugin or any type it passes changes.
inline constexpr int kCudaPluginAbi = 2;

struct CudaPlugin {
  int abi = 0;
  // Devices present, or -1 with `why` set (no driver, no device, the runtime's message).
  int (*device_count)(std::string* why) = nullptr;
  // The CUDA backend's collectives over `bootstrap` (NCCL for several ranks, device copies for one).
  std::unique_ptr<Collectives> (*make_device_collectives)(Collectives& bootstrap, int device) = nullptr;
  // A GPT training backend on `device`, its arena the Program's device budget (device_arena_bytes,
  // engine/backend/gpt_backend_base.hpp); `comm` must be from make_device_collectives.
  std::unique_ptr<TrainingBackend> (*make_backend)(const core::Program& program, const core::Plan& plan,
                                                   const Gpt2& model, int rank, Collectives& comm,
                                                   const GptBackendOptions& options, int device) = nullptr;
};

// The loaded plugin, or nullptr with `why` saying what is missing: this build has no CUDA, the
// file is not where it is looked for (the places tried), dlopen's error (a CUDA library missing),
// or a plugin from another build.
const CudaPlugin* cuda_plugin(std::string* why = nullptr);

// Loads the plugin at `path` (no caching; the plugin stays loaded): nullptr with `why` when dlopen
// fails, the file is no zinf plugin, or its interface is not kCudaPluginAbi.
const CudaPlugin* load_cuda_plugin(const std::string& path, std::string* why = nullptr);

// The paths cuda_plugin() tries, in order (for messages and tests).
std::vector<std::string> cuda_plugin_candidates();

}  // namespace zinf::engine

// The plugin's one exported symbol.
extern "C" const zinf::engine::CudaPlugin* zinf_cuda_plugin();
