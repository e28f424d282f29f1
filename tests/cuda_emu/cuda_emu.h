// The CUDA emulator's prelude: force-included (-include) before every source of the CUDA backend
// when CMake builds them a second time with the host compiler as `lfm_cuda_emu`, the backend that
// runs on the CPU where no GPU is lent (every CI machine). It keeps the real toolkit headers for
// types, constants and the bf16/f16 host conversions, then
//   - turns the kernels' CUDA C++ into plain C++: __global__/__device__ vanish, __shared__ is
//     `static` (one block runs at a time), threadIdx & co. read the emulated thread's indices,
//     __syncthreads/__shfl*_sync/__ballot_sync/atomicAdd go to the fiber scheduler (emu_threads.h);
//   - renames every CUDA runtime and cuBLAS call the backend makes to lfm_emu_* (emu_runtime.cpp),
//     so the emulated backend never calls the real runtime linked into the same test binary;
//   - renames the backend's own namespace (lfm::cuda → lfm::cuda_emu) and its three public
//     functions, so the emulated copy links beside the real one.
// Numbers differ from a GPU's only where the hardware's math does (expf, FMA contraction, cuBLAS's
// order); control flow, indexing, barriers, warp exchanges, graph capture and memory bounds are
// the kernels' own.
#pragma once

#define LFM_CUDA_EMULATION 1

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cuda_emu/emu_threads.h"
#include "cuda_emu/emu_trace.h"
#include "cuda_emu/emu_wmma.h"

// ---- CUDA C++ keywords ----
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __forceinline__
#define __forceinline__ inline

#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (::lfm_emu::thread_idx())
#define blockIdx (::lfm_emu::block_idx())
#define blockDim (::lfm_emu::block_dim())
#define gridDim (::lfm_emu::grid_dim())

#define LFM_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::lfm_emu::launcher(#__VA_ARGS__, grid, block, shared_bytes, stream, __VA_ARGS__)
#define LFM_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::lfm_emu::dynamic_shared())
#define LFM_LAUNCH_PDL(pdl, grid, block, shared_bytes, stream, ...) \
  ::lfm_emu::launcher(#__VA_ARGS__, grid, block, shared_bytes, stream, __VA_ARGS__, pdl)
#define LFM_GRID_DEPENDENCY_WAIT() ::lfm_emu::grid_dependency_wait()
#define LFM_PREFETCH_L2(p, bytes) ((void)(p), (void)(bytes))

// ---- device intrinsics ----
inline void __syncthreads() { ::lfm_emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::lfm_emu::sync_warp(); }
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = ::lfm_emu::lane_id();
  return ::lfm_emu::warp_shuffle(mask, v, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::lfm_emu::lane_id(), src = lane ^ lane_mask;
  return ::lfm_emu::warp_shuffle(mask, v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return ::lfm_emu::warp_ballot(mask, predicate != 0); }
// block_reduce.cuh's warp_reduce and warp_reduce_each: the same butterflies in one exchange.
#define LFM_CUDA_EMULATED 1
template <typename T, typename Op>
T lfm_emu_warp_reduce(T v, Op op) {
  ::lfm_emu::warp_butterfly_each<1>(&v, op);
  return v;
}
template <int N, typename T, typename Op>
void lfm_emu_warp_reduce_each(T* v, Op op) {
  ::lfm_emu::warp_butterfly_each<N>(v, op);
}
// One block's threads run on one OS thread, switching only at barriers: a read-modify-write is atomic.
template <typename T>
T atomicAdd(T* address, T v) {
  const T old = *address;
  *address = old + v;
  return old;
}
// Blocks run one after another: every write is visible to the blocks after it.
inline void __threadfence() {}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline int __popc(unsigned u) { return std::popcount(u); }
// CUDA's global integer min overloads (the kernels use min).
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }

// ---- the CUDA runtime and cuBLAS, renamed (emu_runtime.cpp) ----
#undef cudaGetDeviceProperties
#undef cudaStreamBeginCapture
#undef cudaStreamEndCapture
#undef cudaGraphInstantiate
#undef cudaGraphLaunch
#undef cudaMemcpyAsync
#undef cudaMemsetAsync
#undef cudaStreamSynchronize
#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#undef cublasSgemm
#undef cublasGetStatusString
#undef cublasSetWorkspace
#undef cublasSetMathMode
#undef cublasGemmEx

#undef cudaEventCreate
#undef cudaEventDestroy
#undef cudaEventRecord
#undef cudaEventSynchronize
#undef cudaEventElapsedTime
#define cudaEventCreate lfm_emu_cudaEventCreate
#define cudaEventDestroy lfm_emu_cudaEventDestroy
#define cudaEventRecord lfm_emu_cudaEventRecord
#define cudaEventSynchronize lfm_emu_cudaEventSynchronize
#define cudaEventElapsedTime lfm_emu_cudaEventElapsedTime
#define cudaGetLastError lfm_emu_cudaGetLastError
#define cudaGetErrorString lfm_emu_cudaGetErrorString
#define cudaGetDeviceCount lfm_emu_cudaGetDeviceCount
#define cudaSetDevice lfm_emu_cudaSetDevice
#define cudaGetDeviceProperties lfm_emu_cudaGetDeviceProperties
#define cudaMemGetInfo lfm_emu_cudaMemGetInfo
#define cudaMalloc lfm_emu_cudaMalloc
#define cudaFree lfm_emu_cudaFree
#define cudaHostAlloc lfm_emu_cudaHostAlloc
#define cudaFreeHost lfm_emu_cudaFreeHost
#define cudaMemcpyAsync lfm_emu_cudaMemcpyAsync
#define cudaMemsetAsync lfm_emu_cudaMemsetAsync
#define cudaStreamCreateWithFlags lfm_emu_cudaStreamCreateWithFlags
#define cudaStreamDestroy lfm_emu_cudaStreamDestroy
#define cudaStreamSynchronize lfm_emu_cudaStreamSynchronize
#define cudaStreamBeginCapture lfm_emu_cudaStreamBeginCapture
#define cudaStreamEndCapture lfm_emu_cudaStreamEndCapture
#define cudaGraphInstantiate lfm_emu_cudaGraphInstantiate
#define cudaGraphLaunch lfm_emu_cudaGraphLaunch
#define cudaGraphDestroy lfm_emu_cudaGraphDestroy
#define cudaGraphExecDestroy lfm_emu_cudaGraphExecDestroy
#define cudaFuncSetAttribute lfm_emu_cudaFuncSetAttribute
#define cublasCreate lfm_emu_cublasCreate
#define cublasDestroy lfm_emu_cublasDestroy
#define cublasSetStream lfm_emu_cublasSetStream
#define cublasSetWorkspace lfm_emu_cublasSetWorkspace
#define cublasSetMathMode lfm_emu_cublasSetMathMode
#define cublasGetStatusString lfm_emu_cublasGetStatusString
#define cublasSgemm lfm_emu_cublasSgemm
#define cublasGemmEx lfm_emu_cublasGemmEx

// Events: a stream's work runs when it is submitted, so an event records the time it is recorded.
cudaError_t lfm_emu_cudaEventCreate(cudaEvent_t* e);
cudaError_t lfm_emu_cudaEventDestroy(cudaEvent_t e);
cudaError_t lfm_emu_cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t lfm_emu_cudaEventSynchronize(cudaEvent_t e);
cudaError_t lfm_emu_cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t lfm_emu_cudaGetLastError();
const char* lfm_emu_cudaGetErrorString(cudaError_t err);
cudaError_t lfm_emu_cudaGetDeviceCount(int* n);
cudaError_t lfm_emu_cudaSetDevice(int device);
cudaError_t lfm_emu_cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t lfm_emu_cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t lfm_emu_cudaMalloc(void** p, size_t bytes);
cudaError_t lfm_emu_cudaFree(void* p);
cudaError_t lfm_emu_cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t lfm_emu_cudaFreeHost(void* p);
cudaError_t lfm_emu_cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t lfm_emu_cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s);
cudaError_t lfm_emu_cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t lfm_emu_cudaStreamDestroy(cudaStream_t s);
cudaError_t lfm_emu_cudaStreamSynchronize(cudaStream_t s);
cudaError_t lfm_emu_cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t lfm_emu_cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t lfm_emu_cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t lfm_emu_cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t lfm_emu_cudaGraphDestroy(cudaGraph_t graph);
cudaError_t lfm_emu_cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t lfm_emu_set_max_dynamic_shared(const void* kernel, int bytes);
template <typename F>
cudaError_t lfm_emu_cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  return lfm_emu_set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
}
cublasStatus_t lfm_emu_cublasCreate(cublasHandle_t* h);
cublasStatus_t lfm_emu_cublasDestroy(cublasHandle_t h);
cublasStatus_t lfm_emu_cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t lfm_emu_cublasSetWorkspace(cublasHandle_t h, void* workspace, size_t bytes);
cublasStatus_t lfm_emu_cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
const char* lfm_emu_cublasGetStatusString(cublasStatus_t st);
cublasStatus_t lfm_emu_cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const float* alpha, const float* a, int lda, const float* b, int ldb,
                                   const float* beta, float* c, int ldc);
cublasStatus_t lfm_emu_cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                    const void* alpha, const void* a, cudaDataType_t at, int lda, const void* b,
                                    cudaDataType_t bt, int ldb, const void* beta, void* c, cudaDataType_t ct, int ldc,
                                    cublasComputeType_t compute, cublasGemmAlgo_t algo);

// ---- the backend's names: its own namespace and its three public functions ----
#define cuda cuda_emu
#define make_cuda_backend make_cuda_emu_backend
#define cuda_device_present cuda_emu_device_present
#define cuda_supports_weight_type cuda_emu_supports_weight_type
