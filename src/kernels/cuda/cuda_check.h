// CUDA runtime and cuBLAS errors as lfm::Error naming the call and the error.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cublas_library.h"

#define LFM_CUDA_CHECK(call)                                                                              \
  do {                                                                                                    \
    const cudaError_t lfm_err_ = (call);                                                                  \
    if (lfm_err_ != cudaSuccess) ::lfm::fail("cuda: ", #call, " failed: ", cudaGetErrorString(lfm_err_)); \
  } while (0)

#define LFM_CUBLAS_CHECK(call)                                                            \
  do {                                                                                    \
    const cublasStatus_t lfm_st_ = (call);                                                \
    if (lfm_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::lfm::fail("cublas: ", #call, " failed: ", ::lfm::cuda::cublas_library().status_string(lfm_st_)); \
  } while (0)
