// The backend tests/cuda/*_test.cpp exercise: the CUDA backend on a GPU (lfm_cuda_tests, ctest
// label `cuda`, skipped without one), or the same sources built against the CPU emulator of the
// CUDA runtime (lfm_cuda_emu_tests, LFM_TEST_CUDA_EMU; tests/cuda_emu/), which runs everywhere.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#ifdef LFM_TEST_CUDA_EMU
#include "cuda_emu/cuda_emu_backend.h"
#else
#include "kernels/cuda/cuda_backend.h"
#endif

namespace lfm::test {

// Whether the backend under test is the emulator: tests that only repeat the same launches for
// the GPU's sake (more decode steps of one shape) run fewer of them there.
#ifdef LFM_TEST_CUDA_EMU
constexpr bool kGpuIsEmulated = true;
#else
constexpr bool kGpuIsEmulated = false;
#endif

inline bool gpu_present(std::string* why) {
#ifdef LFM_TEST_CUDA_EMU
  return cuda_emu_device_present(why);
#else
  return cuda_device_present(why);
#endif
}

// Sets an environment variable for the life of the object (the backend reads LFM_CUDA_GRAPHS,
// LFM_CUDA_BUCKETS and LFM_CUDA_PROFILE when it is made).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* was = std::getenv(name);
    had_ = was != nullptr;
    if (had_) old_ = was;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

inline std::unique_ptr<Backend> make_gpu_backend(ThreadPool& pool) {
#ifdef LFM_TEST_CUDA_EMU
  return make_cuda_emu_backend(0, pool);
#else
  return make_cuda_backend(0, pool);
#endif
}

}  // namespace lfm::test
