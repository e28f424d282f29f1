#include "core/allocator.h"

#include <fstream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace lfm {

bool configure_allocator(const AllocatorSettings& s) {
#if defined(__GLIBC__)
  bool ok = mallopt(M_ARENA_MAX, s.max_arenas < 1 ? 1 : s.max_arenas) == 1;
  ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(s.mmap_threshold)) == 1 && ok;
  ok = mallopt(M_TRIM_THRESHOLD, static_cast<int>(s.trim_threshold)) == 1 && ok;
  return ok;
#else
  (void)s;
  return false;
#endif
}

bool release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
  return true;
#else
  return false;
#endif
}

int64_t resident_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

}  // namespace lfm
