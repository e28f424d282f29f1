// The packed weight layouts (kernels/weight_pack.h): where every stored value lands, the F16
// split codes of the AMX kernel, and what the packers refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/bf16_pairs.h"
#include "kernels/cpu_features.h"
#include "kernels/dequant.h"
#include "kernels/weight_pack.h"
#include "kernel_test_weights.h"

namespace lfm {
namespace {

using test::make_packed_weight;
using test::make_weight;
using test::Weight;

// BF16 runs hold columns j and j + 16 side by side (chunks16_position), the last partial chunk too.
TEST(WeightPack, ChunksLayoutPlacesEveryValue) {
  EXPECT_EQ(chunks16_position(DType::BF16, 0), 0);
  EXPECT_EQ(chunks16_position(DType::BF16, 16), 1);
  EXPECT_EQ(chunks16_position(DType::BF16, 15), 30);
  EXPECT_EQ(chunks16_position(DType::BF16, 31), 31);
  EXPECT_EQ(chunks16_position(DType::F16, 16), 16);
  for (DType dt : {DType::F16, DType::F32, DType::BF16}) {
    const int64_t out = 19, in = 45, elem = dt == DType::F32 ? 4 : 2;
    const Weight w = make_weight(dt, out, in, 3);
    const AlignedBuffer packed = pack_weight(PackedLayout::kChunks16, w.view);
    const size_t panel = chunks16_panel_bytes(dt, in);
    ASSERT_EQ(panel, static_cast<size_t>(2 * 16 * 32 * elem));
    ASSERT_EQ(packed.size(), 2 * panel);
    const auto* p = static_cast<const uint8_t*>(packed.data());
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t k = 0; k < 64; ++k) {
        uint32_t got = 0, want = 0;
        const int64_t at = (r / 16) * static_cast<int64_t>(panel) + ((k / 32) * 16 + r % 16) * 32 * elem +
                           chunks16_position(dt, k % 32) * elem;
        std::memcpy(&got, p + at, static_cast<size_t>(elem));
        if (r < out && k < in) std::memcpy(&want, w.view.row(r) + k * elem, static_cast<size_t>(elem));
        ASSERT_EQ(got, want) << dtype_name(dt) << " row " << r << " column " << k;
      }
  }
}

// The column-pair layout holds every stored BF16 value where weight_pack.h says: row r in lane
// r % 16 of panel r / 16, columns 2c and 2c+1 in pair c; zeros past the last row and column.
TEST(WeightPack, PairsLayoutPlacesEveryValue) {
  const int64_t out = 19, in = 7;
  const Weight w = make_packed_weight(DType::BF16, out, in, 3);
  const auto* p = static_cast<const uint8_t*>(w.view.packed);
  const size_t panel = pairs16_panel_bytes(in);
  ASSERT_EQ(panel, 4u * 64);
  ASSERT_EQ(w.packed.size(), 2 * panel);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t k = 0; k < 8; ++k) {
      uint16_t got, want = 0;
      std::memcpy(&got, p + (r / 16) * panel + (k / 2) * 64 + 4 * (r % 16) + 2 * (k % 2), 2);
      if (r < out && k < in) std::memcpy(&want, w.view.row(r) + 2 * k, 2);
      ASSERT_EQ(got, want) << "row " << r << " column " << k;
    }
  const Weight f32 = make_weight(DType::F32, 4, 64, 1);
  EXPECT_THROW(pack_pairs16(f32.view), Error);
}

// An F16 value in the column-pair layout is a code (weight_pack.h) that the AMX kernel splits into
// bf16 hi + lo with integer operations: for every one of the 65,536 f16 bit patterns, the code
// exists exactly when |w| < 128 (finite), and its split is the float one: hi = w's float32 bits
// cut to 16, lo = w − hi (exact, as bf16).
TEST(WeightPack, F16CodesSplitEveryValueAsTheFloatSplitDoes) {
  const bool simd = cpu_features().avx512f && cpu_features().avx512bw;
  std::vector<uint16_t> codes, want_hi, want_lo;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float w = f16_to_f32(static_cast<uint16_t>(h));
    const int32_t code = pairs16_f16_code(static_cast<uint16_t>(h));
    ASSERT_EQ(code >= 0, std::isfinite(w) && std::fabs(w) < 128.0f) << "f16 bits " << h;
    if (code < 0) continue;
    uint32_t bits;
    std::memcpy(&bits, &w, 4);
    const uint32_t hi_bits = bits & 0xFFFF0000u;
    float hi;
    std::memcpy(&hi, &hi_bits, 4);
    const float lo = w - hi;
    uint32_t lo_bits;
    std::memcpy(&lo_bits, &lo, 4);
    ASSERT_EQ(lo_bits & 0xFFFFu, 0u) << "lo of f16 bits " << h << " is not a bf16 value";
    codes.push_back(static_cast<uint16_t>(code));
    want_hi.push_back(static_cast<uint16_t>(hi_bits >> 16));
    want_lo.push_back(static_cast<uint16_t>(lo_bits >> 16));
  }
  ASSERT_EQ(codes.size(), 2u * 0x5800);  // every magnitude below 0x5800 (128.0), both signs
  if (!simd) GTEST_SKIP() << "the split needs AVX-512 BW";
  while (codes.size() % 32) codes.push_back(0), want_hi.push_back(0), want_lo.push_back(0);
  std::vector<uint16_t> hi(codes.size()), lo(codes.size());
  bf16_pairs::split_f16_codes(codes.data(), static_cast<int64_t>(codes.size()), hi.data(), lo.data());
  for (size_t i = 0; i < codes.size(); ++i) {
    ASSERT_EQ(hi[i], want_hi[i]) << "hi of code " << codes[i];
    ASSERT_EQ(lo[i], want_lo[i]) << "lo of code " << codes[i];
  }
}

// The packer's AVX-512 encoder gives every f16 pattern's code as pairs16_f16_code does (zeros and
// subnormals included, in whole vectors and the tail), and refuses a value without one wherever it is.
TEST(WeightPack, F16CodesOfTheVectorEncoderAreTheScalarOnes) {
  if (!cpu_features().avx512f || !cpu_features().avx512bw) GTEST_SKIP() << "the encoder needs AVX-512 BW";
  std::vector<uint16_t> values;
  for (uint32_t h = 0; h < 65536; ++h)
    if (pairs16_f16_code(static_cast<uint16_t>(h)) >= 0) values.push_back(static_cast<uint16_t>(h));
  for (uint16_t h : {0x0001, 0x8001, 0x03FF, 0x0400, 0x57FF, 0x0000, 0x8000}) values.push_back(h);  // a tail of 7
  std::vector<uint16_t> codes(values.size());
  ASSERT_TRUE(bf16_pairs::encode_f16_codes(values.data(), static_cast<int64_t>(values.size()), codes.data()));
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(codes[i], pairs16_f16_code(values[i])) << "f16 bits " << values[i];
  for (const size_t at : {size_t{5}, values.size() - 3}) {  // in a vector, in the tail
    std::vector<uint16_t> bad = values;
    bad[at] = 0x7C00;  // inf
    EXPECT_FALSE(bf16_pairs::encode_f16_codes(bad.data(), static_cast<int64_t>(bad.size()), codes.data())) << at;
  }
}

// An F16 matrix holding a value without a code is packed in kChunks16 (its exact float kernels)
// by the model's weight preparation, and the column-pair packer alone refuses it naming the value.
TEST(WeightPack, F16MatrixBeyondTheCodesTakesTheChunkLayout) {
  Weight w = make_weight(DType::F16, 16, 64, 7);
  AlignedBuffer got(packed_size(PackedLayout::kPairs16, w.view));
  EXPECT_EQ(pack_pairs16_or_chunks16_into(w.view, got.data()), PackedLayout::kPairs16);
  AlignedBuffer want = pack_pairs16(w.view);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  const uint16_t big = 0x7BFF;  // 65504
  std::memcpy(w.bytes.data() + 2 * 100, &big, 2);
  EXPECT_EQ(pack_pairs16_or_chunks16_into(w.view, got.data()), PackedLayout::kChunks16);
  want = pack_weight(PackedLayout::kChunks16, w.view);
  ASSERT_EQ(want.size(), got.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
  try {
    pack_pairs16(w.view);
    FAIL() << "packed 65504 into column pairs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("65504"), std::string::npos) << e.what();
  }
}

// The 16-row layout holds every stored byte where weight_pack.h says (Q8_0 biased by 128),
// zero rows past the end, and refuses what it cannot pack.
TEST(WeightPack, LayoutPlacesEveryStoredByte) {
  for (DType dt : {DType::Q4_0, DType::Q8_0}) {
    const int64_t out = 21, in = 96, blocks = 3, G = rows16_group_count(dt);
    const Weight w = make_packed_weight(dt, out, in, 5);
    const auto* p = static_cast<const uint8_t*>(w.view.packed);
    const size_t sb = dt == DType::Q4_0 ? 18 : 34, unit = rows16_unit_bytes(dt), panel = rows16_panel_bytes(dt, in);
    ASSERT_EQ(panel, 2 * unit);
    ASSERT_EQ(w.packed.size(), 2 * panel);
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* u = p + (r / 16) * panel + (b / 2) * unit;
        const uint8_t* src = r < out ? w.view.row(r) + b * sb : nullptr;
        for (int k = 0; k < 2; ++k)
          ASSERT_EQ(u[2 * G * 64 + (b % 2) * 32 + 2 * (r % 16) + k], src ? src[k] : 0) << r << " " << b;
        for (int64_t g = 0; g < G; ++g)
          for (int j = 0; j < 4; ++j) {
            const uint8_t got = u[(b % 2) * G * 64 + g * 64 + 4 * (r % 16) + j];
            const uint8_t want = !src ? 0 : dt == DType::Q8_0 ? src[2 + 4 * g + j] ^ 0x80 : src[2 + 4 * g + j];
            ASSERT_EQ(got, want) << dtype_name(dt) << " row " << r << " block " << b << " group " << g;
          }
      }
  }
  const Weight f16 = make_weight(DType::F16, 4, 64, 1);
  EXPECT_THROW(pack_rows16(f16.view), Error);
  const Weight bad = make_weight(DType::Q4_0, 4, 64, 1);
  TensorView v = bad.view;
  v.shape = {2, 4, 32};
  EXPECT_THROW(pack_rows16(v), Error);
}

// Q4_1, Q5_0 and Q5_1 in the 16-row layout: every element's quant, rebuilt from its nibble (and
// its bit in the fifth-bit plane) with the block's d (and m) from the unit, gives exactly what
// the reference decoder gives from the stored block; rows past the end are zero.
TEST(WeightPack, LayoutHoldsEveryValueOfTheFormatsWithMinsAndFifthBits) {
  for (DType dt : {DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    const int64_t out = 21, in = 96, blocks = 3;
    const Weight w = make_packed_weight(dt, out, in, 6);
    const auto* p = static_cast<const uint8_t*>(w.view.packed);
    const bool five = dt != DType::Q4_1, mins = dt != DType::Q5_0;
    const size_t kb = five ? 320 : 256, unit = rows16_unit_bytes(dt), panel = rows16_panel_bytes(dt, in);
    ASSERT_EQ(unit, 2 * kb + (mins ? 128 : 64));
    ASSERT_EQ(unit, 32 * static_cast<size_t>(dtype_traits(dt).block_bytes));  // exactly the stored blocks
    ASSERT_EQ(w.packed.size(), 2 * panel);
    std::vector<float> want(in);
    for (int64_t r = 0; r < 32; ++r) {
      if (r < out) dequantize_row(dt, w.view.row(r), want.data(), in);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* u = p + (r / 16) * panel + (b / 2) * unit;
        const uint8_t* blk = u + (b % 2) * kb;
        const int64_t lane = r % 16;
        uint16_t dbits, mbits = 0;
        std::memcpy(&dbits, u + 2 * kb + (b % 2) * 32 + 2 * lane, 2);
        if (mins) std::memcpy(&mbits, u + 2 * kb + 64 + (b % 2) * 32 + 2 * lane, 2);
        const float d = f16_to_f32(dbits), m = f16_to_f32(mbits);
        for (int g = 0; g < 4; ++g)
          for (int j = 0; j < 4; ++j) {
            const uint8_t nib = blk[64 * g + 4 * lane + j], high = five ? blk[256 + 4 * lane + j] : 0;
            const int qlo = (nib & 0x0F) | (((high >> (2 * g)) & 1) << 4);
            const int qhi = (nib >> 4) | (((high >> (2 * g + 1)) & 1) << 4);
            for (auto [k, q] : {std::pair{4 * g + j, qlo}, std::pair{16 + 4 * g + j, qhi}}) {
              const float got = dt == DType::Q5_0 ? static_cast<float>(q - 16) * d : static_cast<float>(q) * d + m;
              if (r >= out) {
                ASSERT_EQ(nib | high | dbits | mbits, 0) << dtype_name(dt) << " padding row " << r;
              } else {
                ASSERT_EQ(got, want[b * 32 + k]) << dtype_name(dt) << " row " << r << " element " << b * 32 + k;
              }
            }
          }
      }
    }
  }
}

}  // namespace
}  // namespace lfm
