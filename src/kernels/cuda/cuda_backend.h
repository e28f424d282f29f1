// The CUDA backend (built with -DLFM_CUDA=ON): the same Backend interface, computed on an NVIDIA
// GPU. Activations, scratch, KV blocks and conv slots live in device memory; weights are uploaded
// once by prepare_weights (as stored: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K); the host keeps
// the block tables and the scheduler. This header has no CUDA types: the rest of lfm includes it.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace lfm {

class ThreadPool;

// Whether a CUDA device can be used; when not, *why holds the runtime's reason (no device, no
// driver, a driver older than the runtime).
bool cuda_device_present(std::string* why);

// The backend on device `device`; throws lfm::Error naming the device and the CUDA error.
std::unique_ptr<Backend> make_cuda_backend(int device, ThreadPool& pool);

// Weight types the CUDA kernels multiply (others are refused at load with the tensor's name).
bool cuda_supports_weight_type(DType t);

}  // namespace lfm
