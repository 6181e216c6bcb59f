#include "engine/io/stream_io.hpp"

#include <chrono>
#include <stdexcept>
#include <vector>

namespace zinf::engine {

double stream_tensor(NvmeStore& store, NvmeStore::TensorId id, uint64_t bytes, bool write,
                     std::span<std::byte* const> buffers, size_t buffer_bytes,
                     const std::function<void(uint64_t)>& progress, uint64_t first) {
  if (buffers.empty() || buffer_bytes == 0) throw std::invalid_argument("stream_tensor: no buffers");
  std::vector<IoHandle> inflight(buffers.size());
  uint64_t next = 0, completed = 0;
  auto issue = [&](size_t slot) {
    if (next >= bytes) return;
    uint64_t n = std::min<uint64_t>(buffer_bytes, bytes - next);
    inflight[slot] = write ? store.write(id, first + next, buffers[slot], n) : store.read(id, first + next, buffers[slot], n);
    next += n;
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t s = 0; s < buffers.size(); ++s) issue(s);
  // Requests complete in order closely enough that waiting round-robin keeps every buffer busy.
  for (size_t s = 0; completed < bytes; s = (s + 1) % buffers.size()) {
    if (!inflight[s].valid()) continue;
    IoStatus st = inflight[s].wait();
    if (!st.ok()) {
      for (auto& h : inflight)
        if (h.valid()) h.wait();
      throw std::runtime_error(st.message);
    }
    inflight[s] = IoHandle();
    completed += std::min<uint64_t>(buffer_bytes, bytes - completed);
    if (progress) progress(completed);
    issue(s);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace zinf::engine
