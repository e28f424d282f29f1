// Storage number formats and conversions to float32.
// Quantized formats follow ggml's block layouts (kernels/ decodes them, convert/ encodes them).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace lfm {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I32,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q4_K,
  Q5_K,
  Q6_K,
  Q8_K,
  Q3_K,  // after Q8_K so the earlier values keep their numbers
};

// Every fact about a storage type, in one table (dtype.cpp).
struct DTypeTraits {
  const char* name;
  int block_elems;  // elements per block (1 for plain types)
  int block_bytes;  // bytes per block
  bool quantized;
  bool decodable;  // kernels can decode it to float32 (dequantize_row, so every matmul)
  bool encodable;  // converters can encode float32 to it (quantize_row)
};

const DTypeTraits& dtype_traits(DType t);
inline const char* dtype_name(DType t) { return dtype_traits(t).name; }
inline bool dtype_decodable(DType t) { return dtype_traits(t).decodable; }
inline bool dtype_encodable(DType t) { return dtype_traits(t).encodable; }
// Bytes needed for n elements; n must be a multiple of the block size (checked).
size_t dtype_row_bytes(DType t, int64_t n);
// Parses "F32", "BF16", "Q4_K", ... (case-insensitive). Throws on unknown names.
DType dtype_from_name(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved (as torch does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace lfm
