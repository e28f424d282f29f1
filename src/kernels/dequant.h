// Row conversion of stored weights to float32. Plain types (F32/F16/BF16) live here; block-
// quantized ggml types register their row decoders in the same table (see dequant_quant.cpp).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lfm {

// Decodes n elements (a multiple of the type's block size) starting at src into dst.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Whether dequantize_row (and so every matmul) supports the type.
bool dequant_supported(DType type);

using DequantRowFn = void (*)(const void* src, float* dst, int64_t n);
// Registry hook for quantized types; implementations call it at static-init time.
void register_dequant(DType type, DequantRowFn fn);

}  // namespace lfm
