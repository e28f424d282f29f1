// Host entry points to the CUDA kernels' weight decoders (split_decode_host.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace lfm::test {

// Elements e .. e+7 of a row as the CUDA backend keeps it (block_decode.cuh's decode8); types
// the CUDA kernels do not read leave w untouched.
void decode8_on_host(DType type, const uint8_t* row, int64_t cols, int64_t e, float* w);
size_t device_row_bytes_on_host(DType type, int64_t cols);

}  // namespace lfm::test
