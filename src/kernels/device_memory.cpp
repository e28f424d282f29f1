#include "kernels/device_memory.h"

#include <cstring>
#include <new>

#include "core/aligned_buffer.h"
#include "core/error.h"

namespace lfm {

namespace {

class HostAllocation final : public DeviceAllocation {
 public:
  explicit HostAllocation(size_t bytes) : buf_(bytes) {
    data_ = buf_.data();
    size_ = bytes;
    if (bytes && !buf_.huge_page_mapped()) std::memset(data_, 0, bytes);  // a fresh mapping reads as zeros
  }

 private:
  AlignedBuffer buf_;
};

}  // namespace

DeviceBuffer DeviceMemory::allocate(size_t bytes) {
  try {
    return DeviceBuffer(std::make_unique<HostAllocation>(bytes));
  } catch (const std::bad_alloc&) {
    fail("memory: could not allocate ", bytes, " bytes of host memory");
  }
}

void DeviceMemory::upload(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void DeviceMemory::download(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void DeviceMemory::copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}
void DeviceMemory::fill_zero(void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}

DeviceMemory& host_memory() {
  static DeviceMemory host;
  return host;
}

void ensure_capacity(DeviceMemory& mem, DeviceBuffer& buf, size_t bytes) {
  if (buf.size() >= bytes) return;
  buf = DeviceBuffer();  // free first: the old and new buffer need not fit at once
  buf = mem.allocate(bytes);
}

}  // namespace lfm
