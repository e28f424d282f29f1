// Kernel launches and dynamic shared memory through two macros, so the same kernels also compile
// for the host-side emulator of the CUDA runtime (tests/cuda_emu/, which defines both first):
//   LFM_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...)  is  kernel<<<...>>>(args...)
//   LFM_DYNAMIC_SHARED(T, name)                                      is  extern __shared__ T name[]
#pragma once

#ifndef LFM_LAUNCH
#define LFM_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#endif
// LFM_TRACE_LOAD(p, bytes) / LFM_TRACE_STORE(p, bytes): a global-memory access announced to the
// emulator's cost-model trace (tests/cuda_emu/emu_trace.h); LFM_TRACE_SERIAL_PASSES(n): n passes
// over a row that one block makes alone at a launch's end (latency the bytes do not show). Nothing here.
#ifndef LFM_TRACE_LOAD
#define LFM_TRACE_LOAD(p, bytes) ((void)0)
#define LFM_TRACE_STORE(p, bytes) ((void)0)
#define LFM_TRACE_SERIAL_PASSES(n) ((void)0)
#endif
#ifndef LFM_DYNAMIC_SHARED
#define LFM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

// Programmatic dependent launch (sm_90). LFM_LAUNCH_PDL(pdl, grid, block, shared_bytes, stream,
// kernel)(args...) launches as LFM_LAUNCH does, but with pdl true the kernel's blocks may start
// while the kernel before it in the stream is still finishing, so the gap between the two fills
// with the new kernel's start. Every thread of such a kernel calls LFM_GRID_DEPENDENCY_WAIT()
// (griddepcontrol.wait: the kernels before it done, their writes visible) before it reads or
// writes any global memory an earlier kernel touches; before the wait it may only ask for
// memory no kernel writes (LFM_PREFETCH_L2(p, bytes): p 16-byte aligned, bytes a multiple of
// 16, into L2 without waiting). The emulator fails a launch whose thread accesses announced
// global memory before its wait. Without pdl the wait is a no-op.
#ifndef LFM_LAUNCH_PDL
#include <cuda_runtime.h>

#include <utility>

namespace lfm::cuda {
template <typename... P>
struct PdlLaunch {
  void (*kernel)(P...);
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  bool pdl;
  template <typename... A>
  void operator()(A&&... args) const {
    if (!pdl) {
      kernel<<<grid, block, shared_bytes, stream>>>(std::forward<A>(args)...);
      return;
    }
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = shared_bytes;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    // A failed launch is the stream's next error (cudaGetLastError), as for <<<>>>.
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
  }
};
template <typename... P>
PdlLaunch<P...> pdl_launch(bool pdl, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                           void (*kernel)(P...)) {
  return PdlLaunch<P...>{kernel, grid, block, shared_bytes, stream, pdl};
}
}  // namespace lfm::cuda
#define LFM_LAUNCH_PDL(pdl, grid, block, shared_bytes, stream, ...) \
  ::lfm::cuda::pdl_launch(pdl, grid, block, shared_bytes, stream, __VA_ARGS__)
#endif
#ifndef LFM_GRID_DEPENDENCY_WAIT
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LFM_GRID_DEPENDENCY_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define LFM_PREFETCH_L2(p, bytes) \
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(static_cast<unsigned>(bytes)) : "memory")
#else
#define LFM_GRID_DEPENDENCY_WAIT() ((void)0)
#define LFM_PREFETCH_L2(p, bytes) ((void)(p), (void)(bytes))
#endif
#endif
