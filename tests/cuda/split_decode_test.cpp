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

}  // namespace
}  // namespace lfm
