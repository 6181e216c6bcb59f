// Collectives between GPUs for the CUDA backend (engine/comm/collectives.hpp's interface, whose
// buffers here may be device or host memory: host buffers are staged through device memory).
//
// NcclCollectives runs NCCL, one rank per process and one GPU per rank, bootstrapped through
// another Collectives (MPI under mpirun, local for one rank) that broadcasts the ncclUniqueId.
// Every operation is enqueued on the object's own CUDA stream, so it overlaps kernels that other
// lanes run on theirs, and the call returns once that stream has finished it; a peer that does not
// arrive within `timeout` aborts the communicator and throws CommError naming the operation.
// Like every Collectives, it is called from one thread at a time (the comm lane); it makes its
// device current on each call.
//
// DeviceLocalCollectives is the one-rank case without NCCL: copies between device buffers.
#pragma once
#include <chrono>
#include <memory>

#include "engine/comm/collectives.hpp"

namespace zinf::engine::cuda {

class NcclCollectives final : public Collectives {
public:
  NcclCollectives(Collectives& bootstrap, int device, std::chrono::seconds timeout = std::chrono::seconds(120));
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_gather(const void* shard, std::size_t shard_bytes, void* full, const char* what) override;
  void reduce_scatter(const float* full, float* shard, std::size_t shard_elems, const char* what) override;
  void all_reduce(float* data, std::size_t n, const char* what) override;
  void all_reduce(double* data, std::size_t n, const char* what) override;
  void broadcast(void* data, std::size_t bytes, int root, const char* what) override;
  void reduce(const float* in, float* out, std::size_t n, int root, const char* what) override;
  void barrier(const char* what) override;
  [[noreturn]] void abort(const std::string& why) override;

  struct Impl;

private:
  Collectives& bootstrap_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<Impl> impl_;
};

class DeviceLocalCollectives final : public Collectives {
public:
  explicit DeviceLocalCollectives(int device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather(const void* shard, std::size_t shard_bytes, void* full, const char* what) override;
  void reduce_scatter(const float* full, float* shard, std::size_t shard_elems, const char* what) override;
  void all_reduce(float*, std::size_t, const char*) override {}
  void all_reduce(double*, std::size_t, const char*) override {}
  void broadcast(void*, std::size_t, int root, const char* what) override;
  void reduce(const float* in, float* out, std::size_t n, int root, const char* what) override;
  void barrier(const char*) override {}
  [[noreturn]] void abort(const std::string& why) override;

private:
  int device_;
};

bool nccl_built();

// The CUDA backend's collectives: DeviceLocalCollectives for one rank, NCCL for more (throws
// CommError when this build has no NCCL).
std::unique_ptr<Collectives> make_device_collectives(Collectives& bootstrap, int device);

}  // namespace zinf::engine::cuda
