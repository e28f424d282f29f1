// Tests of the ggml block formats: decoders against hand-built blocks, encoders by round-trip
// error bounds, and the reference matmul on quantized weights.
//
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

namespace lfm {
namespace {

// f16 bit patterns used as scales (value in the comment).
constexpr uint16_t kF16Zero = 0x0000;       // 0
constexpr uint16_t kF16Quarter = 0x3400;    // 0.25
constexpr uint16_t kF16Half = 0x3800;       // 0.5
constexpr uint16_t kF16MinusHalf = 0xB800;  // -0.5
constexpr uint16_t kF16One = 0x3C00;        // 1
constexpr uint16_t kF16MinusOne = 0xBC00;   // -1
constexpr uint16_t kF16Two = 0x4000;        // 2
constexpr uint16_t kF16MinusThree = 0xC200; // -3
constexpr uint16_t kF16MinusFour = 0xC400;  // -4
constexpr uint16_t kF16Eighth = 0x3000;     // 0.125
constexpr uint16_t kF16Sixteenth = 0x2C00;  // 0.0625
constexpr uint16_t kF16OneOver64 = 0x2400;  // 2^-6
constexpr uint16_t kF16MinSubnormalNeg = 0x8001;  // -2^-24, the smallest-magnitude negative subnormal

void put_u16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v & 0xFF);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}

// Decodes `bytes` placed at byte offset 1 of a larger buffer (so never 2- or 4-byte aligned).
std::vector<float> decode_misaligned(DType type, const std::vector<uint8_t>& bytes, int64_t n) {
  EXPECT_EQ(bytes.size(), dtype_row_bytes(type, n));
  std::vector<uint8_t> buf(bytes.size() + 8, 0xCD);
  std::memcpy(buf.data() + 1, bytes.data(), bytes.size());
  std::vector<float> out(static_cast<size_t>(n), -12345.0f);
  dequantize_row(type, buf.data() + 1, out.data(), n);
  return out;
}

// Encodes into a misaligned destination and returns the bytes.
std::vector<uint8_t> encode_misaligned(DType type, const std::vector<float>& x) {
  const size_t nbytes = dtype_row_bytes(type, static_cast<int64_t>(x.size()));
  std::vector<uint8_t> buf(nbytes + 8, 0xCD);
  quantize_row(type, x.data(), buf.data() + 3, static_cast<int64_t>(x.size()));
  return std::vector<uint8_t>(buf.begin() + 3, buf.begin() + 3 + static_cast<std::ptrdiff_t>(nbytes));
}

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {  // Box-Muller: same numbers on every standard library
    const double r = std::sqrt(-2.0 * std::log(u(rng))), t = 2.0 * 3.14159265358979323846 * u(rng);
    x[i] = mean + sigma * static_cast<float>(r * std::cos(t));
  }
  return x;
}

const DType kQuantTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                             DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};

// ---------------------------------------------------------------------------------------------
// Traits and plain types

// The encoders' inline rounding agrees with std::nearbyint (round half to even) on ties, on
// random values across the range the K-quant searches use, and clamps what ggml would reject.
TEST(QuantEncode, RoundHalfEvenMatchesNearbyint) {
  for (float v : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 0.49999997f, 63.5f, -64.5f, 4194302.5f, -4194302.5f, 0.0f, -0.0f})
    EXPECT_EQ(quant::round_half_even(v), static_cast<int>(std::nearbyint(v))) << v;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> small(-300.0f, 300.0f), large(-4194000.0f, 4194000.0f);
  for (int i = 0; i < 200000; ++i) {
    const float v = i % 2 ? small(rng) : large(rng);
    ASSERT_EQ(quant::round_half_even(v), static_cast<int>(std::nearbyint(v))) << v;
  }
  EXPECT_EQ(quant::round_half_even(1e9f), 4194303);
  EXPECT_EQ(quant::round_half_even(-1e9f), -4194303);
  EXPECT_EQ(quant::round_half_even(std::nanf("")), -4194303);
}

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

// ---------------------------------------------------------------------------------------------
// Encoders

constexpr float kF16Eps = 1.0f / 2048.0f;  // relative rounding error of a normal f16: 2^-11

// Encodes x, decodes it, and returns the decoded row.
std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  const auto bytes = encode_misaligned(t, x);
  return decode_misaligned(t, bytes, static_cast<int64_t>(x.size()));
}

// Test rows: N(0,1), a shifted/scaled row (all-positive blocks exercise the mins), and a row with
// outliers. Lengths: 32*7 = 224 (odd number of 32-blocks) for the 32-element types, 256*3 = 768 for all.
std::vector<std::vector<float>> test_rows(int64_t n) {
  std::vector<std::vector<float>> rows = {gaussian(n, 11), gaussian(n, 12, 0.02f, 0.05f), gaussian(n, 13, 3.0f)};
  for (int64_t i = 0; i < n; i += 37) rows[2][i] *= 25.0f;
  return rows;
}

// Per-element bound for the 32-element formats, from each block's extremes.
//   Q8_0: d = amax/127, q = round(x/d): |x - qd| <= d/2; the stored f16 d' has |d - d'| <= d 2^-11 and
//         |q| <= 127, so |err| <= d (1/2 + 127 * 2^-11).
//   Q4_0: d = amax/8 in magnitude; the extreme is exactly -8d, the other side reaches 7d, so
//         elements beyond 7.5d (opposite sign to the extreme) clamp: |err| <= d there, d/2 elsewhere;
//         plus 8 d 2^-11 from the f16 scale. Q5_0 likewise with 16 and 15.
//   Q4_1: d = (max - min)/15, |err| <= d/2 + 15 d 2^-11 (f16 d) + |min| 2^-11 (f16 m). Q5_1 with 31.
// A relative slack of 1e-5 covers float32 rounding in the encoder's arithmetic.
void check_q32_bound(DType t, const std::vector<float>& x, const std::vector<float>& y) {
  for (size_t b0 = 0; b0 < x.size(); b0 += 32) {
    float amax = 0, max = 0, mn = x[b0], mx = x[b0];
    for (size_t i = b0; i < b0 + 32; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
    }
    for (size_t i = b0; i < b0 + 32; ++i) {
      float bound = 0;
      switch (t) {
        case DType::Q8_0: bound = amax / 127 * (0.5f + 127 * kF16Eps); break;
        case DType::Q4_0:
        case DType::Q5_0: {
          const float levels = t == DType::Q4_0 ? 8.0f : 16.0f;
          const float d = amax / levels;
          const bool clamped_side = (x[i] * max < 0) && std::fabs(x[i]) > (levels - 0.5f) * d;
          bound = (clamped_side ? d : 0.5f * d) + levels * d * kF16Eps;
          break;
        }
        case DType::Q4_1:
        case DType::Q5_1: {
          const float levels = t == DType::Q4_1 ? 15.0f : 31.0f;
          const float d = (mx - mn) / levels;
          bound = 0.5f * d + levels * d * kF16Eps + std::fabs(mn) * kF16Eps;
          break;
        }
        default: FAIL();
      }
      ASSERT_LE(std::fabs(y[i] - x[i]), bound * (1 + 1e-5f) + 1e-30f)
          << dtype_name(t) << " element " << i << " x=" << x[i] << " y=" << y[i];
    }
  }
}

TEST(QuantEncode, Q32FormatsWithinDerivedBounds) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t n : {32 * 7, 256 * 3})
      for (const auto& x : test_rows(n)) check_q32_bound(t, x, round_trip(t, x));
}

TEST(QuantEncode, Q8_KWithinHalfStep) {
  // d = amax/127 stored as float32 (no f16 rounding) and q = round(x/d): |err| <= d/2.
  for (const auto& x : test_rows(256 * 3)) {
    const auto y = round_trip(DType::Q8_K, x);
    for (size_t b0 = 0; b0 < x.size(); b0 += 256) {
      float amax = 0;
      for (size_t i = b0; i < b0 + 256; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (size_t i = b0; i < b0 + 256; ++i) ASSERT_LE(std::fabs(y[i] - x[i]), amax / 127 * 0.5f * (1 + 1e-5f)) << i;
    }
  }
}

TEST(QuantEncode, Q8_KBlockSums) {
  const auto x = gaussian(512, 5);
  const auto bytes = encode_misaligned(DType::Q8_K, x);
  for (int blk = 0; blk < 2; ++blk) {
    quant::BlockQ8_K b;
    std::memcpy(&b, bytes.data() + 292 * blk, 292);
    int amax_q = 0;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
      EXPECT_EQ(b.bsums[g], sum) << blk << " " << g;
    }
    for (int j = 0; j < 256; ++j) amax_q = std::max(amax_q, std::abs(static_cast<int>(b.qs[j])));
    EXPECT_EQ(amax_q, 127);  // the extreme element maps to ±127
  }
}

// K-quants: every element must decode to the level nearest to it on the grid its sub-block
// actually stores (Q4_K/Q5_K: d*sc*q - dmin*m, q in 0..nmax; Q6_K: d*sc*(q - 32), q in 0..63),
// i.e. |err| <= step/2 inside the grid's range and = the distance to the end level outside.
// Tolerance 1e-5 relative to the grid's magnitude for float32 arithmetic.
void check_k_nearest_level(DType t, const std::vector<float>& x, const std::vector<float>& y) {
  const auto bytes = encode_misaligned(t, x);
  const size_t bb = static_cast<size_t>(dtype_traits(t).block_bytes);
  for (size_t blk = 0; blk < x.size() / 256; ++blk) {
    const int sub = t == DType::Q6_K ? 16 : 32;
    for (int s = 0; s < 256 / sub; ++s) {
      float step, lo, hi;
      if (t == DType::Q6_K) {
        quant::BlockQ6_K b;
        std::memcpy(&b, bytes.data() + bb * blk, bb);
        step = f16_to_f32(b.d) * b.scales[s];
        lo = std::min(-32 * step, 31 * step);
        hi = std::max(-32 * step, 31 * step);
        step = std::fabs(step);
      } else {
        quant::BlockQ4_K b4;  // Q5_K shares d, dmin and scales at the same offsets
        std::memcpy(&b4, bytes.data() + bb * blk, 16);
        const auto sm = quant::unpack_k_scale(b4.scales, s);
        step = f16_to_f32(b4.d) * sm.scale;
        lo = -f16_to_f32(b4.dmin) * sm.min;
        hi = lo + step * (t == DType::Q4_K ? 15 : 31);
      }
      const float tol = 1e-5f * (std::fabs(lo) + std::fabs(hi)) + 1e-30f;
      for (int l = 0; l < sub; ++l) {
        const size_t i = 256 * blk + static_cast<size_t>(sub * s + l);
        const float outside = std::max({0.0f, lo - x[i], x[i] - hi});
        ASSERT_LE(std::fabs(y[i] - x[i]), std::max(0.5f * step, outside) + tol)
            << dtype_name(t) << " element " << i << " x=" << x[i] << " y=" << y[i] << " step=" << step;
      }
    }
  }
}

TEST(QuantEncode, KQuantsRoundToTheirStoredGrid) {
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (const auto& x : test_rows(256 * 3)) check_k_nearest_level(t, x, round_trip(t, x));
}

// RMS error against the uniform-rounding model: rounding to a grid of step s leaves an RMS error
// of s/sqrt(12). Each format's natural step per block is computed from the data (Q8_0: amax/127,
// Q4_0: amax/8, Q4_1: range/15, Q5_0: amax/16, Q5_1: range/31, Q8_K: amax/127; the K-quants: the
// plain min/max grid of each sub-block, range(min(0,min)..max)/15 or /31 for Q4_K/Q5_K and
// amax/32 for Q6_K; F16/BF16: |x| 2^-11 / 2^-8 relative to each element, whose uniform model
// gives 2^-11/sqrt(3)). The measured RMS must stay within the model (the factor allows for the
// clamped half-step of the symmetric formats, the 6-bit/8-bit scale rounding of the K-quants,
// and sampling noise): a wrong layout, scale or rounding blows well past it. The test also
// prints the RMS relative error, sqrt(Σerr²/Σx²), of each type on N(0,1) data.
TEST(QuantEncode, RmsErrorOnGaussianDataMatchesModel) {
  const int64_t n = 256 * 64;
  const auto x = gaussian(n, 2024);
  double sum_x2 = 0;
  for (float v : x) sum_x2 += static_cast<double>(v) * v;
  const DType types[] = {DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                         DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};
  for (DType t : types) {
    const auto y = round_trip(t, x);
    double sum_err2 = 0, model = 0;  // model: Σ step²/12 over elements
    const int group = t == DType::Q6_K ? 16 : (t == DType::Q8_K ? 256 : 32);
    for (int64_t g0 = 0; g0 < n; g0 += group) {
      float amax = 0, mn = x[g0], mx = x[g0];
      for (int64_t i = g0; i < g0 + group; ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
      }
      for (int64_t i = g0; i < g0 + group; ++i) {
        double step = 0;
        switch (t) {
          case DType::F16: step = std::fabs(x[i]) * 2 * kF16Eps; break;
          case DType::BF16: step = std::fabs(x[i]) * std::ldexp(1.0, -7); break;
          case DType::Q8_0: case DType::Q8_K: step = amax / 127.0; break;
          case DType::Q4_0: step = amax / 8.0; break;
          case DType::Q5_0: step = amax / 16.0; break;
          case DType::Q4_1: step = (mx - mn) / 15.0; break;
          case DType::Q5_1: step = (mx - mn) / 31.0; break;
          case DType::Q4_K: step = (mx - std::min(0.0f, mn)) / 15.0; break;
          case DType::Q5_K: step = (mx - std::min(0.0f, mn)) / 31.0; break;
          case DType::Q6_K: step = amax / 32.0; break;
          default: FAIL();
        }
        model += step * step / 12.0;
        const double e = static_cast<double>(y[i]) - x[i];
        sum_err2 += e * e;
      }
    }
    const double rms_rel = std::sqrt(sum_err2 / sum_x2), model_rel = std::sqrt(model / sum_x2);
    std::printf("[ quant    ] %-5s RMS relative error %.5f (uniform model %.5f)\n", dtype_name(t), rms_rel, model_rel);
    EXPECT_LE(rms_rel, 1.15 * model_rel) << dtype_name(t);
    EXPECT_GT(rms_rel, 0.0) << dtype_name(t);
  }
}

TEST(QuantEncode, ZeroRowsEncodeToZero) {
  for (DType t : kQuantTypes) {
    const int64_t n = 256 * 2;
    const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    const auto bytes = encode_misaligned(t, zeros);
    const auto y = decode_misaligned(t, bytes, n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
    // Scales must be exactly zero too (no NaN/inf from dividing by a zero range).
    if (t == DType::Q6_K || t == DType::Q8_K) {
      for (uint8_t byte : bytes) ASSERT_EQ(byte, 0) << dtype_name(t);  // ggml zero-fills these blocks
    }
    if (t == DType::Q4_K || t == DType::Q5_K) {  // d, dmin and the packed scales/mins
      for (size_t blk = 0; blk < 2; ++blk)
        for (size_t k = 0; k < 16; ++k) ASSERT_EQ(bytes[blk * dtype_traits(t).block_bytes + k], 0) << dtype_name(t);
    }
  }
}

TEST(QuantEncode, DeterministicAndAlignmentIndependent) {
  const auto x = gaussian(256 * 3, 99);
  for (DType t : kQuantTypes) {
    const auto a = encode_misaligned(t, x);
    std::vector<uint8_t> b(a.size());
    quantize_row(t, x.data(), b.data(), static_cast<int64_t>(x.size()));  // aligned destination
    EXPECT_EQ(a, b) << dtype_name(t);
  }
}

TEST(QuantEncode, Q4_0MatchesGgmlRoundingByHand) {
  // x[j] = j/2 - 8: the extreme is -8, so d = -8 / -8 = 1 and q = trunc(x + 8.5) = floor((j + 1)/2),
  // ties rounding up; element 31 (7.5) would need q = 16 and clamps to 15.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * static_cast<float>(j) - 8.0f;
  const auto bytes = encode_misaligned(DType::Q4_0, x);
  EXPECT_EQ(bytes[0], 0x00);
  EXPECT_EQ(bytes[1], 0x3C);  // f16 1.0
  EXPECT_EQ(bytes[2], 0x80);  // element 0: q 0; element 16 (0.0): q 8
  EXPECT_EQ(bytes[3], 0x91);  // element 1 (-7.5): q 1; element 17 (0.5): q 9
  EXPECT_EQ(bytes[4], 0x91);  // element 2 (-7.0): trunc(1.5) = 1; element 18 (1.0): trunc(9.5) = 9
  EXPECT_EQ(bytes[17], 0xF8); // element 15 (-0.5): q 8; element 31 (7.5): clamped to 15
}

TEST(QuantEncode, Q8_0ExactGridRoundTripsExactly) {
  // Values k * 0.5 with the extreme 127 * 0.5: d = 0.5 exactly, so decoding reproduces x exactly.
  std::vector<float> x(64);
  for (int j = 0; j < 64; ++j) x[j] = 0.5f * static_cast<float>((j * 29) % 255 - 127);
  x[5] = 63.5f;
  x[40] = -63.5f;
  EXPECT_EQ(round_trip(DType::Q8_0, x), x);
}

TEST(QuantEncode, Q6_KLargestScaleMapsToMinus128) {
  const auto x = gaussian(256, 31);
  const auto bytes = encode_misaligned(DType::Q6_K, x);
  quant::BlockQ6_K b;
  std::memcpy(&b, bytes.data(), sizeof b);
  int extreme = 0;
  for (int s = 0; s < 16; ++s)
    if (std::abs(static_cast<int>(b.scales[s])) > std::abs(extreme)) extreme = b.scales[s];
  EXPECT_EQ(extreme, -128);
}

// ---------------------------------------------------------------------------------------------
// Matmul on quantized weights

TEST(QuantMatmul, QuantizedWeightMatchesItsDequantizedCopy) {
  ThreadPool pool(2);
  auto backend = make_reference_backend(pool);
  const int64_t out = 7, in = 256 * 3, n = 3;
  const auto w = gaussian(static_cast<size_t>(out * in), 3, 0.05f);
  const auto x = gaussian(static_cast<size_t>(n * in), 4);
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    const size_t row_bytes = dtype_row_bytes(t, in);
    std::vector<uint8_t> wq(row_bytes * out);
    std::vector<float> wd(static_cast<size_t>(out * in));
    for (int64_t r = 0; r < out; ++r) {
      quantize_row(t, w.data() + r * in, wq.data() + r * row_bytes, in);
      dequantize_row(t, wq.data() + r * row_bytes, wd.data() + r * in, in);
    }
    const TensorView qv{t, {out, in}, wq.data(), wq.size()};
    const TensorView fv{DType::F32, {out, in}, wd.data(), wd.size() * 4};
    std::vector<float> yq(static_cast<size_t>(n * out)), yf(yq.size());
    backend->matmul(x.data(), n, qv, yq.data());
    backend->matmul(x.data(), n, fv, yf.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double mag = 0;  // Σ|x||w|: scale of float32 summation error
        for (int64_t k = 0; k < in; ++k) mag += std::fabs(x[i * in + k] * wd[j * in + k]);
        EXPECT_NEAR(yq[i * out + j], yf[i * out + j], 1e-6 * mag) << dtype_name(t);
      }
    // And the quantized product stays close to the product with the original weights.
    std::vector<float> y0(yq.size());
    const TensorView ov{DType::F32, {out, in}, w.data(), w.size() * 4};
    backend->matmul(x.data(), n, ov, y0.data());
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < y0.size(); ++i) {
      err2 += (yq[i] - y0[i]) * (yq[i] - y0[i]);
      ref2 += y0[i] * y0[i];
    }
    EXPECT_LT(std::sqrt(err2 / ref2), 0.2) << dtype_name(t);  // Q4 weights: ~8% RMS, so products well under 20%
  }
}

}  // namespace
}  // namespace lfm
