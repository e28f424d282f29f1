// The backends a parameterised test runs on, by name: "cpu" (the CPU backend this machine
// selects), "fake-device" (tests/fake_device_backend.h: memory the host cannot read),
// "fake-device-replay" (the same, its ops queued and replayed as recorded graphs, as CUDA graphs
// do) and, in a CUDA build, "cuda".
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kernels/cpu_backend.h"
#include "model/model.h"
#include "fake_device_backend.h"
#if LFM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace lfm::test {

// The named backend, and in `load` the backend that prepares a model's weights (none for the
// CPU: the shared CPU preparation). Null, with `why` set, where "cuda" cannot run here.
inline std::unique_ptr<Backend> make_named_backend(const std::string& name, ThreadPool& pool, LoadOptions& load,
                                                   std::string* why) {
  std::unique_ptr<Backend> be;
  if (name == "fake-device" || name == "fake-device-replay") {
    be = std::make_unique<FakeDeviceBackend>(pool, name == "fake-device-replay");
  } else if (name == "cuda") {
#if LFM_HAVE_CUDA
    if (!cuda_device_present(why)) return nullptr;
    be = make_cuda_backend(0, pool);
#else
    *why = "built without CUDA";
    return nullptr;
#endif
  } else {
    return make_cpu_backend(pool);
  }
  load.backend = be.get();
  return be;
}

// A parameterised test's name from its (fixture, backend) parameters: the fixture's first
// `prefix` characters and the backend, e.g. "lfm2_c_l_fake_device" (filters such as '*cuda*').
template <typename Info>
std::string fixture_backend_name(const Info& info, size_t prefix = 8) {
  std::string b = std::get<1>(info.param);
  for (char& ch : b)
    if (ch == '-') ch = '_';
  return std::get<0>(info.param).substr(0, prefix) + "_" + b;
}

}  // namespace lfm::test
