// What the emulator's parts share (not seen by the emulated backend's sources).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace lfm_emu {

// Runs `op` now, in order, or appends it to the graph being captured on `s`. An exception from
// the op becomes the runtime's fault (every later call on a stream reports it), as a kernel that
// faults on a GPU poisons its context.
cudaError_t stream_op(cudaStream_t s, std::function<void()> op);
// The launch-configuration error cudaGetLastError reports next (not sticky).
void set_launch_error(cudaError_t err, const std::string& detail);
// Bytes of dynamic shared memory `kernel` may use (48 KiB unless raised by cudaFuncSetAttribute).
size_t max_dynamic_shared(const void* kernel);
// Verifies the guard bytes after every device allocation; throws naming `kernel` when one changed.
void check_guards(const char* kernel);
// The last error's message, and a reset of the device's fault (what cudaDeviceReset gives a
// program on a GPU): for the emulator's own tests.
std::string last_error_detail();
void clear_fault();

}  // namespace lfm_emu
