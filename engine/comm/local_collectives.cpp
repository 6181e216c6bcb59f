#include <cstdlib>
#include <cstring>

#include "engine/comm/collectives.hpp"

namespace zinf::engine {

void LocalCollectives::all_gather(const void* shard, std::size_t shard_bytes, void* full, const char*) {
  if (shard != full) std::memmove(full, shard, shard_bytes);
}

void LocalCollectives::reduce_scatter(const float* full, float* shard, std::size_t n, const char*) {
  if (shard != full) std::memmove(shard, full, n * sizeof(float));
}

void LocalCollectives::broadcast(void*, std::size_t, int root, const char* what) {
  if (root != 0) throw CommError(std::string("broadcast of ") + what + ": root rank out of range in a single-rank run");
}

void LocalCollectives::reduce(const float* in, float* out, std::size_t n, int root, const char* what) {
  if (root != 0) throw CommError(std::string("reduce of ") + what + ": root rank out of range in a single-rank run");
  if (in != out) std::memmove(out, in, n * sizeof(float));
}

std::unique_ptr<Collectives> Collectives::split(int, int, const char* what) {
  throw CommError(std::string("split into ") + what + ": these collectives cannot be split into groups");
}

void LocalCollectives::abort(const std::string& why) { throw CommError(why); }

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

}  // namespace zinf::engine
