#include "kernels/split_blocks.h"

#include <cstring>

#include "core/error.h"

namespace lfm {
namespace {

SplitBlock checked_split(DType t, int64_t cols) {
  const SplitBlock b = split_block(t);
  LFM_CHECK(b.valid(), "split_blocks: ", dtype_name(t), " has no split layout");
  LFM_CHECK(cols >= 0 && cols % b.elems == 0, "split_blocks: a ", dtype_name(t), " row of ", cols,
            " elements is not a whole number of ", b.elems, "-element blocks");
  return b;
}

}  // namespace

void split_rows(DType t, const void* stored, int64_t rows, int64_t cols, void* out) {
  const SplitBlock b = checked_split(t, cols);
  const int64_t nb = cols / b.elems;
  const size_t in_row = static_cast<size_t>(nb) * b.bytes, out_row = split_row_bytes(t, cols);
  const int tail = b.bytes - b.value_end - b.last_bytes;  // scale bytes after the values
  for (int64_t r = 0; r < rows; ++r) {
    const auto* src = static_cast<const uint8_t*>(stored) + r * in_row;
    auto* values = static_cast<uint8_t*>(out) + r * out_row;
    uint8_t* scales = values + nb * b.value_bytes();
    uint8_t* lasts = scales + nb * b.scale_bytes();
    for (int64_t k = 0; k < nb; ++k, src += b.bytes) {
      std::memcpy(values + k * b.value_bytes(), src + b.value_begin, b.value_bytes());
      uint8_t* s = scales + k * b.scale_bytes();
      std::memcpy(s, src, b.value_begin);
      std::memcpy(s + b.value_begin, src + b.value_end, tail);
      std::memcpy(lasts + k * b.last_bytes, src + b.bytes - b.last_bytes, b.last_bytes);
    }
    uint8_t* end = lasts + nb * b.last_bytes;
    std::memset(end, 0, static_cast<size_t>(values + out_row - end));
  }
}

void join_rows(DType t, const void* split, int64_t rows, int64_t cols, void* out) {
  const SplitBlock b = checked_split(t, cols);
  const int64_t nb = cols / b.elems;
  const size_t in_row = split_row_bytes(t, cols), out_row = static_cast<size_t>(nb) * b.bytes;
  const int tail = b.bytes - b.value_end - b.last_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    const auto* values = static_cast<const uint8_t*>(split) + r * in_row;
    const uint8_t* scales = values + nb * b.value_bytes();
    const uint8_t* lasts = scales + nb * b.scale_bytes();
    auto* dst = static_cast<uint8_t*>(out) + r * out_row;
    for (int64_t k = 0; k < nb; ++k, dst += b.bytes) {
      const uint8_t* s = scales + k * b.scale_bytes();
      std::memcpy(dst, s, b.value_begin);
      std::memcpy(dst + b.value_begin, values + k * b.value_bytes(), b.value_bytes());
      std::memcpy(dst + b.value_end, s + b.value_begin, tail);
      std::memcpy(dst + b.bytes - b.last_bytes, lasts + k * b.last_bytes, b.last_bytes);
    }
  }
}

}  // namespace lfm
