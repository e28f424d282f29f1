// Encoders for the 32-element ggml formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), the plain float
// types, and the quantize_row dispatch. Each follows the semantics of ggml's reference quantizer
// (quantize_row_*_ref in ggml-quants.c) so files we write decode like llama.cpp's:
//   * the scale is computed in float32 from the block's extremes, stored rounded to f16, and the
//     quants are computed with the float32 inverse scale (not the f16-rounded one);
//   * symmetric formats (Q4_0, Q5_0) map the signed extreme value to the most negative quant,
//     which is representable exactly, and give up one level on the other side;
//   * rounding is ggml's: roundf for Q8_0, "+0.5 then truncate" for the 4/5-bit formats.
// The K-quants live in quant_encode_k.cpp.
#include <cfloat>
#include <cmath>

#include "core/error.h"
#include "convert/quant.h"
#include "kernels/quant_blocks.h"
#include "convert/quant_encode_util.h"

namespace lfm {

namespace quant {

namespace {

void min_max(const float* x, int n, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

}  // namespace

void encode_q8_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK32;
    float amax = 0.0f;
    for (int j = 0; j < kQK32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b{};
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK32; ++j) {
      // roundf: half away from zero, as ggml. |x * id| <= 127 for finite data; the clamp only
      // keeps the conversion defined otherwise.
      b.qs[j] = static_cast<int8_t>(truncate_clamped(std::round(x[j] * id), -127, 127));
    }
    store_block(dst, i, b);
  }
}

void encode_q4_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int half = kQK32 / 2;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK32;
    const float d = signed_abs_max(x, kQK32) / -8.0f;  // extreme -> q = 0, i.e. -8 * d
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b{};
    b.d = f32_to_f16(d);
    for (int j = 0; j < half; ++j) {
      const int q0 = truncate_clamped(x[j] * id + 8.5f, 0, 15);
      const int q1 = truncate_clamped(x[j + half] * id + 8.5f, 0, 15);
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    store_block(dst, i, b);
  }
}

void encode_q4_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int half = kQK32 / 2;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK32;
    float min, max;
    min_max(x, kQK32, min, max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 b{};
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(min);
    for (int j = 0; j < half; ++j) {
      const int q0 = truncate_clamped((x[j] - min) * id + 0.5f, 0, 15);
      const int q1 = truncate_clamped((x[j + half] - min) * id + 0.5f, 0, 15);
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    store_block(dst, i, b);
  }
}

namespace {

// Splits 32 five-bit quants into Q5's nibbles and its 32-bit high-bit mask.
void pack_q5(const int q[kQK32], uint8_t qs[kQK32 / 2], uint8_t qh_bytes[4]) {
  constexpr int half = kQK32 / 2;
  uint32_t qh = 0;
  for (int j = 0; j < half; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + half] & 0x0F) << 4));
    qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q[j + half] >> 4) & 1) << (j + half);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

}  // namespace

void encode_q5_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK32;
    const float d = signed_abs_max(x, kQK32) / -16.0f;  // extreme -> q = 0, i.e. -16 * d
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[kQK32];
    for (int j = 0; j < kQK32; ++j) q[j] = truncate_clamped(x[j] * id + 16.5f, 0, 31);
    BlockQ5_0 b{};
    b.d = f32_to_f16(d);
    pack_q5(q, b.qs, b.qh);
    store_block(dst, i, b);
  }
}

void encode_q5_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK32;
    float min, max;
    min_max(x, kQK32, min, max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[kQK32];
    for (int j = 0; j < kQK32; ++j) q[j] = truncate_clamped((x[j] - min) * id + 0.5f, 0, 31);
    BlockQ5_1 b{};
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(min);
    pack_q5(q, b.qs, b.qh);
    store_block(dst, i, b);
  }
}

}  // namespace quant


void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const DTypeTraits& tr = dtype_traits(type);
  LFM_CHECK(n >= 0 && n % tr.block_elems == 0, "quant: cannot encode ", n, " elements as ", tr.name,
            ": not a multiple of the block size ", tr.block_elems);
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t blocks = n / tr.block_elems;
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case DType::Q4_0: quant::encode_q4_0(src, out, blocks); return;
    case DType::Q4_1: quant::encode_q4_1(src, out, blocks); return;
    case DType::Q5_0: quant::encode_q5_0(src, out, blocks); return;
    case DType::Q5_1: quant::encode_q5_1(src, out, blocks); return;
    case DType::Q8_0: quant::encode_q8_0(src, out, blocks); return;
    case DType::Q4_K: quant::encode_q4_k(src, out, blocks); return;
    case DType::Q5_K: quant::encode_q5_k(src, out, blocks); return;
    case DType::Q6_K: quant::encode_q6_k(src, out, blocks); return;
    case DType::Q8_K: quant::encode_q8_k(src, out, blocks); return;
    case DType::Q3_K: quant::encode_q3_k(src, out, blocks); return;
    case DType::I32: break;
  }
  fail("quant: no encoder for type ", dtype_name(type));
}

}  // namespace lfm
