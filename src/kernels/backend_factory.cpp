#include "kernels/backend_factory.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "kernels/cpu_backend.h"
#ifdef LFM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace lfm {

DeviceKind parse_device(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (s == "cpu") return DeviceKind::kCpu;
  if (s == "cuda" || s == "gpu") return DeviceKind::kCuda;
  if (s == "auto") return DeviceKind::kAuto;
  fail("device: '", name, "' is not a device (expected cpu, cuda or auto)");
}

const char* device_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
    case DeviceKind::kAuto: break;
  }
  return "auto";
}

bool cuda_device_available(std::string* why) {
#ifdef LFM_HAVE_CUDA
  return cuda_device_present(why);
#else
  if (why) *why = "this lfm was built without CUDA (configure with -DLFM_CUDA=ON where nvcc is installed)";
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(DeviceKind kind, ThreadPool& pool) {
  if (kind == DeviceKind::kCpu) return make_cpu_backend(pool);
  std::string why;
  const bool gpu = cuda_device_available(&why);
  if (kind == DeviceKind::kAuto && !gpu) return make_cpu_backend(pool);
  LFM_CHECK(gpu, "device: --device cuda, but ", why);
#ifdef LFM_HAVE_CUDA
  return make_cuda_backend(0, pool);
#else
  return nullptr;  // not reached: cuda_device_available is false without CUDA
#endif
}

}  // namespace lfm
