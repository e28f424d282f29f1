// Owned, 64-byte aligned storage (cache-line and AVX-512 friendly). Buffers of 2 MiB and more
// are 2 MiB-aligned mappings offered to transparent huge pages (LFM_HUGEPAGES=0: ordinary
// pages). Contents start unspecified.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

namespace lfm {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer() { release(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), mapped_(std::exchange(o.mapped_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(mapped_, o.mapped_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  // True when the storage is a huge-page-eligible mapping (see above).
  bool huge_page_mapped() const { return mapped_ != 0; }
  // Whether big buffers become such mappings: Linux, not turned off by LFM_HUGEPAGES=0, not an
  // AddressSanitizer build.
  static bool huge_pages_enabled();

 private:
  void release() noexcept;

  void* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // length of the mapping, 0 when the storage came from aligned_alloc
};

// A std::vector allocator handing out 64-byte aligned storage: whole-vector loads and stores of
// scratch then never straddle cache lines (a straddling AVX-512 access costs two, and a load
// cannot be forwarded from a straddling store).
template <typename T>
struct Aligned64Allocator {
  using value_type = T;
  Aligned64Allocator() = default;
  template <typename U>
  Aligned64Allocator(const Aligned64Allocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t{64}); }
  template <typename U>
  bool operator==(const Aligned64Allocator<U>&) const noexcept { return true; }
};

template <typename T>
using AlignedVector = std::vector<T, Aligned64Allocator<T>>;

}  // namespace lfm
