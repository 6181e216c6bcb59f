#include "engine/memory/heap_release.hpp"

#include <malloc.h>

#include <cstddef>
#include <cstring>

// tcmalloc's C interface, present when zinf is linked with it (cli/CMakeLists.txt); weak, so that
// binaries on glibc's malloc (the tests, a build without tcmalloc) see null.
extern "C" int MallocExtension_SetNumericProperty(const char* property, size_t value) __attribute__((weak));
extern "C" int MallocExtension_GetNumericProperty(const char* property, size_t* value) __attribute__((weak));
extern "C" void MallocExtension_ReleaseFreeMemory() __attribute__((weak));

namespace zinf::engine {

HeapRelease release_freed_memory_promptly(const char* env) {
  HeapRelease h;
  const bool tcmalloc = MallocExtension_SetNumericProperty != nullptr;
  h.allocator = tcmalloc ? "tcmalloc" : "glibc malloc";
  if (env && std::strcmp(env, "0") == 0) {
    h.how = "left as it is (ZINF_HEAP_RELEASE=0): freed memory may stay with the allocator, above the plan";
    return h;
  }
  if (tcmalloc) {
    size_t on = 0;
    h.prompt = MallocExtension_SetNumericProperty("tcmalloc.aggressive_memory_decommit", 1) != 0 &&
               MallocExtension_GetNumericProperty &&
               MallocExtension_GetNumericProperty("tcmalloc.aggressive_memory_decommit", &on) != 0 && on == 1;
    if (MallocExtension_ReleaseFreeMemory) MallocExtension_ReleaseFreeMemory();
    h.how = h.prompt ? "aggressive decommit: freed spans go back to the system at once"
                     : "tcmalloc refused aggressive decommit: freed memory may stay with it, above the plan";
    return h;
  }
  constexpr int kMiB = 1 << 20;
  h.prompt = mallopt(M_MMAP_THRESHOLD, kMiB) == 1 && mallopt(M_TRIM_THRESHOLD, kMiB) == 1;
  malloc_trim(0);
  h.how = h.prompt ? "mmap threshold fixed at 1 MiB, heap trimmed above 1 MiB: large buffers unmapped when freed"
                   : "mallopt refused: freed memory may stay with the allocator, above the plan";
  return h;
}

std::string describe(const HeapRelease& h) { return "heap: " + h.allocator + ", " + h.how; }

}  // namespace zinf::engine
