// Row conversion of stored weights to float32, for every DType (plain and ggml block-quantized).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lfm {

// Decodes n elements (a multiple of the type's block size) starting at src into dst.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Whether dequantize_row (and so every matmul) supports the type.
bool dequant_supported(DType type);

}  // namespace lfm
