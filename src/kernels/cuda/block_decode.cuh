// Decoders of the weight formats as the CUDA backend keeps them: plain types as stored,
// quantized ones (GGUF blocks, kernels/quant_blocks.h) in the split-block layout
// (kernels/split_blocks.h). A lane decodes 8 consecutive elements at a time. Host and device: a
// host-side test checks them against the CPU's decoders on machines without a GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/split_blocks.h"

// `#pragma unroll` for the device pass only (the host compiler, which also compiles these
// functions, would warn about it).
#ifdef __CUDA_ARCH__
#define LFM_UNROLL _Pragma("unroll")
#else
#define LFM_UNROLL
#endif

namespace lfm::cuda {

__host__ __device__ __forceinline__ float half_at(const uint8_t* p) {
  __half h;
  memcpy(&h, p, 2);
  return __half2float(h);
}

__host__ __device__ __forceinline__ float bits_to_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  memcpy(&f, &b, 4);
  return f;
#endif
}

__host__ __device__ __forceinline__ float half_bits_to_float(uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

__host__ __device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes q[0..12),
// held as the words a, b, c (q[4i .. 4i+3] in word i, little-endian): sub-block j's bits are in
// byte j % 4 of each word.
__host__ __device__ __forceinline__ void kquant_scale_min(int j, uint32_t a, uint32_t b, uint32_t c, int& sc, int& m) {
  const int shift = 8 * (j & 3);
  const int lo = static_cast<int>((a >> shift) & 0xFFu), mid = static_cast<int>((b >> shift) & 0xFFu),
            hi = static_cast<int>((c >> shift) & 0xFFu);
  if (j < 4) {
    sc = lo & 63;  // q[j]
    m = mid & 63;  // q[j + 4]
  } else {
    sc = (hi & 0xF) | ((lo >> 6) << 4);  // q[j + 4], q[j - 4]
    m = (hi >> 4) | ((mid >> 6) << 4);  // q[j + 4], q[j]
  }
}

// Word i (0..3) of v.
__host__ __device__ __forceinline__ uint32_t word_of(uint4 v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Bytes from one row of a device copy to the next: quantized types in the split-block layout
// (kernels/split_blocks.h, what prepare_weights uploads), plain types as stored.
__host__ __device__ constexpr size_t device_row_bytes(DType t, int64_t cols) {
  if (split_block(t).valid()) return split_row_bytes(t, cols);
  return static_cast<size_t>(cols) * (t == DType::F32 ? 4 : 2);
}

// Small integers to float without an int-to-float conversion, which GPUs issue at a fraction of
// the rate of adds: a byte b in the low mantissa bits of 2^23 is the float 2^23 + b exactly, and
// subtracting 2^23 + k leaves b − k exactly: the bits static_cast<float>(b − k) gives. kMagic + k
// is that subtrahend.
constexpr float kMagic = 8388608.0f;  // 2^23
// __byte_perm: byte n of the result is byte (s >> 4n) & 7 of the eight bytes x0..x3, y0..y3 (the
// host's copy follows CUDA's definition, so host-side tests check the selectors used here).
__host__ __device__ __forceinline__ uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(x, y, s);
#else
  const uint64_t b = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<uint32_t>((b >> (8 * ((s >> (4 * n)) & 7))) & 0xFFu) << (8 * n);
  return r;
#endif
}
// Byte i (0..3) of w as 2^23 + byte: bytes (w_i, 0, 0, 0x4B) of (w, 0x4B000000), one permute.
__host__ __device__ __forceinline__ float magic_byte(uint32_t w, int i) {
  return bits_to_float(byte_perm(w, 0x4B000000u, 0x7540u | static_cast<uint32_t>(i)));
}
// The 8 bytes of (lo, hi) minus k, as floats: out[i] = byte i − k.
__host__ __device__ __forceinline__ void bytes_minus(uint32_t lo, uint32_t hi, float k, float* out) {
LFM_UNROLL
  for (int i = 0; i < 4; ++i) {
    out[i] = magic_byte(lo, i) - (kMagic + k);
    out[4 + i] = magic_byte(hi, i) - (kMagic + k);
  }
}

// 8 bytes at p (8-byte aligned) as two words.
__host__ __device__ __forceinline__ uint2 load8_bytes(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }

// A lane's 8 stored codes of a quantized row (kernels/split_blocks.h) as bytes in two words, and
// what turns code q into the weight: w = d · (q − code_offset_v<T>) − m (m only for Q4_K / Q5_K;
// Q8_0's codes are signed bytes, the others' unsigned: Q4_0 4 bits, Q4_K 4, Q5_K 5, Q6_K 6).
// Every load of values is an aligned 8 bytes, and a K-quant block's scales one aligned 16-byte
// load (the same 16 bytes for the 32 lanes of a warp that decodes a block: one sector a warp
// request). d and m are the stored format's numbers: d · sc and dmin · m for Q4_K / Q5_K, d · s
// for Q6_K, as dequantize_row forms them.
struct Codes8 {
  uint2 q;
  float d, m;
};
template <DType T>
inline constexpr int code_offset_v = T == DType::Q4_0 ? 8 : T == DType::Q6_K ? 32 : 0;

template <DType T>
__host__ __device__ __forceinline__ Codes8 codes8(const uint8_t* __restrict__ row, int64_t cols, int64_t e) {
  constexpr SplitBlock sb = split_block(T);
  static_assert(sb.valid(), "a quantized type in the split-block layout");
  const int64_t nb = cols / sb.elems;
  const int64_t b = e / sb.elems;                  // block
  const int i0 = static_cast<int>(e % sb.elems);   // first element within it
  const uint8_t* values = row + b * sb.value_bytes();
  const uint8_t* scales = row + nb * sb.value_bytes() + b * sb.scale_bytes();
  Codes8 c{make_uint2(0, 0), 0.0f, 0.0f};
  if constexpr (T == DType::Q8_0) {
    LFM_TRACE_LOAD(scales, 2);
    LFM_TRACE_LOAD(values + i0, 8);
    c.d = half_at(scales);
    c.q = load8_bytes(values + i0);
  } else if constexpr (T == DType::Q4_0) {
    // Element k of a block: nibble k / 16 of value byte k % 16.
    LFM_TRACE_LOAD(scales, 2);
    LFM_TRACE_LOAD(values + (i0 & 15), 8);
    c.d = half_at(scales);
    const uint2 q = load8_bytes(values + (i0 & 15));
    const int shift = (i0 >> 4) * 4;
    c.q = make_uint2((q.x >> shift) & 0x0F0F0F0Fu, (q.y >> shift) & 0x0F0F0F0Fu);
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    // Scales: d, dmin (halves), then the 12 packed bytes of the 6-bit scales and mins. Sub-block
    // j (32 elements): nibble j % 2 of qs[32 (j / 2) + k]; Q5_K's fifth bit is bit j of qh[k].
    const int j = i0 / 32, k = i0 % 32;
    LFM_TRACE_LOAD(scales, 16);
    LFM_TRACE_LOAD((T == DType::Q5_K ? values + 32 : values) + 32 * (j / 2) + k, 8);
    if (T == DType::Q5_K) LFM_TRACE_LOAD(values + k, 8);
    const uint4 s = *reinterpret_cast<const uint4*>(scales);
    const float d = half_bits_to_float(static_cast<uint16_t>(s.x & 0xFFFFu));
    const float dmin = half_bits_to_float(static_cast<uint16_t>(s.x >> 16));
    int sc, m;
    kquant_scale_min(j, s.y, s.z, s.w, sc, m);
    c.d = d * static_cast<float>(sc), c.m = dmin * static_cast<float>(m);
    const uint8_t* qs = values + (T == DType::Q5_K ? 32 : 0);
    const uint2 q = load8_bytes(qs + 32 * (j / 2) + k);
    const int shift = (j & 1) * 4;
    uint32_t lo = (q.x >> shift) & 0x0F0F0F0Fu, hi = (q.y >> shift) & 0x0F0F0F0Fu;
    if constexpr (T == DType::Q5_K) {  // the fifth bit: bit j of each qh byte, to bit 4
      const uint2 h = load8_bytes(values + k);
      lo |= ((h.x >> j) & 0x01010101u) << 4;
      hi |= ((h.y >> j) & 0x01010101u) << 4;
    }
    c.q = make_uint2(lo, hi);
  } else {  // Q6_K
    // Half h (128 elements), quarter u (32), element k: low nibble u / 2 of ql[64h + 32 (u % 2) + k],
    // bits 2u, 2u+1 of qh[32h + k]; scale scales[8h + 2u + k / 16] (the 16 int8 sub-scales, one
    // load), then d (the block's last bytes, after the row's scales).
    const int h = i0 / 128, u = (i0 % 128) / 32, k = i0 % 32;
    const uint8_t* dp = row + nb * (sb.value_bytes() + sb.scale_bytes()) + b * sb.last_bytes;
    LFM_TRACE_LOAD(values + 64 * h + 32 * (u & 1) + k, 8);
    LFM_TRACE_LOAD(values + 128 + 32 * h + k, 8);
    LFM_TRACE_LOAD(scales, 16);
    LFM_TRACE_LOAD(dp, 2);
    const uint2 ql = load8_bytes(values + 64 * h + 32 * (u & 1) + k);
    const uint2 qh = load8_bytes(values + 128 + 32 * h + k);
    const uint4 sv = *reinterpret_cast<const uint4*>(scales);
    const float d = half_at(dp);
    const int si = 8 * h + 2 * u + k / 16;  // sub-scale: byte si % 4 of word si / 4
    const float sub = static_cast<float>(static_cast<int8_t>((word_of(sv, si >> 2) >> (8 * (si & 3))) & 0xFFu));
    c.d = d * sub;
    const int lshift = (u >> 1) * 4, hshift = 2 * u;  // 6-bit codes: low nibble | two high bits << 4
    c.q = make_uint2(((ql.x >> lshift) & 0x0F0F0F0Fu) | (((qh.x >> hshift) & 0x03030303u) << 4),
                     ((ql.y >> lshift) & 0x0F0F0F0Fu) | (((qh.y >> hshift) & 0x03030303u) << 4));
  }
  return c;
}

// Elements e .. e+7 (e a multiple of 8) of a row of `cols` elements into w[0..7]: quantized rows in
// the split-block layout, plain rows as stored (16-byte aligned). The arithmetic per element is
// the stored format's (dequantize_row's). A row's values start at `row`, its scales at
// row + blocks · value_bytes, Q6_K's d after the scales; every load of values is an aligned 8 or
// 16 bytes, and a K-quant block's scales are one aligned 16-byte load (the same 16 bytes for the
// 32 lanes of a warp that decodes a block: one sector a warp request).
template <DType T>
__host__ __device__ __forceinline__ void decode8(const uint8_t* __restrict__ row, int64_t cols, int64_t e, float* w) {
  if constexpr (T == DType::F32) {
    LFM_TRACE_LOAD(row + 4 * e, 32);
    const float4 a = *reinterpret_cast<const float4*>(row + 4 * e), b = *reinterpret_cast<const float4*>(row + 4 * e + 16);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else if constexpr (T == DType::F16 || T == DType::BF16) {
    LFM_TRACE_LOAD(row + 2 * e, 16);
    const uint4 v = *reinterpret_cast<const uint4*>(row + 2 * e);
    const uint32_t p[4] = {v.x, v.y, v.z, v.w};
LFM_UNROLL
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == DType::BF16) {
        w[2 * i] = bits_to_float(p[i] << 16);
        w[2 * i + 1] = bits_to_float(p[i] & 0xFFFF0000u);
      } else {
        w[2 * i] = half_bits_to_float(static_cast<uint16_t>(p[i] & 0xFFFFu));
        w[2 * i + 1] = half_bits_to_float(static_cast<uint16_t>(p[i] >> 16));
      }
    }
  } else {
    const Codes8 c = codes8<T>(row, cols, e);
    float v[8];
    if constexpr (T == DType::Q8_0)  // int8 b as (b + 128) − 128: the sign bit flipped makes each byte b + 128
      bytes_minus(c.q.x ^ 0x80808080u, c.q.y ^ 0x80808080u, 128.0f, v);
    else
      bytes_minus(c.q.x, c.q.y, static_cast<float>(code_offset_v<T>), v);
LFM_UNROLL
    for (int i = 0; i < 8; ++i) {
      if constexpr (T == DType::Q4_K || T == DType::Q5_K) w[i] = c.d * v[i] - c.m;
      else w[i] = c.d * v[i];
    }
  }
}

// The integer path of the vector matmul (every quantized type on int8 activations, the scheme of
// the CPU's integer kernels): a lane's 8 activations of a token quantized with their 32-value
// block's scale, and their dot product with the lane's 8 codes in integers.
template <DType T>
inline constexpr bool int8_dot_v = split_block(T).valid();

// c + Σ over the 4 byte lanes of a · b, each byte signed (dp4a).
__host__ __device__ __forceinline__ int dot4_i8(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>(static_cast<int8_t>((a >> (8 * i)) & 0xFFu)) *
         static_cast<int>(static_cast<int8_t>((b >> (8 * i)) & 0xFFu));
  return c;
#endif
}

// x rounded to the nearest integer, ties to even (|x| ≤ 127 here).
__host__ __device__ __forceinline__ int round_to_int(float x) {
#ifdef __CUDA_ARCH__
  return __float2int_rn(x);
#else
  return static_cast<int>(std::nearbyint(x));
#endif
}

// A lane's 8 activations of a 32-value block, quantized as the CPU's int8 kernels do: d = amax /
// 127 over the block, q = round(x · (127 / amax)) (0 where amax is 0), packed as bytes; sum = Σ q.
struct ActCodes8 {
  uint2 q;
  float d;
  int sum;
};
__host__ __device__ __forceinline__ ActCodes8 quantize8(const float* x, float amax) {
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t w[2] = {0, 0};
LFM_UNROLL
  for (int i = 0; i < 8; ++i)
    w[i / 4] |= (static_cast<uint32_t>(round_to_int(x[i] * id)) & 0xFFu) << (8 * (i % 4));
  return ActCodes8{make_uint2(w[0], w[1]), amax / 127.0f, dot4_i8(w[0], 0x01010101u, dot4_i8(w[1], 0x01010101u, 0))};
}

// acc + Σ w · x over a lane's 8 elements from codes: Σ (q_w − offset) · q_x exactly in integers,
// then fma(that, d_w · d_x, acc), and for Q4_K / Q5_K fma(Σ q_x, −m · d_x, ·).
template <DType T>
__host__ __device__ __forceinline__ float dot8_codes(float acc, const Codes8& w, const ActCodes8& x) {
  const int s = dot4_i8(w.q.x, x.q.x, dot4_i8(w.q.y, x.q.y, 0)) - code_offset_v<T> * x.sum;
  acc = fmaf(static_cast<float>(s), w.d * x.d, acc);
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) acc = fmaf(static_cast<float>(x.sum), -(w.m * x.d), acc);
  return acc;
}

// Element i of a row of a plain type.
template <DType T>
__host__ __device__ __forceinline__ float plain_at(const uint8_t* row, int64_t i) {
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
