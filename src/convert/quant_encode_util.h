// Small helpers shared by the encoders (quant_encode.cpp, quant_encode_k.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace lfm::quant {

// ggml's nearest_int: round half to even (its float-magic trick rounds in the default mode).
// The clamp only matters for inputs ggml would reject (|v| > 2^22 - 1, or NaN, which maps low);
// it keeps the float->int conversion defined.
inline int round_half_even(float v) {
  constexpr float kLimit = 4194303.0f;
  if (!(v > -kLimit)) return -static_cast<int>(kLimit);
  if (v > kLimit) return static_cast<int>(kLimit);
  return static_cast<int>(std::nearbyint(v));
}

// C's (int) cast (truncation toward zero), clamped to [lo, hi] first so the conversion is always
// defined. ggml's Q4_0/Q4_1/Q5_x encoders quantize with (int8_t)(x * id + offset + 0.5f), i.e.
// truncation of an argument that is non-negative for finite data.
inline int truncate_clamped(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;  // also NaN
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Writes a locally built block to dst at block index i (dst may have any alignment).
template <typename Block>
void store_block(uint8_t* dst, int64_t i, const Block& b) {
  std::memcpy(dst + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
}

}  // namespace lfm::quant
