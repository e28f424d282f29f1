// Device decoders of the stored weight formats (GGUF block layouts, as kernels/quant_blocks.h
// describes them): element groups of 32, so a warp lane can take one group of a row at a time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace lfm::cuda {

__device__ __forceinline__ float half_at(const uint8_t* p) {
  __half h;
  memcpy(&h, p, 2);
  return __half2float(h);
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
__device__ __forceinline__ void kquant_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Bytes of a row of `cols` elements and of one block, and elements per block, for the types the
// CUDA kernels read.
__host__ __device__ constexpr int block_elems(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 ? 32 : (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) ? 256 : 1;
}
__host__ __device__ constexpr int block_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::Q8_0: return 34;
    case DType::Q4_0: return 18;
    case DType::Q4_K: return 144;
    case DType::Q5_K: return 176;
    case DType::Q6_K: return 210;
    default: return 0;
  }
}

// Elements 32g .. 32g+31 of a row (starting at `row`) of a quantized type into w[0..31].
template <DType T>
__device__ __forceinline__ void decode_group(const uint8_t* row, int64_t g, float* w) {
  if constexpr (T == DType::Q8_0) {
    const uint8_t* b = row + g * 34;
    const float d = half_at(b);
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
  } else if constexpr (T == DType::Q4_0) {
    const uint8_t* b = row + g * 18;
    const float d = half_at(b);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint8_t q = b[2 + i];
      w[i] = d * static_cast<float>((q & 0xF) - 8);
      w[i + 16] = d * static_cast<float>((q >> 4) - 8);
    }
  } else if constexpr (T == DType::Q4_K) {
    const uint8_t* b = row + (g / 8) * 144;
    const int j = static_cast<int>(g % 8);
    const float d = half_at(b), dmin = half_at(b + 2);
    int sc, m;
    kquant_scale_min(j, b + 4, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    const uint8_t* q = b + 16 + 32 * (j / 2);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = d1 * static_cast<float>((q[i] >> shift) & 0xF) - m1;
  } else if constexpr (T == DType::Q5_K) {
    const uint8_t* b = row + (g / 8) * 176;
    const int j = static_cast<int>(g % 8);
    const float d = half_at(b), dmin = half_at(b + 2);
    int sc, m;
    kquant_scale_min(j, b + 4, sc, m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48 + 32 * (j / 2);
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int q = ((ql[i] >> shift) & 0xF) + (((qh[i] >> j) & 1) << 4);
      w[i] = d1 * static_cast<float>(q) - m1;
    }
  } else if constexpr (T == DType::Q6_K) {
    const uint8_t* b = row + (g / 8) * 210;
    const int j = static_cast<int>(g % 8);
    const int half = j / 4, quarter = j % 4;
    const uint8_t* ql = b + 64 * half + (quarter & 1) * 32;
    const uint8_t* qh = b + 128 + 32 * half;
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * quarter;
    const float d = half_at(b + 208);
    const int lshift = (quarter >> 1) * 4, hshift = 2 * quarter;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int q = (((ql[i] >> lshift) & 0xF) | (((qh[i] >> hshift) & 3) << 4)) - 32;
      w[i] = d * static_cast<float>(scales[i / 16]) * static_cast<float>(q);
    }
  }
}

// Element i of a row of a plain type.
template <DType T>
__device__ __forceinline__ float plain_at(const uint8_t* row, int64_t i) {
  if constexpr (T == DType::F32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (T == DType::F16) {
    return __half2float(reinterpret_cast<const __half*>(row)[i]);
  } else {
    return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
  }
}

template <DType T>
inline constexpr bool is_plain_v = T == DType::F32 || T == DType::F16 || T == DType::BF16;

}  // namespace lfm::cuda
