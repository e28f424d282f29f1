// Row conversion of stored weights to float32, for every DType (plain and ggml block-quantized).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lfm {

// Decodes n elements (a multiple of the type's block size) starting at src into dst; every type
// with dtype_decodable(type).
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

}  // namespace lfm
