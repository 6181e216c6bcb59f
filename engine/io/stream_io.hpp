// Streams a whole byte range of a store tensor through a set of equal buffers, one request per
// buffer kept in flight, as an offload lane does with pinned buffers. Used to measure the store
// (experiments/bench_nvme_store, `zinf io-bench`). Stateless; the caller owns store and buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "engine/io/nvme_store.hpp"

namespace zinf::engine {

// Reads (or writes) [first, first + bytes) of `id`, buffer-sized requests, all buffers in flight.
// Returns the elapsed seconds; throws std::runtime_error with the store's message on the first
// failure. `progress`, if set, is called with the bytes completed so far after each request.
double stream_tensor(NvmeStore& store, NvmeStore::TensorId id, uint64_t bytes, bool write,
                     std::span<std::byte* const> buffers, size_t buffer_bytes,
                     const std::function<void(uint64_t)>& progress = {}, uint64_t first = 0);

}  // namespace zinf::engine
