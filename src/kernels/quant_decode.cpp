// Decoders for ggml's block-quantized formats (layouts in quant_blocks.h). Each block is copied
// to a local struct first, so source rows may start at any byte offset. The float expressions
// keep ggml's operation order (e.g. (d * sc) * q - dmin * m), so decoded values match
// llama.cpp's dequantize_row_* bit for bit.
#include <cstring>

#include "core/dtype.h"
#include "kernels/quant_blocks.h"

namespace lfm::quant {

namespace {

template <typename Block>
Block load_block(const uint8_t* src, int64_t index) {
  Block b;
  std::memcpy(&b, src + index * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

}  // namespace

void decode_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kQK32;
    for (int j = 0; j < kQK32; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void decode_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int half = kQK32 / 2;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kQK32;
    for (int j = 0; j < half; ++j) {
      y[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
      y[j + half] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void decode_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int half = kQK32 / 2;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    float* y = dst + i * kQK32;
    for (int j = 0; j < half; ++j) {
      y[j] = static_cast<float>(b.qs[j] & 0x0F) * d + m;
      y[j + half] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

void decode_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int half = kQK32 / 2;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = f16_to_f32(b.d);
    const uint32_t qh = load_qh32(b.qh);
    float* y = dst + i * kQK32;
    for (int j = 0; j < half; ++j) {
      const int lo = (b.qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + half)) & 1u) << 4);
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + half] = static_cast<float>(hi - 16) * d;
    }
  }
}

void decode_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  constexpr int half = kQK32 / 2;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = f16_to_f32(b.d);
    const float m = f16_to_f32(b.m);
    const uint32_t qh = load_qh32(b.qh);
    float* y = dst + i * kQK32;
    for (int j = 0; j < half; ++j) {
      const int lo = (b.qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + half)) & 1u) << 4);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + half] = static_cast<float>(hi) * d + m;
    }
  }
}

void decode_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ4_K>(src, i);
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    float* y = dst + i * kQK_K;
    for (int chunk = 0; chunk < 4; ++chunk) {  // 64 elements: sub-blocks 2c (low) and 2c+1 (high)
      const KScaleMin lo = unpack_k_scale(b.scales, 2 * chunk);
      const KScaleMin hi = unpack_k_scale(b.scales, 2 * chunk + 1);
      const float d_lo = d * lo.scale, m_lo = dmin * lo.min;
      const float d_hi = d * hi.scale, m_hi = dmin * hi.min;
      const uint8_t* q = b.qs + 32 * chunk;
      float* yc = y + 64 * chunk;
      for (int l = 0; l < 32; ++l) yc[l] = d_lo * static_cast<float>(q[l] & 0x0F) - m_lo;
      for (int l = 0; l < 32; ++l) yc[32 + l] = d_hi * static_cast<float>(q[l] >> 4) - m_hi;
    }
  }
}

void decode_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ5_K>(src, i);
    const float d = f16_to_f32(b.d);
    const float dmin = f16_to_f32(b.dmin);
    float* y = dst + i * kQK_K;
    for (int chunk = 0; chunk < 4; ++chunk) {
      const KScaleMin lo = unpack_k_scale(b.scales, 2 * chunk);
      const KScaleMin hi = unpack_k_scale(b.scales, 2 * chunk + 1);
      const float d_lo = d * lo.scale, m_lo = dmin * lo.min;
      const float d_hi = d * hi.scale, m_hi = dmin * hi.min;
      const uint8_t bit_lo = static_cast<uint8_t>(1u << (2 * chunk));
      const uint8_t bit_hi = static_cast<uint8_t>(2u << (2 * chunk));
      const uint8_t* q = b.qs + 32 * chunk;
      float* yc = y + 64 * chunk;
      for (int l = 0; l < 32; ++l)
        yc[l] = d_lo * static_cast<float>((q[l] & 0x0F) + ((b.qh[l] & bit_lo) ? 16 : 0)) - m_lo;
      for (int l = 0; l < 32; ++l)
        yc[32 + l] = d_hi * static_cast<float>((q[l] >> 4) + ((b.qh[l] & bit_hi) ? 16 : 0)) - m_hi;
    }
  }
}

void decode_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kQK_K;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;  // 128 elements = 8 sub-blocks of 16
      float* yh = y + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        yh[l] = d * static_cast<float>(sc[s + 0]) * static_cast<float>(q0);
        yh[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q1);
        yh[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q2);
        yh[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q3);
      }
    }
  }
}

void decode_q8_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ8_K>(src, i);
    float* y = dst + i * kQK_K;
    for (int j = 0; j < kQK_K; ++j) y[j] = b.d * static_cast<float>(b.qs[j]);
  }
}

// Q3_K (unpack_q3k_quant, unpack_q3k_scale); the arithmetic order is ggml's (the sub-block's
// d·(sc − 32) first, then one product).
void decode_q3_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d = f16_to_f32(b.d);
    int sc[16];
    for (int s = 0; s < 16; ++s) sc[s] = unpack_q3k_scale(b.scales, s) - 32;
    float* y = dst + i * kQK_K;
    for (int e = 0; e < kQK_K; ++e)
      y[e] = d * static_cast<float>(sc[e / 16]) * static_cast<float>(unpack_q3k_quant(b.hmask, b.qs, e) - 4);
  }
}

}  // namespace lfm::quant
