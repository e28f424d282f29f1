#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"

namespace lfm {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path, "file:");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("file: cannot examine '", path, "': ", std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail("file: cannot map '", path, "' (", size_, " bytes): ", std::strerror(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void MappedFile::drop_pages(const void* p, size_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  if (!data_ || b < data_ || b + n > data_ + size_) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // advisory: failure is harmless
}

void MappedFile::detach_from_file(std::vector<std::pair<const void*, size_t>> keep) const {
  if (!data_) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t end = (begin + size_ + page - 1) / page * page;  // the mapping's last page, whole
  // The kept ranges as whole pages inside the mapping, in order, merged.
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;
  for (const auto& [p, n] : keep) {
    const uintptr_t lo = std::max(begin, reinterpret_cast<uintptr_t>(p) / page * page);
    const uintptr_t hi = std::min(end, (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page * page);
    if (hi > lo) spans.push_back({lo, hi});
  }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<uintptr_t, uintptr_t>> merged;
  for (const auto& s : spans) {
    if (!merged.empty() && s.first <= merged.back().second) merged.back().second = std::max(merged.back().second, s.second);
    else merged.push_back(s);
  }
  // Anonymous pages over [lo, hi), at the same addresses (MAP_FIXED replaces the file's pages).
  const auto anonymous = [&](uintptr_t lo, uintptr_t hi, int prot) {
    if (hi <= lo) return;
    void* at = ::mmap(reinterpret_cast<void*>(lo), hi - lo, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (at == MAP_FAILED) fail("file: cannot let go of '", path_, "' (", hi - lo, " bytes of anonymous memory): ", std::strerror(errno));
  };
  // Kept spans in pieces of at most 64 MiB, so the copy that bridges the remap stays small.
  constexpr uintptr_t kPiece = uintptr_t{64} << 20;
  std::unique_ptr<uint8_t[]> bounce(new uint8_t[std::min<uintptr_t>(kPiece, end - begin)]);
  uintptr_t at = begin;
  for (const auto& [lo, hi] : merged) {
    anonymous(at, lo, PROT_READ);  // the gap before: never read again, zeros
    for (uintptr_t p = lo; p < hi; p += kPiece) {
      const uintptr_t q = std::min(hi, p + kPiece);
      std::memcpy(bounce.get(), reinterpret_cast<const void*>(p), q - p);
      anonymous(p, q, PROT_READ | PROT_WRITE);
      std::memcpy(reinterpret_cast<void*>(p), bounce.get(), q - p);
      ::mprotect(reinterpret_cast<void*>(p), q - p, PROT_READ);  // read-only again, as mapped
    }
    at = hi;
  }
  anonymous(at, end, PROT_READ);
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace lfm
