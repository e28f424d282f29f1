// Tests of the ggml block formats' decoders against hand-built blocks, and of the type traits.
// Decoder tests build blocks byte by byte from the documented layouts (not through the structs of
// quant_blocks.h) and use power-of-two scales so every expected value is exact in float32: the
// comparisons are exact. Every decode runs from an odd byte offset, as rows of odd-sized blocks
// sit in a GGUF file, so the sanitizer build also checks that no block is read misaligned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/dequant.h"
#include "convert/quant.h"
#include "convert/quant_encode_util.h"
#include "kernels/quant_blocks.h"
#include "quant_test_util.h"

namespace lfm {
namespace {

using namespace quant_test;

// ---------------------------------------------------------------------------------------------
// Traits and plain types

TEST(QuantTraits, BlockSizesMatchGgml) {
  // ggml-common.h: sizeof(block_q*) and QK*.
  struct Expect {
    DType t;
    int elems, bytes;
  };
  const Expect expect[] = {{DType::F32, 1, 4},      {DType::F16, 1, 2},       {DType::BF16, 1, 2},
                           {DType::Q4_0, 32, 18},   {DType::Q4_1, 32, 20},    {DType::Q5_0, 32, 22},
                           {DType::Q5_1, 32, 24},   {DType::Q8_0, 32, 34},    {DType::Q4_K, 256, 144},
                           {DType::Q5_K, 256, 176}, {DType::Q6_K, 256, 210},  {DType::Q8_K, 256, 292}};
  for (const Expect& e : expect) {
    EXPECT_EQ(dtype_traits(e.t).block_elems, e.elems) << dtype_name(e.t);
    EXPECT_EQ(dtype_traits(e.t).block_bytes, e.bytes) << dtype_name(e.t);
    EXPECT_TRUE(dtype_decodable(e.t)) << dtype_name(e.t);
    EXPECT_TRUE(dtype_encodable(e.t)) << dtype_name(e.t);
  }
  EXPECT_FALSE(dtype_decodable(DType::I32));
  EXPECT_FALSE(dtype_encodable(DType::I32));
}

TEST(QuantTraits, RejectsPartialBlocks) {
  std::vector<uint8_t> bytes(64);
  std::vector<float> out(48);
  EXPECT_THROW(dequantize_row(DType::Q8_0, bytes.data(), out.data(), 48), std::exception);
  EXPECT_THROW(quantize_row(DType::Q4_K, out.data(), bytes.data(), 48), std::exception);
}

TEST(QuantPlain, F16AndBf16Decode) {
  const uint16_t h[] = {0x0000, 0x8000, 0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x3555, 0xFBFF};
  const float want[] = {0.0f, -0.0f, 1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), std::ldexp(1023.0f, -24),
                        std::ldexp(1.0f, -14), 0.333251953125f, -65504.0f};
  std::vector<uint8_t> bytes(sizeof(h));
  for (size_t i = 0; i < std::size(h); ++i) put_u16(bytes, 2 * i, h[i]);
  const auto got = decode_misaligned(DType::F16, bytes, std::size(h));  // 10 values: SIMD body + tail
  for (size_t i = 0; i < std::size(h); ++i) {
    EXPECT_EQ(got[i], want[i]) << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
  }
  const uint16_t b[] = {0x3F80, 0xC049, 0x0000, 0x7F7F};
  const float bwant[] = {1.0f, -3.140625f, 0.0f, 3.3895313892515355e38f};
  std::vector<uint8_t> bb(sizeof(b));
  for (size_t i = 0; i < std::size(b); ++i) put_u16(bb, 2 * i, b[i]);
  const auto bgot = decode_misaligned(DType::BF16, bb, std::size(b));
  for (size_t i = 0; i < std::size(b); ++i) EXPECT_EQ(bgot[i], bwant[i]) << i;
}

TEST(QuantPlain, F16ConversionsRoundTripEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00u) == 0x7C00u) continue;  // inf / NaN
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
#if defined(__F16C__)
  // Rounding of arbitrary floats (ties, subnormals, overflow) against the CPU's converter.
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x8FFFFFFFu) | 0x30000000u;  // bias toward the f16 range
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    const uint16_t hw = static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
    ASSERT_EQ(f32_to_f16(f), hw) << std::hex << bits;
  }
#endif
}

TEST(QuantPlain, FloatEncodersRoundTrip) {
  const auto x = gaussian(96, 1);
  std::vector<float> y(x.size());
  auto bytes = encode_misaligned(DType::F32, x);
  y = decode_misaligned(DType::F32, bytes, 96);
  EXPECT_EQ(x, y);
  for (DType t : {DType::F16, DType::BF16}) {
    bytes = encode_misaligned(t, x);
    y = decode_misaligned(t, bytes, 96);
    // Round-to-nearest keeps 11 (F16) / 8 (BF16) significant bits: relative error <= 2^-11 / 2^-8.
    const float rel = t == DType::F16 ? std::ldexp(1.0f, -11) : std::ldexp(1.0f, -8);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(y[i] - x[i]), rel * std::fabs(x[i]) + 1e-7f) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Decoders on hand-built blocks

TEST(QuantDecode, Q8_0) {
  // Block 0: d = 0.5, qs = -128, 127, then j - 16. Block 1: d = -2^-24 (subnormal), qs = 8j - 128.
  std::vector<uint8_t> b(2 * 34);
  put_u16(b, 0, kF16Half);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j == 0 ? -128 : j == 1 ? 127 : j - 16));
  put_u16(b, 34, kF16MinSubnormalNeg);
  for (int j = 0; j < 32; ++j) b[36 + j] = static_cast<uint8_t>(static_cast<int8_t>(8 * j - 128));
  const auto y = decode_misaligned(DType::Q8_0, b, 64);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[1], 63.5f);
  for (int j = 2; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 16)) << j;
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[32 + j], -std::ldexp(static_cast<float>(8 * j - 128), -24)) << j;
}

TEST(QuantDecode, Q4_0) {
  // Block 0: d = 0.25, byte j = j | (15 - j) << 4: element j -> (j - 8) d, element 16 + j -> (7 - j) d.
  // Block 1: d = -4, all nibbles 0 -> -8 * -4 = 32. Block 2: d = 0 with junk nibbles -> 0.
  std::vector<uint8_t> b(3 * 18);
  put_u16(b, 0, kF16Quarter);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  put_u16(b, 18, kF16MinusFour);
  put_u16(b, 36, kF16Zero);
  for (int j = 0; j < 16; ++j) b[38 + j] = 0xAB;
  const auto y = decode_misaligned(DType::Q4_0, b, 96);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y[16 + j], 0.25f * static_cast<float>(7 - j)) << j;
  }
  EXPECT_EQ(y[0], -2.0f);    // q = 0, the most negative quant
  EXPECT_EQ(y[15], 1.75f);   // q = 15, the largest
  for (int j = 32; j < 64; ++j) EXPECT_EQ(y[j], 32.0f) << j;
  for (int j = 64; j < 96; ++j) EXPECT_EQ(y[j], 0.0f) << j;
}

TEST(QuantDecode, Q4_1) {
  // Block 0: d = 0.5, m = -3, byte j = j | (15 - j) << 4. Block 1: d = -1, m = 2, bytes 0xF0.
  std::vector<uint8_t> b(2 * 20);
  put_u16(b, 0, kF16Half);
  put_u16(b, 2, kF16MinusThree);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  put_u16(b, 20, kF16MinusOne);
  put_u16(b, 22, kF16Two);
  for (int j = 0; j < 16; ++j) b[24 + j] = 0xF0;
  const auto y = decode_misaligned(DType::Q4_1, b, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j) - 3.0f) << j;
    EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(15 - j) - 3.0f) << j;
    EXPECT_EQ(y[32 + j], 2.0f) << j;    // q = 0 -> m
    EXPECT_EQ(y[48 + j], -13.0f) << j;  // q = 15 -> -15 + 2
  }
}

// Q5_0/Q5_1 test block: byte j = j | (15 - j) << 4, qh bytes {0x0E, 0xF0, 0x55, 0xAA}, i.e. the
// little-endian mask 0xAA55F00E whose bit e is the fifth bit of element e.
int q5_test_quant(int e) {
  const uint32_t mask = 0xAA55F00Eu;
  const int nibble = e < 16 ? e : 15 - (e - 16);
  return nibble | static_cast<int>(((mask >> e) & 1u) << 4);
}

void put_q5_test_bits(std::vector<uint8_t>& b, size_t qh_off, size_t qs_off) {
  const uint8_t qh[4] = {0x0E, 0xF0, 0x55, 0xAA};
  std::memcpy(b.data() + qh_off, qh, 4);
  for (int j = 0; j < 16; ++j) b[qs_off + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
}

TEST(QuantDecode, Q5_0) {
  std::vector<uint8_t> b(22);
  put_u16(b, 0, kF16Eighth);
  put_q5_test_bits(b, 2, 6);
  const auto y = decode_misaligned(DType::Q5_0, b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.125f * static_cast<float>(q5_test_quant(e) - 16)) << e;
  EXPECT_EQ(q5_test_quant(0), 0);    // nibble 0, bit 0 clear: the minimum quant
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(q5_test_quant(15), 31);  // nibble 15, bit 15 set: the maximum quant
  EXPECT_EQ(y[15], 1.875f);
  EXPECT_EQ(q5_test_quant(31), 16);  // element 31 reads nibble 0 and bit 31
}

TEST(QuantDecode, Q5_1) {
  std::vector<uint8_t> b(24);
  put_u16(b, 0, kF16Quarter);
  put_u16(b, 2, kF16MinusOne);
  put_q5_test_bits(b, 4, 8);
  const auto y = decode_misaligned(DType::Q5_1, b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.25f * static_cast<float>(q5_test_quant(e)) - 1.0f) << e;
  EXPECT_EQ(y[15], 6.75f);
}

// Q4_K/Q5_K scales: eight distinct 6-bit scales and mins, several with high bits set, packed by
// hand (see quant_blocks.h for the rule):
//   bytes 0..3  = sc[0..3] | (sc[4..7] >> 4) << 6  = 0x01, 0x91, 0x61, 0xFF
//   bytes 4..7  = mn[0..3] | (mn[4..7] >> 4) << 6  = 0x42, 0xB2, 0xC7, 0x3F
//   bytes 8..11 = (sc[4..7] & 15) | (mn[4..7] & 15) << 4 = 0x05, 0x18, 0x04, 0x9C
constexpr int kTestSc[8] = {1, 17, 33, 63, 5, 40, 20, 60};
constexpr int kTestMn[8] = {2, 50, 7, 63, 16, 33, 48, 9};
constexpr uint8_t kTestPackedScales[12] = {0x01, 0x91, 0x61, 0xFF, 0x42, 0xB2, 0xC7, 0x3F, 0x05, 0x18, 0x04, 0x9C};

// Nibble stored for element e of the Q4_K/Q5_K test block: qs[32c + l] = ((l + c) & 15) | ((3l + 5c) & 15) << 4.
int k_test_nibble(int e) {
  const int c = e / 64, r = e % 64;
  return r < 32 ? ((r + c) & 15) : ((3 * (r - 32) + 5 * c) & 15);
}

void put_k_test_nibbles(std::vector<uint8_t>& b, size_t qs_off) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) b[qs_off + 32 * c + l] = static_cast<uint8_t>(((l + c) & 15) | (((3 * l + 5 * c) & 15) << 4));
}

TEST(QuantDecode, Q4_KScalePacking) {
  uint8_t packed[12];
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(kTestSc[j]);
    mn[j] = static_cast<uint8_t>(kTestMn[j]);
  }
  quant::pack_k_scales(sc, mn, packed);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(packed[i], kTestPackedScales[i]) << i;
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(quant::unpack_k_scale(kTestPackedScales, j).scale, kTestSc[j]) << j;
    EXPECT_EQ(quant::unpack_k_scale(kTestPackedScales, j).min, kTestMn[j]) << j;
  }
}

TEST(QuantDecode, Q4_K) {
  // Block 0: d = 0.125, dmin = 0.0625. Block 1: d = -0.5 (negative super-scale), dmin = 1.
  std::vector<uint8_t> b(2 * 144);
  const uint16_t d[2] = {kF16Eighth, kF16MinusHalf}, dmin[2] = {kF16Sixteenth, kF16One};
  const float df[2] = {0.125f, -0.5f}, dminf[2] = {0.0625f, 1.0f};
  for (int blk = 0; blk < 2; ++blk) {
    put_u16(b, 144 * blk, d[blk]);
    put_u16(b, 144 * blk + 2, dmin[blk]);
    std::memcpy(b.data() + 144 * blk + 4, kTestPackedScales, 12);
    put_k_test_nibbles(b, 144 * blk + 16);
  }
  const auto y = decode_misaligned(DType::Q4_K, b, 512);
  for (int blk = 0; blk < 2; ++blk)
    for (int e = 0; e < 256; ++e) {
      const int s = e / 32;  // sub-block
      const double want = static_cast<double>(df[blk]) * kTestSc[s] * k_test_nibble(e) - dminf[blk] * kTestMn[s];
      EXPECT_EQ(y[256 * blk + e], static_cast<float>(want)) << blk << " " << e;
    }
  EXPECT_EQ(y[0], -0.125f);  // sc 1, q 0, mn 2: -0.0625 * 2
}

TEST(QuantDecode, Q5_K) {
  // d = 0.125, dmin = 0.0625; qh[l] = 0x35 l + 0x5A (mod 256): bit 2c / 2c + 1 is the fifth bit
  // of element 64c + l / 64c + 32 + l.
  std::vector<uint8_t> b(176);
  put_u16(b, 0, kF16Eighth);
  put_u16(b, 2, kF16Sixteenth);
  std::memcpy(b.data() + 4, kTestPackedScales, 12);
  uint8_t qh[32];
  for (int l = 0; l < 32; ++l) qh[l] = static_cast<uint8_t>(0x35 * l + 0x5A);
  std::memcpy(b.data() + 16, qh, 32);
  put_k_test_nibbles(b, 48);
  const auto y = decode_misaligned(DType::Q5_K, b, 256);
  int seen_max = 0;
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, r = e % 64, l = r % 32;
    const int bit = (qh[l] >> (2 * c + (r >= 32 ? 1 : 0))) & 1;
    const int q = k_test_nibble(e) + 16 * bit;
    seen_max = std::max(seen_max, q);
    const double want = 0.125 * kTestSc[e / 32] * q - 0.0625 * kTestMn[e / 32];
    EXPECT_EQ(y[e], static_cast<float>(want)) << e;
  }
  EXPECT_EQ(seen_max, 31);
}

// Q6_K test block: q(e) = (37 e + 11) mod 64 covers all 64 quants; scales include -128 and 127.
constexpr int8_t kTestQ6Scales[16] = {-128, 127, -1, 1, 0, 64, -64, 33, -33, 100, -100, 7, -7, 50, 2, -2};
int q6_test_quant(int e) { return (37 * e + 11) % 64; }

TEST(QuantDecode, Q6_K) {
  // Packed from the layout: half h, l in 0..31, base 128h:
  //   ql[64h + l] = q(b+l) & 15 | (q(b+64+l) & 15) << 4;  ql[64h + 32 + l] = q(b+32+l) & 15 | (q(b+96+l) & 15) << 4
  //   qh[32h + l] = q(b+l) >> 4 | q(b+32+l) >> 4 << 2 | q(b+64+l) >> 4 << 4 | q(b+96+l) >> 4 << 6
  std::vector<uint8_t> b(210);
  for (int h = 0; h < 2; ++h) {
    const int base = 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q0 = q6_test_quant(base + l), q1 = q6_test_quant(base + 32 + l);
      const int q2 = q6_test_quant(base + 64 + l), q3 = q6_test_quant(base + 96 + l);
      b[64 * h + l] = static_cast<uint8_t>((q0 & 15) | ((q2 & 15) << 4));
      b[64 * h + 32 + l] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
      b[128 + 32 * h + l] = static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
    }
  }
  for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(kTestQ6Scales[s]);
  put_u16(b, 208, kF16OneOver64);
  const auto y = decode_misaligned(DType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const double want = std::ldexp(1.0, -6) * kTestQ6Scales[e / 16] * (q6_test_quant(e) - 32);
    EXPECT_EQ(y[e], static_cast<float>(want)) << e;
  }
  // Spot checks worked by hand: e = 0: q 11, scale -128 -> 2^-6 * -128 * -21 = 42.
  EXPECT_EQ(y[0], 42.0f);
  // e = 17: q = (629 + 11) mod 64 = 0, scale 127 -> 2^-6 * 127 * -32 = -63.5.
  EXPECT_EQ(y[17], -63.5f);
}

// Q3_K test block: q(e) = (5 e + 3) mod 8 covers all 8
// quants, sc(s) = (23 s + 7) mod 64 the 6-bit scales, both packed by hand from the layout:
//   qs[32h + l] bits 2j..2j+1 = q(128h + 32j + l) & 3;  hmask[l] bit 4h + j = q(...) >> 2
//   scales[b] (b < 8) = sc(b) & 15 | (sc(b + 8) & 15) << 4;  scales[8 + j] bits 2k..2k+1 = sc(j + 4k) >> 4
int q3_test_quant(int e) { return (5 * e + 3) % 8; }
int q3_test_scale(int s) { return (23 * s + 7) % 64; }

TEST(QuantDecode, Q3_K) {
  std::vector<uint8_t> b(110);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32, q = q3_test_quant(e);
    b[32 + 32 * h + l] |= static_cast<uint8_t>((q & 3) << (2 * j));
    b[l] |= static_cast<uint8_t>((q >> 2) << (4 * h + j));
  }
  for (int i = 0; i < 8; ++i) b[96 + i] = static_cast<uint8_t>((q3_test_scale(i) & 15) | ((q3_test_scale(i + 8) & 15) << 4));
  for (int s = 0; s < 16; ++s) b[104 + s % 4] |= static_cast<uint8_t>((q3_test_scale(s) >> 4) << (2 * (s / 4)));
  put_u16(b, 108, kF16OneOver64);
  const auto y = decode_misaligned(DType::Q3_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const double want = std::ldexp(1.0, -6) * (q3_test_scale(e / 16) - 32) * (q3_test_quant(e) - 4);
    EXPECT_EQ(y[e], static_cast<float>(want)) << e;
  }
  // By hand: e = 0: q 3, sc 7 -> 2^-6 * -25 * -1 = 0.390625; e = 255: q (1278 mod 8) = 6, sc(15) =
  // 352 mod 64 = 32 -> 0.
  EXPECT_EQ(y[0], 0.390625f);
  EXPECT_EQ(y[255], 0.0f);
}

TEST(QuantDecode, Q8_K) {
  // d = -0.75 as float32, qs = j - 128 (all of int8), bsums junk (not used to decode).
  std::vector<uint8_t> b(292);
  const float d = -0.75f;
  std::memcpy(b.data(), &d, 4);
  for (int j = 0; j < 256; ++j) b[4 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 128));
  for (int g = 0; g < 32; ++g) b[260 + g] = 0x7F;
  const auto y = decode_misaligned(DType::Q8_K, b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], -0.75f * static_cast<float>(j - 128)) << j;
}

TEST(QuantDecode, ZeroBytesDecodeToZero) {
  for (DType t : kQuantTypes) {
    const int64_t n = 2 * dtype_traits(t).block_elems;
    const std::vector<uint8_t> zeros(dtype_row_bytes(t, n), 0);
    const auto y = decode_misaligned(t, zeros, n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace lfm
