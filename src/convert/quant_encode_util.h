// Small helpers shared by the encoders (quant_encode.cpp, quant_encode_k.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace lfm::quant {

// ggml's nearest_int: round half to even. Adding 1.5 * 2^23 leaves a float whose unit in the
// last place is 1, so the addition itself rounds v to an integer (to even on ties, in the
// default mode) and the low mantissa bits hold it offset by 2^22. Inline arithmetic, unlike
// std::nearbyint, which is a libm call on the baseline x86-64 build (a third of the K-quant
// encoders' time). The clamp only matters for inputs ggml would reject (|v| > 2^22 - 1, or NaN,
// which maps low).
inline int round_half_even(float v) {
  constexpr float kLimit = 4194303.0f;
  if (!(v > -kLimit)) return -static_cast<int>(kLimit);
  if (v > kLimit) return static_cast<int>(kLimit);
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// C's (int) cast (truncation toward zero), clamped to [lo, hi] first so the conversion is always
// defined. ggml's Q4_0/Q4_1/Q5_x encoders quantize with (int8_t)(x * id + offset + 0.5f), i.e.
// truncation of an argument that is non-negative for finite data.
inline int truncate_clamped(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;  // also NaN
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// The value with the largest magnitude (first one on ties), keeping its sign.
inline float signed_abs_max(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Writes a locally built block to dst at block index i (dst may have any alignment).
template <typename Block>
void store_block(uint8_t* dst, int64_t i, const Block& b) {
  std::memcpy(dst + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
}

}  // namespace lfm::quant
