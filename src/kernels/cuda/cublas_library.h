// cuBLAS, opened when the first CUDA backend is made instead of linked into every binary: a linked
// libcublas pulls in libcublasLt, whose static initialisers run at the start of every process
// (`lfm --help` included) whether or not it ever touches a GPU.
#pragma once

#include <cublas_v2.h>

namespace lfm::cuda {

// The cuBLAS entry points the backend calls (cublas_v2.h's names, which are macros for the _v2
// symbols where those exist).
struct CublasLibrary {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  // cublasGemmEx is overloaded in C++ (an inline wrapper takes the old cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                            const void* alpha, const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c, cudaDataType c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) = nullptr;
};

// Opens libcublas.so.<the toolkit's major version> on the first call: from the loader's search
// path, else from the toolkit directory this build was configured with. Throws lfm::Error naming
// the file and the loader's message when it cannot (a later call tries again).
const CublasLibrary& cublas_library();

}  // namespace lfm::cuda
