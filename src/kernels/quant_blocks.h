// ggml block layouts (llama.cpp ggml/src/ggml-common.h), byte-for-byte, plus the per-type row
// codecs that kernels/dequant.cpp and kernels/quant_encode.cpp dispatch to.
//
// Conventions shared by every format:
//   * "f16" fields are IEEE binary16 bit patterns (uint16_t), little-endian like all of GGUF.
//   * Blocks are stored back to back with no padding; a row of Q4_0 is 18-byte blocks, so a block
//     can sit at any byte offset. Codecs therefore never dereference a block pointer in place:
//     they memcpy a block into a local struct (decode) or build one locally and memcpy it out
//     (encode). That keeps them free of unaligned access (UBSan-clean) at negligible cost.
//   * The K-quants (Q4_K, Q5_K, Q6_K, Q8_K) use super-blocks of kQK_K = 256 elements.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace lfm::quant {

static_assert(std::endian::native == std::endian::little,
              "ggml block formats are little-endian; a big-endian host would need byte swaps");

inline constexpr int kQK32 = 32;   // QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0
inline constexpr int kQK_K = 256;  // super-block size of the K-quants
inline constexpr int kKScaleBytes = 12;  // K_SCALE_SIZE: 8 six-bit scales + 8 six-bit mins

// Q8_0: x = qs[i] * d.
struct BlockQ8_0 {
  uint16_t d;       // f16 scale
  int8_t qs[kQK32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: x = (q - 8) * d with q a nibble; byte j holds element j (low) and j + 16 (high).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: x = q * d + m; nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0/Q5_1's qh: bit i is element i's fifth bit (little-endian, as ggml stores it).
inline uint32_t load_qh32(const uint8_t qh[4]) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// Q5_0: x = (q - 16) * d with q = nibble | (bit i of qh) << 4, qh read as a little-endian uint32;
// nibbles as Q4_0 (element j low, j + 16 high), qh bit i belongs to element i.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x = q * d + m; bits as Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK32 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// Q4_K: 8 sub-blocks of 32; x = d * sc[s] * q - dmin * mn[s], q a nibble, sc/mn 6-bit (see
// unpack_k_scale). qs is 4 chunks of 32 bytes; chunk c covers elements 64c .. 64c + 63: byte
// 32c + l holds element 64c + l (low nibble, sub-block 2c) and 64c + 32 + l (high, sub-block 2c+1).
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: Q4_K plus a fifth bit per element: qh[l] bit 2c is the high bit of element 64c + l,
// bit 2c + 1 that of element 64c + 32 + l. q ranges 0..31.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16; x = d * scales[e / 16] * (q - 32), q 6-bit. Two halves of 128
// elements; in half h (element base b = 128h, ql base 64h, qh base 32h), for l in 0..31:
//   ql[64h + l]      low nibble -> element b + l,      high nibble -> b + 64 + l
//   ql[64h + 32 + l] low nibble -> element b + 32 + l, high nibble -> b + 96 + l
//   qh[32h + l] bits 0-1 -> b + l, 2-3 -> b + 32 + l, 4-5 -> b + 64 + l, 6-7 -> b + 96 + l
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Q3_K: 16 sub-blocks of 16; x = d * (sc[s] - 32) * (q - 4), q 3-bit: the low 2 bits in qs (2
// chunks of 32 bytes per 128 elements: bit pair j of qs[32h + l] for element 128h + 32j + l,
// l = 0..31), the third in hmask (bit j + 4h of hmask[l], same element). The
// 12 scale bytes pack sixteen 6-bit sc: bytes 0..7 hold the low nibbles (byte b: sc[b] low, sc[b
// + 8] high), bytes 8..11 the high 2-bit pairs (byte 8 + j, bit pair 2k: sc[j + 4k]).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q8_K: x = qs[i] * d with a float32 scale; bsums[g] = sum of qs[16g .. 16g + 15] (used by ggml's
// dot products, not needed to decode, but an encoder must fill it).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 12 scale bytes of Q4_K/Q5_K pack 8 six-bit scales sc[0..7] and 8 six-bit mins mn[0..7]:
//   bytes 0..3  : sc[j]     (bits 0-5) | high 2 bits of sc[j + 4] (bits 6-7)      j = 0..3
//   bytes 4..7  : mn[j]     (bits 0-5) | high 2 bits of mn[j + 4] (bits 6-7)
//   bytes 8..11 : low 4 bits of sc[j + 4] (bits 0-3) | low 4 bits of mn[j + 4] (bits 4-7)
struct KScaleMin {
  uint8_t scale;
  uint8_t min;
};

// Q3_K's 3-bit quant (0..7; the decoder subtracts 4) of element e = 128h + 32j + l: bit pair j of
// qs[32h + l], third bit 4h + j of hmask[l].
inline int unpack_q3k_quant(const uint8_t* hmask, const uint8_t* qs, int e) {
  const int h = e / 128, j = (e % 128) / 32, l = e % 32;
  return ((qs[32 * h + l] >> (2 * j)) & 3) | (((hmask[l] >> (4 * h + j)) & 1) << 2);
}

// Q3_K's 6-bit scale of sub-block s (0..15), 0..63 (the decoder subtracts 32); see BlockQ3_K.
inline int unpack_q3k_scale(const uint8_t* scales, int s) {
  return ((scales[s % 8] >> (4 * (s / 8))) & 0x0F) | (((scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
}

inline KScaleMin unpack_k_scale(const uint8_t* packed, int sub_block) {
  const int j = sub_block;
  if (j < 4) return {static_cast<uint8_t>(packed[j] & 63), static_cast<uint8_t>(packed[j + 4] & 63)};
  return {static_cast<uint8_t>((packed[j + 4] & 0x0F) | ((packed[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4))};
}

// Inverse of unpack_k_scale for all 8 sub-blocks; values must be 0..63.
inline void pack_k_scales(const uint8_t scale[8], const uint8_t min[8], uint8_t packed[kKScaleBytes]) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>((min[j] & 63) | ((min[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0x0F) | ((min[j + 4] & 0x0F) << 4));
  }
}

// Row codecs: n_blocks consecutive blocks at src (any alignment) <-> n_blocks * block_elems floats.
void decode_q8_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q4_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q4_1(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q5_0(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q5_1(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q4_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q5_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q6_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q8_k(const uint8_t* src, float* dst, int64_t n_blocks);
void decode_q3_k(const uint8_t* src, float* dst, int64_t n_blocks);

void encode_q8_0(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q4_0(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q4_1(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q5_0(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q5_1(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q4_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q5_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q3_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q6_k(const float* src, uint8_t* dst, int64_t n_blocks);
void encode_q8_k(const float* src, uint8_t* dst, int64_t n_blocks);

}  // namespace lfm::quant
