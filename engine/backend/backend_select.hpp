// Which backend runs the Program's tasks: `cpu` (always built) or `cuda` (built where nvcc was
// found, run where a GPU is present). These functions are plain C++ so that any translation unit
// can ask, whether or not this build has CUDA; without CUDA they report "not built". Stateless and
// thread-safe.
#pragma once
#include <string>

#include "core/program.hpp"

namespace zinf::engine {

enum class BackendKind { Cpu, Cuda };
const char* to_string(BackendKind k);

// Whether this build compiled the CUDA backend (nvcc was found at configure time).
bool cuda_built();

// Whether a CUDA device can be used now. Never throws: false without CUDA in the build, without a
// driver or without a device, with `why` (when given) saying which, e.g.
// "cudaGetDeviceCount: no CUDA-capable device is detected".
bool cuda_device_available(std::string* why = nullptr);

// Whether the CUDA driver library (libcuda.so.1) can be loaded: without it no device can be used,
// and `auto` answers cpu without loading the CUDA plugin (cuBLAS, NCCL: about 160 MB of RSS and a
// second of start-up on a machine with no GPU).
bool cuda_driver_present();

// "cpu", "cuda" or "auto" (cuda when the build has it and a device is present, else cpu).
// Throws std::invalid_argument with a message a user can act on: an unknown name, or `cuda`
// asked for without CUDA in the build or without a device.
BackendKind select_backend(const std::string& name);

// The CUDA device a rank uses: its local rank on the node (from the MPI launcher's environment, or
// `rank`) modulo the devices present.
int cuda_device_for_rank(int rank);

}  // namespace zinf::engine
