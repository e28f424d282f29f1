// glibc malloc settings for a long-running server (issue 55). By default glibc gives each thread
// that allocates its own arena (up to 8 per core) and, once a large block has been freed, raises
// its mmap threshold up to 32 MiB, so later blocks of that size come from the arena and stay in
// the process after they are freed: a server whose connection threads each decoded a large
// request once kept that memory per thread (+1.37 GB after 12 requests in issue 55).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lfm {

struct AllocatorSettings {
  int max_arenas = 4;                    // M_ARENA_MAX: threads share these instead of one each
  size_t mmap_threshold = 1u << 20;      // M_MMAP_THRESHOLD: blocks from 1 MiB up are mapped and
                                         // unmapped on free (fixing it stops glibc raising it)
  size_t trim_threshold = 16u << 20;     // M_TRIM_THRESHOLD: free memory at an arena's top beyond
                                         // this goes back to the system
};

// Applies the settings (call before the threads that allocate start). Returns false when the C
// library is not glibc or refused one of them (the process then keeps the library's defaults).
bool configure_allocator(const AllocatorSettings& s);

// Hands the free memory of every arena back to the system (glibc malloc_trim): called after a
// request freed a large working set. Returns false where there is nothing to call.
bool release_free_memory();

// This process's resident set (VmRSS) in bytes; -1 when unknown.
int64_t resident_bytes();

}  // namespace lfm
