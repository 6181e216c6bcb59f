// Collectives: the engine's one interface to its data-parallel peers (docs/DESIGN.md): all-gather of
// parameter shards, reduce-scatter of gradients, all-reduce of scalars, broadcast for owner-based
// partitioning; and, split into groups, the all-reduces of tensor parallelism. `LocalCollectives` is the single-rank implementation; `MpiCollectives` (when built
// with MPI) runs between processes launched by mpirun. One group is called from one thread at a
// time (the comm lane; a tensor-parallel group from the compute lane); calls are blocking for the caller, and peers that do not arrive
// within the timeout make the call throw CommError instead of hanging.
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

namespace zinf::engine {

class CommError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class Collectives {
public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // full[r*shard_bytes, (r+1)*shard_bytes) = rank r's shard, on every rank.
  virtual void all_gather(const void* shard, std::size_t shard_bytes, void* full, const char* what) = 0;
  // shard[i] = sum over ranks of full[rank*shard_elems + i].
  virtual void reduce_scatter(const float* full, float* shard, std::size_t shard_elems, const char* what) = 0;
  // data[i] = sum over ranks of data[i].
  virtual void all_reduce(float* data, std::size_t n, const char* what) = 0;
  virtual void all_reduce(double* data, std::size_t n, const char* what) = 0;
  // data = root's data, on every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root, const char* what) = 0;
  // out[i] = sum over ranks of in[i], on root only.
  virtual void reduce(const float* in, float* out, std::size_t n, int root, const char* what) = 0;
  virtual void barrier(const char* what) = 0;
  // The ranks that pass the same `color` as a group of their own, ordered by `key` (then by rank): a
  // collective over all ranks, like MPI_Comm_split. Tensor parallelism splits the job into its
  // tensor-parallel groups and its data-parallel groups this way. The new group shares this one's
  // timeout; calls on it may run on another thread than calls on this one. The device collectives
  // (NCCL) do not split: the CUDA backend trains tensor_parallel 1, and they throw CommError.
  virtual std::unique_ptr<Collectives> split(int color, int key, const char* what);
  // Ends the whole job with `why` on every rank (MPI_Abort); for a local run, throws.
  [[noreturn]] virtual void abort(const std::string& why) = 0;
};

class LocalCollectives final : public Collectives {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather(const void* shard, std::size_t shard_bytes, void* full, const char* what) override;
  void reduce_scatter(const float* full, float* shard, std::size_t shard_elems, const char* what) override;
  void all_reduce(float*, std::size_t, const char*) override {}
  void all_reduce(double*, std::size_t, const char*) override {}
  void broadcast(void*, std::size_t, int root, const char* what) override;
  void reduce(const float* in, float* out, std::size_t n, int root, const char* what) override;
  void barrier(const char*) override {}
  std::unique_ptr<Collectives> split(int, int, const char*) override { return std::make_unique<LocalCollectives>(); }
  [[noreturn]] void abort(const std::string& why) override;
};

// Whether this build has MPI, and whether the process was started by an MPI launcher (mpirun sets
// OMPI_COMM_WORLD_SIZE / PMI_SIZE).
bool mpi_available();
bool launched_by_mpi();

// The process's collectives: MPI when launched by mpirun with more than one rank (initializing MPI
// on first use), local otherwise. `timeout` bounds every wait for peers.
std::unique_ptr<Collectives> make_collectives(std::chrono::seconds timeout = std::chrono::seconds(120));

}  // namespace zinf::engine
