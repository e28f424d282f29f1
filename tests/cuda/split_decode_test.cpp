// The CUDA kernels' weight decoders (block_decode.cuh's decode8, compiled for the host) against
// the CPU's decoders: every type the CUDA backend reads, rows as prepare_weights uploads them
// (quantized types in the split-block layout), every 8-element unit of rows of awkward widths.
// Runs without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "convert/quant.h"
#include "core/dtype.h"
#include "kernels/dequant.h"
#include "kernels/split_blocks.h"
#include "split_decode_host.h"
#include "test_util.h"

namespace lfm {
namespace {

TEST(CudaDecoders, EveryUnitOfEveryTypeIsTheCpusValue) {
  struct Case {
    DType type;
    std::vector<int64_t> cols;
  };
  const Case cases[] = {
      {DType::F32, {8, 40, 264}},        {DType::F16, {8, 40, 264}},   {DType::BF16, {8, 40, 264}},
      {DType::Q8_0, {32, 96, 288}},      {DType::Q4_0, {32, 96, 288}}, {DType::Q4_K, {256, 768}},
      {DType::Q5_K, {256, 768}},         {DType::Q6_K, {256, 768}},
  };
  for (const Case& c : cases) {
    for (int64_t cols : c.cols) {
      const int64_t rows = 3;
      const size_t stored_row = dtype_row_bytes(c.type, cols);
      const auto f = test::randn(rows * cols, static_cast<uint64_t>(cols) + static_cast<int>(c.type), 0.7f);
      std::vector<uint8_t> stored(rows * stored_row);
      for (int64_t r = 0; r < rows; ++r) quantize_row(c.type, f.data() + r * cols, stored.data() + r * stored_row, cols);
      const size_t dev_row = test::device_row_bytes_on_host(c.type, cols);
      std::vector<uint8_t> device(rows * dev_row + 16);
      const bool split = split_block(c.type).valid();
      if (split) {
        EXPECT_EQ(dev_row, split_row_bytes(c.type, cols));
        split_rows(c.type, stored.data(), rows, cols, device.data());
      } else {
        ASSERT_EQ(dev_row, stored_row);
        std::memcpy(device.data(), stored.data(), stored.size());
      }
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> want(cols);
        dequantize_row(c.type, stored.data() + r * stored_row, want.data(), cols);
        for (int64_t e = 0; e < cols; e += 8) {
          float got[8];
          std::fill(got, got + 8, -1234.5f);
          test::decode8_on_host(c.type, device.data() + r * dev_row, cols, e, got);
          for (int i = 0; i < 8; ++i)
            ASSERT_EQ(got[i], want[e + i]) << dtype_name(c.type) << " cols " << cols << " row " << r << " element "
                                           << e + i;
        }
      }
    }
  }
}

// Every stored code of the 8- and 4-bit block types (the quantizer never writes int8 −128, a file
// may), with scales of both signs: the decoders' integer-to-float step against the CPU's.
TEST(CudaDecoders, EveryCodeOfQ8_0AndQ4_0IsTheCpusValue) {
  for (const DType type : {DType::Q8_0, DType::Q4_0}) {
    const int64_t cols = 256;  // Q8_0: 8 blocks of 32 codes, all 256 int8 values; Q4_0: every nibble in both halves
    const size_t block_bytes = type == DType::Q8_0 ? 34 : 18;
    std::vector<uint8_t> stored(static_cast<size_t>(cols / 32) * block_bytes);
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint8_t* blk = stored.data() + b * block_bytes;
      const uint16_t d = b % 2 ? 0xB400 : 0x3C00;  // f16 −0.25 and 1.0
      std::memcpy(blk, &d, 2);
      for (int i = 0; i < (type == DType::Q8_0 ? 32 : 16); ++i)
        blk[2 + i] = type == DType::Q8_0 ? static_cast<uint8_t>(b * 32 + i)
                                         : static_cast<uint8_t>((i & 15) | (((i + b) & 15) << 4));
    }
    std::vector<uint8_t> device(test::device_row_bytes_on_host(type, cols) + 16);
    split_rows(type, stored.data(), 1, cols, device.data());
    std::vector<float> want(cols);
    dequantize_row(type, stored.data(), want.data(), cols);
    for (int64_t e = 0; e < cols; e += 8) {
      float got[8];
      test::decode8_on_host(type, device.data(), cols, e, got);
      for (int i = 0; i < 8; ++i) ASSERT_EQ(got[i], want[e + i]) << dtype_name(type) << " element " << e + i;
    }
  }
}

}  // namespace
}  // namespace lfm
