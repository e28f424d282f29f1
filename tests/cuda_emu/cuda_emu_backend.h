// The CUDA backend built against the emulator (tests/cuda_emu/cuda_emu.h): the same sources as
// kernels/cuda/cuda_backend.h's, its functions renamed so both link into one test binary.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace lfm {

class ThreadPool;

bool cuda_emu_device_present(std::string* why);
std::unique_ptr<Backend> make_cuda_emu_backend(int device, ThreadPool& pool);
bool cuda_emu_supports_weight_type(DType t);

}  // namespace lfm
