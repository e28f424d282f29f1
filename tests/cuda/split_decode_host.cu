// The CUDA kernels' weight decoders (kernels/cuda/block_decode.cuh) called on the host, for
// split_decode_test.cpp: the same source the kernels compile, checked without a GPU.
#include "kernels/cuda/block_decode.cuh"
#include "split_decode_host.h"

namespace lfm::test {

void decode8_on_host(DType type, const uint8_t* row, int64_t cols, int64_t e, float* w) {
  switch (type) {
    case DType::F32: return cuda::decode8<DType::F32>(row, cols, e, w);
    case DType::F16: return cuda::decode8<DType::F16>(row, cols, e, w);
    case DType::BF16: return cuda::decode8<DType::BF16>(row, cols, e, w);
    case DType::Q8_0: return cuda::decode8<DType::Q8_0>(row, cols, e, w);
    case DType::Q4_0: return cuda::decode8<DType::Q4_0>(row, cols, e, w);
    case DType::Q4_K: return cuda::decode8<DType::Q4_K>(row, cols, e, w);
    case DType::Q5_K: return cuda::decode8<DType::Q5_K>(row, cols, e, w);
    case DType::Q6_K: return cuda::decode8<DType::Q6_K>(row, cols, e, w);
    default: break;
  }
}

size_t device_row_bytes_on_host(DType type, int64_t cols) { return cuda::device_row_bytes(type, cols); }

}  // namespace lfm::test
