#include "engine/backend/cuda/nccl_collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "engine/backend/cuda/cuda_check.hpp"

#ifdef ZINF_HAVE_NCCL
#include <nccl.h>
#endif

namespace zinf::engine::cuda {

namespace {

bool on_device(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (dst != src && bytes) ZINF_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

}  // namespace

// ---- DeviceLocalCollectives ----------------------------------------------------------------------

void DeviceLocalCollectives::all_gather(const void* shard, std::size_t shard_bytes, void* full, const char*) {
  ZINF_CUDA_CHECK(cudaSetDevice(device_));
  copy(full, shard, shard_bytes);
}
void DeviceLocalCollectives::reduce_scatter(const float* full, float* shard, std::size_t n, const char*) {
  ZINF_CUDA_CHECK(cudaSetDevice(device_));
  copy(shard, full, n * sizeof(float));
}
void DeviceLocalCollectives::broadcast(void*, std::size_t, int root, const char* what) {
  if (root != 0) throw CommError(fmt::format("broadcast of {}: root {} is not a rank of a one-rank job", what, root));
}
void DeviceLocalCollectives::reduce(const float* in, float* out, std::size_t n, int root, const char* what) {
  if (root != 0) throw CommError(fmt::format("reduce of {}: root {} is not a rank of a one-rank job", what, root));
  ZINF_CUDA_CHECK(cudaSetDevice(device_));
  copy(out, in, n * sizeof(float));
}
void DeviceLocalCollectives::abort(const std::string& why) { throw CommError(why); }

#ifdef ZINF_HAVE_NCCL

bool nccl_built() { return true; }

#define ZINF_NCCL_CHECK(call, op, what)                                                                       \
  do {                                                                                                        \
    const ncclResult_t zinf_r_ = (call);                                                                      \
    if (zinf_r_ != ncclSuccess)                                                                               \
      throw CommError(fmt::format("rank {}: NCCL {} of {} failed: {} ({})", rank_, op, what,                   \
                                  ncclGetErrorString(zinf_r_), ncclGetLastError(impl_ ? impl_->comm : nullptr))); \
  } while (0)

struct NcclCollectives::Impl {
  int device = 0;
  std::chrono::seconds timeout;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;  // staging for host buffers, grown on demand
  std::size_t scratch_bytes = 0;

  std::byte* staging(std::size_t bytes) {
    if (bytes > scratch_bytes) {
      if (scratch) ZINF_CUDA_CHECK(cudaFree(scratch));
      scratch = nullptr;
      ZINF_CUDA_CHECK(cudaMalloc(&scratch, bytes));
      scratch_bytes = bytes;
    }
    return static_cast<std::byte*>(scratch);
  }
};

NcclCollectives::NcclCollectives(Collectives& bootstrap, int device, std::chrono::seconds timeout)
    : bootstrap_(bootstrap), rank_(bootstrap.rank()), size_(bootstrap.size()), impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->timeout = timeout;
  ZINF_CUDA_CHECK(cudaSetDevice(device));
  ZINF_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  ncclUniqueId id{};
  if (rank_ == 0) ZINF_NCCL_CHECK(ncclGetUniqueId(&id), "unique id", "the communicator");
  bootstrap.broadcast(&id, sizeof id, 0, "the NCCL unique id");
  ZINF_NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_), "init", "the communicator");
}

NcclCollectives::~NcclCollectives() {
  if (!impl_) return;
  cudaSetDevice(impl_->device);
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
  if (impl_->scratch) cudaFree(impl_->scratch);
}

namespace {

// Runs `enqueue` on the stream with device (or staged) buffers: `in` is copied to the device first,
// `out` copied back after. Waits for the stream against the deadline.
struct Staged {
  void* dev;
  void* host;  // non-null when `dev` stages a host buffer
};

}  // namespace

template <class Enqueue>
static void run_staged(NcclCollectives::Impl& I, int rank, const char* op, const char* what, const void* in,
                       std::size_t in_bytes, void* out, std::size_t out_bytes, Enqueue enqueue) {
  ZINF_CUDA_CHECK(cudaSetDevice(I.device));
  const bool in_host = in && !on_device(in), out_host = out && !on_device(out);
  const bool in_place = in == out;
  std::byte* stage = (in_host || out_host) ? I.staging(in_bytes + out_bytes) : nullptr;
  Staged s_in{const_cast<void*>(in), nullptr}, s_out{out, nullptr};
  if (in_host) {
    s_in = {stage, const_cast<void*>(in)};
    ZINF_CUDA_CHECK(cudaMemcpyAsync(s_in.dev, in, in_bytes, cudaMemcpyHostToDevice, I.stream));
  }
  if (out_host) s_out = {in_place && in_host ? s_in.dev : stage + in_bytes, out};
  enqueue(s_in.dev, s_out.dev);
  if (out_host) ZINF_CUDA_CHECK(cudaMemcpyAsync(out, s_out.dev, out_bytes, cudaMemcpyDeviceToHost, I.stream));
  // Poll with a growing nap so a waiting comm lane does not take a core from the CPU lanes.
  const auto deadline = std::chrono::steady_clock::now() + I.timeout;
  auto nap = std::chrono::microseconds(1);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(I.stream);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) ZINF_CUDA_CHECK(e);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(I.comm, &async);
    if (async != ncclSuccess || std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(I.comm);
      I.comm = nullptr;
      throw CommError(async != ncclSuccess
                          ? fmt::format("rank {}: NCCL {} of {} failed: {}", rank, op, what, ncclGetErrorString(async))
                          : fmt::format("rank {}: NCCL {} of {} did not complete within {} s: a peer rank has "
                                        "probably failed",
                                        rank, op, what, I.timeout.count()));
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(200));
  }
}

void NcclCollectives::all_gather(const void* shard, std::size_t shard_bytes, void* full, const char* what) {
  if (!impl_->comm) throw CommError(fmt::format("rank {}: all-gather of {}: the communicator was aborted", rank_, what));
  // shard == full means the shard is already in place at full + rank * shard_bytes (as MPI_IN_PLACE).
  const void* send = shard == full ? static_cast<const std::byte*>(full) + std::size_t(rank_) * shard_bytes : shard;
  if (on_device(send) != on_device(full) || !on_device(full)) {
    // Staged: the shard is copied into place in the staged output.
    run_staged(*impl_, rank_, "all-gather", what, nullptr, 0, full, shard_bytes * std::size_t(size_), [&](void*, void* out) {
      std::byte* mine = static_cast<std::byte*>(out) + std::size_t(rank_) * shard_bytes;
      ZINF_CUDA_CHECK(cudaMemcpyAsync(mine, send, shard_bytes, cudaMemcpyDefault, impl_->stream));
      ZINF_NCCL_CHECK(ncclAllGather(mine, out, shard_bytes, ncclUint8, impl_->comm, impl_->stream), "all-gather", what);
    });
    return;
  }
  run_staged(*impl_, rank_, "all-gather", what, nullptr, 0, nullptr, 0, [&](void*, void*) {
    ZINF_NCCL_CHECK(ncclAllGather(send, full, shard_bytes, ncclUint8, impl_->comm, impl_->stream), "all-gather", what);
  });
}

void NcclCollectives::reduce_scatter(const float* full, float* shard, std::size_t n, const char* what) {
  if (!impl_->comm) throw CommError(fmt::format("rank {}: reduce-scatter of {}: the communicator was aborted", rank_, what));
  run_staged(*impl_, rank_, "reduce-scatter", what, full, n * sizeof(float) * std::size_t(size_), shard,
             n * sizeof(float), [&](void* in, void* out) {
               ZINF_NCCL_CHECK(ncclReduceScatter(in, out, n, ncclFloat32, ncclSum, impl_->comm, impl_->stream),
                               "reduce-scatter", what);
             });
}

void NcclCollectives::all_reduce(float* data, std::size_t n, const char* what) {
  if (!impl_->comm) throw CommError(fmt::format("rank {}: all-reduce of {}: the communicator was aborted", rank_, what));
  run_staged(*impl_, rank_, "all-reduce", what, data, n * sizeof(float), data, n * sizeof(float),
             [&](void* in, void* out) {
               ZINF_NCCL_CHECK(ncclAllReduce(in, out, n, ncclFloat32, ncclSum, impl_->comm, impl_->stream),
                               "all-reduce", what);
             });
}

void NcclCollectives::all_reduce(double* data, std::size_t n, const char* what) {
  if (!impl_->comm) throw CommError(fmt::format("rank {}: all-reduce of {}: the communicator was aborted", rank_, what));
  run_staged(*impl_, rank_, "all-reduce", what, data, n * sizeof(double), data, n * sizeof(double),
             [&](void* in, void* out) {
               ZINF_NCCL_CHECK(ncclAllReduce(in, out, n, ncclFloat64, ncclSum, impl_->comm, impl_->stream),
                               "all-reduce", what);
             });
}

void NcclCollectives::broadcast(void* data, std::size_t bytes, int root, const char* what) {
  if (!impl_->comm) throw CommError(fmt::format("rank {}: broadcast of {}: the communicator was aborted", rank_, what));
  run_staged(*impl_, rank_, "broadcast", what, data, bytes, data, bytes, [&](void* in, void* out) {
    ZINF_NCCL_CHECK(ncclBroadcast(in, out, bytes, ncclUint8, root, impl_->comm, impl_->stream), "broadcast", what);
  });
}

void NcclCollectives::reduce(const float* in, float* out, std::size_t n, int root, const char* what) {
  if (!impl_->comm) throw CommError(fmt::format("rank {}: reduce of {}: the communicator was aborted", rank_, what));
  // Only the root's output is written; the others stage it too, so any buffer they pass is fine.
  run_staged(*impl_, rank_, "reduce", what, in, n * sizeof(float), out, n * sizeof(float), [&](void* i, void* o) {
    ZINF_NCCL_CHECK(ncclReduce(i, o, n, ncclFloat32, ncclSum, root, impl_->comm, impl_->stream), "reduce", what);
  });
}

void NcclCollectives::barrier(const char* what) {
  float one = 1.0f;
  all_reduce(&one, 1, what);
}

void NcclCollectives::abort(const std::string& why) {
  bootstrap_.abort(why);
  std::abort();  // not reached: Collectives::abort does not return
}

std::unique_ptr<Collectives> make_device_collectives(Collectives& bootstrap, int device) {
  if (bootstrap.size() == 1) return std::make_unique<DeviceLocalCollectives>(device);
  return std::make_unique<NcclCollectives>(bootstrap, device);
}

#else

bool nccl_built() { return false; }

struct NcclCollectives::Impl {};

NcclCollectives::NcclCollectives(Collectives& bootstrap, int, std::chrono::seconds) : bootstrap_(bootstrap) {
  throw CommError("this zinf was built without NCCL (nccl.h / libnccl not found at configure time)");
}
NcclCollectives::~NcclCollectives() = default;
void NcclCollectives::all_gather(const void*, std::size_t, void*, const char*) {}
void NcclCollectives::reduce_scatter(const float*, float*, std::size_t, const char*) {}
void NcclCollectives::all_reduce(float*, std::size_t, const char*) {}
void NcclCollectives::all_reduce(double*, std::size_t, const char*) {}
void NcclCollectives::broadcast(void*, std::size_t, int, const char*) {}
void NcclCollectives::reduce(const float*, float*, std::size_t, int, const char*) {}
void NcclCollectives::barrier(const char*) {}
void NcclCollectives::abort(const std::string& why) {
  bootstrap_.abort(why);
  std::abort();  // not reached: Collectives::abort does not return
}

std::unique_ptr<Collectives> make_device_collectives(Collectives& bootstrap, int device) {
  if (bootstrap.size() == 1) return std::make_unique<DeviceLocalCollectives>(device);
  throw CommError(fmt::format("{} ranks on GPUs need NCCL, and this zinf was built without it", bootstrap.size()));
}

#endif

}  // namespace zinf::engine::cuda
