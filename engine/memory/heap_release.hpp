#pragma once
// The plan's RAM is a contract the run is measured against (peak RSS), so memory a step frees must
// leave the process when it is freed, not stay cached by the allocator for a later request of
// another size. zinf links tcmalloc (minimal) where it is installed; tcmalloc keeps freed spans
// until it decides to scavenge them, which at 0.5x this machine's RAM held 0.8 GB (12 %) beyond
// the Program's peak. glibc's malloc adapts its mmap threshold upward after large frees and then
// serves large buffers from a heap it trims only at the top.
#include <string>

namespace zinf::engine {

struct HeapRelease {
  std::string allocator;  // "tcmalloc" or "glibc malloc"
  bool prompt = false;    // freed memory goes back to the system when freed
  std::string how;        // what was set, or why nothing was
};

// Makes the allocator return freed memory promptly: tcmalloc's aggressive decommit, or glibc's
// mmap threshold fixed at 1 MiB (large buffers mapped on their own, unmapped when freed) with the
// heap trimmed above 1 MiB. `env` is ZINF_HEAP_RELEASE: "0" leaves the allocator as it is (for the
// benchmark that measures what prompt release costs); anything else, or null, sets it.
HeapRelease release_freed_memory_promptly(const char* env);
std::string describe(const HeapRelease& h);

}  // namespace zinf::engine
