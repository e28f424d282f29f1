#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

#ifndef LFM_CUDA_LIBRARY_DIR
#define LFM_CUDA_LIBRARY_DIR ""
#endif

// The exported symbol behind one of cublas_v2.h's names (cublasCreate → "cublasCreate_v2").
#define LFM_CUBLAS_SYMBOL_NAME_(name) #name
#define LFM_CUBLAS_SYMBOL_NAME(name) LFM_CUBLAS_SYMBOL_NAME_(name)

namespace lfm::cuda {
namespace {

void* open_cublas(const std::string& soname) {
  if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  std::string why = dlerror();
  const std::string toolkit_dir = LFM_CUDA_LIBRARY_DIR;
  if (!toolkit_dir.empty()) {
    const std::string in_toolkit = toolkit_dir + "/" + soname;
    if (void* h = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    why += cat("; ", dlerror());
  }
  fail("cuda: cannot load ", soname, " (cuBLAS, which the CUDA backend needs): ", why, ". Install the CUDA ",
       CUBLAS_VER_MAJOR, " toolkit's cuBLAS, or add the folder holding it to LD_LIBRARY_PATH");
}

template <typename Fn>
void resolve(void* handle, const char* symbol, Fn& slot) {
  void* p = dlsym(handle, symbol);
  if (!p) fail("cuda: libcublas.so.", CUBLAS_VER_MAJOR, " has no ", symbol, " (a cuBLAS older than this build's toolkit?)");
  slot = reinterpret_cast<Fn>(p);
}

CublasLibrary load_cublas() {
  void* h = open_cublas("libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  CublasLibrary lib;
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasCreate), lib.create);
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasDestroy), lib.destroy);
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasSetStream), lib.set_stream);
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasSetWorkspace), lib.set_workspace);
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasSetMathMode), lib.set_math_mode);
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasGetStatusString), lib.status_string);
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasSgemm), lib.sgemm);
  resolve(h, LFM_CUBLAS_SYMBOL_NAME(cublasGemmEx), lib.gemm_ex);
  return lib;  // the library stays open for the process's life
}

}  // namespace

const CublasLibrary& cublas_library() {
  static const CublasLibrary lib = load_cublas();
  return lib;
}

}  // namespace lfm::cuda
