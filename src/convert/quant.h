// ggml block-quantized formats: encoders (float32 → blocks). Decoders are reached through
// dequantize_row (kernels/dequant.h), which dispatches every DType.
// Block layouts follow ggml exactly so GGUF files written by llama.cpp and by lfm agree.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lfm {

// Encodes n floats (a multiple of the type's block size) into dst (dtype_row_bytes(type, n)
// bytes). Supported: every type with dtype_encodable(type).
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace lfm
