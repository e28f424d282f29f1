// The one place backends are made: `--device cpu|cuda|auto` on every command that runs a model.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace lfm {

class ThreadPool;

enum class DeviceKind { kAuto, kCpu, kCuda };

// "cpu", "cuda" or "auto" (case-insensitive); throws lfm::Error naming the value otherwise.
DeviceKind parse_device(const std::string& name);
const char* device_name(DeviceKind kind);

// Whether this build has the CUDA backend and the machine a usable GPU; when not, *why says which
// (no CUDA in this build, no device found, the driver's error).
bool cuda_device_available(std::string* why = nullptr);

// The backend for `kind`: cpu → the best CPU backend (cpu_backend.h; LFM_ISA lowers it), cuda →
// the CUDA backend on GPU 0 (throws lfm::Error saying why when there is none), auto → CUDA when a
// GPU is available, else the CPU. `pool` serves the CPU backends (a CUDA backend uses it only for
// host-side work).
std::unique_ptr<Backend> make_backend(DeviceKind kind, ThreadPool& pool);

}  // namespace lfm
