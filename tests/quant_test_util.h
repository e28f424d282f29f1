// Helpers shared by the quant format tests (quant_decode_test.cpp, quant_encode_test.cpp):
// f16 scale bit patterns, misaligned encode/decode, reproducible Gaussian rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "convert/quant.h"
#include "core/dtype.h"
#include "kernels/dequant.h"

namespace lfm::quant_test {

// f16 bit patterns used as scales (value in the comment).
inline constexpr uint16_t kF16Zero = 0x0000;       // 0
inline constexpr uint16_t kF16Quarter = 0x3400;    // 0.25
inline constexpr uint16_t kF16Half = 0x3800;       // 0.5
inline constexpr uint16_t kF16MinusHalf = 0xB800;  // -0.5
inline constexpr uint16_t kF16One = 0x3C00;        // 1
inline constexpr uint16_t kF16MinusOne = 0xBC00;   // -1
inline constexpr uint16_t kF16Two = 0x4000;        // 2
inline constexpr uint16_t kF16MinusThree = 0xC200; // -3
inline constexpr uint16_t kF16MinusFour = 0xC400;  // -4
inline constexpr uint16_t kF16Eighth = 0x3000;     // 0.125
inline constexpr uint16_t kF16Sixteenth = 0x2C00;  // 0.0625
inline constexpr uint16_t kF16OneOver64 = 0x2400;  // 2^-6
inline constexpr uint16_t kF16MinSubnormalNeg = 0x8001;  // -2^-24, the smallest-magnitude negative subnormal

inline void put_u16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v & 0xFF);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}

// Decodes `bytes` placed at byte offset 1 of a larger buffer (so never 2- or 4-byte aligned).
inline std::vector<float> decode_misaligned(DType type, const std::vector<uint8_t>& bytes, int64_t n) {
  EXPECT_EQ(bytes.size(), dtype_row_bytes(type, n));
  std::vector<uint8_t> buf(bytes.size() + 8, 0xCD);
  std::memcpy(buf.data() + 1, bytes.data(), bytes.size());
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  dequantize_row(type, buf.data() + 1, out.data(), n);
  return out;
}

// Encodes into a misaligned destination and returns the bytes.
inline std::vector<uint8_t> encode_misaligned(DType type, const std::vector<float>& x) {
  const size_t nbytes = dtype_row_bytes(type, static_cast<int64_t>(x.size()));
  std::vector<uint8_t> buf(nbytes + 8, 0xCD);
  quantize_row(type, x.data(), buf.data() + 3, static_cast<int64_t>(x.size()));
  return std::vector<uint8_t>(buf.begin() + 3, buf.begin() + 3 + static_cast<std::ptrdiff_t>(nbytes));
}

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {  // Box-Muller: same numbers on every standard library
    const double r = std::sqrt(-2.0 * std::log(u(rng))), t = 2.0 * 3.14159265358979323846 * u(rng);
    x[i] = mean + sigma * static_cast<float>(r * std::cos(t));
  }
  return x;
}

inline constexpr DType kQuantTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                             DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};

}  // namespace lfm::quant_test
