// cuBLAS is opened at run time (kernels/cuda/cublas_library.h), so the build's link step no
// longer proves it can be found: this opens it on every machine with the toolkit (no GPU needed)
// and checks every entry point the backend calls was resolved.
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/cublas_library.h"

namespace lfm {
namespace {

TEST(CublasLibrary, OpensTheToolkitsCublasWithEveryEntryPoint) {
  const cuda::CublasLibrary& lib = cuda::cublas_library();
  EXPECT_NE(lib.create, nullptr);
  EXPECT_NE(lib.destroy, nullptr);
  EXPECT_NE(lib.set_stream, nullptr);
  EXPECT_NE(lib.set_workspace, nullptr);
  EXPECT_NE(lib.set_math_mode, nullptr);
  EXPECT_NE(lib.sgemm, nullptr);
  EXPECT_NE(lib.gemm_ex, nullptr);
  ASSERT_NE(lib.status_string, nullptr);
  // A call that needs no device: the library's own text for a status.
  EXPECT_NE(std::string(lib.status_string(CUBLAS_STATUS_NOT_INITIALIZED)), "");
  EXPECT_EQ(&cuda::cublas_library(), &lib);  // opened once
}

}  // namespace
}  // namespace lfm
