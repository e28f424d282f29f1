#include "core/aligned_buffer.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace lfm {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

bool AlignedBuffer::huge_pages_enabled() {
#if defined(__linux__) && defined(MADV_HUGEPAGE) && !defined(__SANITIZE_ADDRESS__)
  static const bool wanted = [] {
    const char* env = std::getenv("LFM_HUGEPAGES");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return wanted;
#else
  return false;  // AddressSanitizer builds keep heap storage, whose bounds it checks
#endif
}

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (!bytes) return;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Weights and KV pools are streamed end to end every step: on 4 KiB pages a decode step takes a
  // TLB miss every 64 lines, which costs Q4_0 decode ~13% of its speed on the 2-core Xeon. Big
  // buffers are mapped 2 MiB-aligned and offered to transparent huge pages (granted in the
  // kernel's "madvise" and "always" modes; elsewhere they stay ordinary pages).
  if (bytes >= kHugePage && huge_pages_enabled()) {
    // Whole small pages only: the last partial 2 MiB stays small pages instead of a huge page
    // that would be mostly waste (a 2.4 MB matrix would otherwise hold 4 MiB).
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t len = (bytes + page - 1) / page * page;
    void* m = ::mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    // Trim the mapping to a 2 MiB-aligned window of len bytes.
    const uintptr_t base = reinterpret_cast<uintptr_t>(m);
    const uintptr_t start = (base + kHugePage - 1) / kHugePage * kHugePage;
    if (start > base) ::munmap(m, start - base);
    const uintptr_t end = start + len, map_end = base + len + kHugePage;
    if (map_end > end) ::munmap(reinterpret_cast<void*>(end), map_end - end);
    ::madvise(reinterpret_cast<void*>(start), len, MADV_HUGEPAGE);  // advisory: refusal leaves small pages
    data_ = reinterpret_cast<void*>(start);
    mapped_ = len;
    return;
  }
#endif
  data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!data_) throw std::bad_alloc();
}

void AlignedBuffer::release() noexcept {
#if defined(__linux__)
  if (mapped_) {
    ::munmap(data_, mapped_);
    data_ = nullptr;
    mapped_ = 0;
    return;
  }
#endif
  std::free(data_);
  data_ = nullptr;
}

}  // namespace lfm
