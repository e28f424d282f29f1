// The emulated backend's cuBLAS: the emulator's loops (emu_runtime.cpp) in place of the file the
// real backend opens. Compiled under the prelude, so the names below are the emulator's.
#include "kernels/cuda/cublas_library.h"

namespace lfm::cuda {

const CublasLibrary& cublas_library() {
  static const CublasLibrary lib{.create = cublasCreate,
                                 .destroy = cublasDestroy,
                                 .set_stream = cublasSetStream,
                                 .set_workspace = cublasSetWorkspace,
                                 .set_math_mode = cublasSetMathMode,
                                 .status_string = cublasGetStatusString,
                                 .sgemm = cublasSgemm,
                                 .gemm_ex = cublasGemmEx};
  return lib;
}

}  // namespace lfm::cuda
