// Kernel launches and dynamic shared memory through two macros, so the same kernels also compile
// for the host-side emulator of the CUDA runtime (tests/cuda_emu/, which defines both first):
//   LFM_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...)  is  kernel<<<...>>>(args...)
//   LFM_DYNAMIC_SHARED(T, name)                                      is  extern __shared__ T name[]
#pragma once

#ifndef LFM_LAUNCH
#define LFM_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif
#ifndef LFM_DYNAMIC_SHARED
#define LFM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
