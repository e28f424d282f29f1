// The backend tests/cuda/*_test.cpp exercise: the CUDA backend on a GPU (lfm_cuda_tests, ctest
// label `cuda`, skipped without one), or the same sources built against the CPU emulator of the
// CUDA runtime (lfm_cuda_emu_tests, LFM_TEST_CUDA_EMU; tests/cuda_emu/), which runs everywhere.
#pragma once

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

inline std::unique_ptr<Backend> make_gpu_backend(ThreadPool& pool) {
#ifdef LFM_TEST_CUDA_EMU
  return make_cuda_emu_backend(0, pool);
#else
  return make_cuda_backend(0, pool);
#endif
}

}  // namespace lfm::test
