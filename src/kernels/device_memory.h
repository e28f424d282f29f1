// The memory a backend computes on: host memory for the CPU backends, device memory for a GPU
// backend. Activations, step scratch, state pools and prepared weights live here; the host moves
// bytes in and out only through upload/download. Allocation sizes and failures are reported
// with the backend's name and the bytes asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace lfm {

// One allocation: its address in the owning memory and its size. Freed by its destructor.
class DeviceAllocation {
 public:
  virtual ~DeviceAllocation() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// An owned buffer in some DeviceMemory (empty when default-constructed).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::unique_ptr<DeviceAllocation> a) : a_(std::move(a)) {}
  void* data() const { return a_ ? a_->data() : nullptr; }
  size_t size() const { return a_ ? a_->size() : 0; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }

 private:
  std::unique_ptr<DeviceAllocation> a_;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Whether this is the host's memory: its pointers may be read and written by host code.
  virtual bool host_memory() const { return true; }
  // bytes of zeroed memory, 64-byte aligned (2 MiB-aligned huge-page candidates on the host from
  // 2 MiB up, see core/aligned_buffer.h). Throws lfm::Error naming the size when it cannot.
  virtual DeviceBuffer allocate(size_t bytes);
  // Host → this memory, this memory → host, within this memory, and zeroing. On a device they are
  // ordered with the backend's ops (a download waits for the ops before it).
  virtual void upload(void* dst, const void* host_src, size_t bytes);
  virtual void download(void* host_dst, const void* src, size_t bytes);
  virtual void copy(void* dst, const void* src, size_t bytes);
  virtual void fill_zero(void* dst, size_t bytes);
};

// The host's memory (what the CPU backends use; a StateCache without a backend allocates here).
DeviceMemory& host_memory();

// Grows buf to hold at least `bytes` (contents are not kept when it grows).
void ensure_capacity(DeviceMemory& mem, DeviceBuffer& buf, size_t bytes);

}  // namespace lfm
