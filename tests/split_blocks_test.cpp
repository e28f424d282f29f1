// The split-block row layout (kernels/split_blocks.h) that the CUDA backend keeps quantized
// matrices in: where each block's value and scale bytes land, the alignment the GPU kernels rely
// on, and that joining a split matrix gives back the stored bytes.
#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/quant_blocks.h"
#include "kernels/split_blocks.h"

namespace lfm {
namespace {

using namespace quant;

constexpr DType kSplitTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(SplitBlocks, ValuesAreTheBlockStructsQuantArrays) {
  // The value bytes are the quantized arrays of kernels/quant_blocks.h's structs, the rest scales.
  EXPECT_EQ(split_block(DType::Q8_0).value_begin, static_cast<int>(offsetof(BlockQ8_0, qs)));
  EXPECT_EQ(split_block(DType::Q8_0).value_bytes(), static_cast<int>(sizeof(BlockQ8_0::qs)));
  EXPECT_EQ(split_block(DType::Q4_0).value_begin, static_cast<int>(offsetof(BlockQ4_0, qs)));
  EXPECT_EQ(split_block(DType::Q4_0).value_bytes(), static_cast<int>(sizeof(BlockQ4_0::qs)));
  EXPECT_EQ(split_block(DType::Q4_K).value_begin, static_cast<int>(offsetof(BlockQ4_K, qs)));
  EXPECT_EQ(split_block(DType::Q4_K).value_bytes(), static_cast<int>(sizeof(BlockQ4_K::qs)));
  EXPECT_EQ(split_block(DType::Q5_K).value_begin, static_cast<int>(offsetof(BlockQ5_K, qh)));
  EXPECT_EQ(split_block(DType::Q5_K).value_bytes(), static_cast<int>(sizeof(BlockQ5_K::qh) + sizeof(BlockQ5_K::qs)));
  EXPECT_EQ(split_block(DType::Q6_K).value_begin, static_cast<int>(offsetof(BlockQ6_K, ql)));
  EXPECT_EQ(split_block(DType::Q6_K).value_end, static_cast<int>(offsetof(BlockQ6_K, scales)));
  EXPECT_EQ(split_block(DType::Q6_K).last_bytes, static_cast<int>(sizeof(BlockQ6_K::d)));
  EXPECT_EQ(split_block(DType::Q6_K).bytes - split_block(DType::Q6_K).last_bytes, static_cast<int>(offsetof(BlockQ6_K, d)));
  for (DType t : kSplitTypes) {
    const SplitBlock b = split_block(t);
    EXPECT_EQ(b.elems, dtype_traits(t).block_elems) << dtype_name(t);
    EXPECT_EQ(b.bytes, dtype_traits(t).block_bytes) << dtype_name(t);
    // What the GPU kernels rely on: every block's values start 16-byte aligned in a split row,
    // and a K-quant block's scale bytes are one aligned 16-byte load.
    EXPECT_EQ(b.value_bytes() % 16, 0) << dtype_name(t);
    if (b.elems == 256) {
      EXPECT_EQ(b.scale_bytes(), 16) << dtype_name(t);
    }
    EXPECT_EQ(b.value_bytes() + b.scale_bytes() + b.last_bytes, b.bytes) << dtype_name(t);
  }
  EXPECT_FALSE(split_block(DType::BF16).valid());
  EXPECT_FALSE(split_block(DType::Q4_1).valid());
}

TEST(SplitBlocks, EachBlocksBytesLandWhereTheLayoutSays) {
  for (DType t : kSplitTypes) {
    const SplitBlock b = split_block(t);
    for (int64_t nb : {1, 3, 7}) {
      const int64_t rows = 5, cols = nb * b.elems;
      const size_t stored_row = static_cast<size_t>(nb) * b.bytes, stride = split_row_bytes(t, cols);
      EXPECT_EQ(stride % 32, 0u) << "rows start at a 32-byte sector";
      EXPECT_LT(stride - stored_row, 32u) << "at most 31 bytes of padding a row";
      const auto stored = random_bytes(rows * stored_row, static_cast<uint32_t>(nb) * 31 + static_cast<int>(t));
      std::vector<uint8_t> split(rows * stride, 0xAB);
      split_rows(t, stored.data(), rows, cols, split.data());
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = split.data() + r * stride;
        for (int64_t k = 0; k < nb; ++k) {
          const uint8_t* blk = stored.data() + r * stored_row + k * b.bytes;
          const uint8_t* values = row + k * b.value_bytes();
          const uint8_t* scales = row + nb * b.value_bytes() + k * b.scale_bytes();
          const uint8_t* last = row + nb * (b.value_bytes() + b.scale_bytes()) + k * b.last_bytes;
          for (int i = 0; i < b.bytes; ++i) {
            const bool is_value = i >= b.value_begin && i < b.value_end, is_last = i >= b.bytes - b.last_bytes;
            const uint8_t got = is_value  ? values[i - b.value_begin]
                                : is_last ? last[i - (b.bytes - b.last_bytes)]
                                          : scales[i < b.value_begin ? i : i - b.value_bytes()];
            ASSERT_EQ(got, blk[i]) << dtype_name(t) << " row " << r << " block " << k << " byte " << i;
          }
        }
        for (size_t i = stored_row; i < stride; ++i) ASSERT_EQ(row[i], 0) << dtype_name(t) << " padding";
      }
      std::vector<uint8_t> back(stored.size(), 0xCD);
      join_rows(t, split.data(), rows, cols, back.data());
      EXPECT_EQ(back, stored) << dtype_name(t) << " nb=" << nb;
    }
  }
}

TEST(SplitBlocks, RefusesTypesWithoutALayoutAndPartialBlocks) {
  std::vector<uint8_t> in(4096), out(4096);
  try {
    split_rows(DType::Q4_1, in.data(), 1, 32, out.data());
    FAIL() << "Q4_1 was split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_1 has no split layout"), std::string::npos) << e.what();
  }
  try {
    split_rows(DType::Q4_K, in.data(), 1, 300, out.data());
    FAIL() << "a partial Q4_K block was split";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("300 elements"), std::string::npos) << e.what();
  }
  EXPECT_THROW(join_rows(DType::F16, in.data(), 1, 32, out.data()), Error);
}

}  // namespace
}  // namespace lfm
