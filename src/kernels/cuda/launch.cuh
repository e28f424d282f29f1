// Kernel launches and dynamic shared memory through two macros, so the same kernels also compile
// for the host-side emulator of the CUDA runtime (tests/cuda_emu/, which defines both first):
//   LFM_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...)  is  kernel<<<...>>>(args...)
//   LFM_DYNAMIC_SHARED(T, name)                                      is  extern __shared__ T name[]
#pragma once

#ifndef LFM_LAUNCH
#define LFM_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif
// LFM_TRACE_LOAD(p, bytes) / LFM_TRACE_STORE(p, bytes): a global-memory access announced to the
// emulator's cost-model trace (tests/cuda_emu/emu_trace.h); nothing here.
#ifndef LFM_TRACE_LOAD
#define LFM_TRACE_LOAD(p, bytes) ((void)0)
#define LFM_TRACE_STORE(p, bytes) ((void)0)
#endif
#ifndef LFM_DYNAMIC_SHARED
#define LFM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
