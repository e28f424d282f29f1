// The split-block row layout: how the CUDA backend keeps quantized matrices on the device.
//
// A GGUF block mixes its scales with its quantized values (Q4_0: a 2-byte scale then 16 bytes of
// nibbles, 18 bytes a block), so a block's values are rarely 16-byte aligned and a GPU lane cannot
// load them in one instruction. In the split layout each row keeps its blocks' value bytes
// together, their scale bytes after them and (Q6_K only) their last bytes after those:
//
//   row r:  [ values of block 0 | ... ][ scales of block 0 | ... ][ last of block 0 | ... ][ 0-pad to 32 ]
//
// Every block's values then start at a multiple of 16 bytes (they are 16, 32, 128, 160 or 192
// bytes long), rows start at a 32-byte sector (split_row_bytes apart), and the K-quants' scale
// bytes are 16 a block, 16-byte aligned: a lane reads them in one load, and a warp's loads of a
// block's values touch whole sectors. A block's bytes keep their stored order within each part:
// [value_begin, value_end) are the values, the block's last `last_bytes` bytes go to the third
// part, and the rest, before and after the values, are the scales. Q6_K (ql, qh | scales[16], d)
// keeps its int8 sub-scales as scales and d as its last 2 bytes (18 scale bytes would leave a
// block's sub-scales unaligned). Nothing is converted, so decoding gives the stored format's
// numbers bit for bit.
//
// C++17 and host/device: the CUDA kernels read the same constants.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

#ifdef __CUDACC__
#define LFM_HOST_DEVICE __host__ __device__
#else
#define LFM_HOST_DEVICE
#endif

namespace lfm {

struct SplitBlock {
  int elems = 0;        // elements per block
  int bytes = 0;        // stored bytes per block
  int value_begin = 0;  // the block's value bytes: [value_begin, value_end) of the stored block
  int value_end = 0;
  int last_bytes = 0;   // the block's last stored bytes, kept in the row's third part
  LFM_HOST_DEVICE constexpr int value_bytes() const { return value_end - value_begin; }
  LFM_HOST_DEVICE constexpr int scale_bytes() const { return bytes - value_bytes() - last_bytes; }
  LFM_HOST_DEVICE constexpr bool valid() const { return elems > 0; }
};

// The split of each type that has one (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K); an invalid one otherwise.
LFM_HOST_DEVICE constexpr SplitBlock split_block(DType t) {
  switch (t) {
    case DType::Q8_0: return {32, 34, 2, 34};     // d | qs[32]
    case DType::Q4_0: return {32, 18, 2, 18};     // d | qs[16]
    case DType::Q4_K: return {256, 144, 16, 144}; // d, dmin, scales[12] | qs[128]
    case DType::Q5_K: return {256, 176, 16, 176}; // d, dmin, scales[12] | qh[32], qs[128]
    case DType::Q6_K: return {256, 210, 0, 192, 2};  // ql[128], qh[64] | scales[16] | d
    default: return {};
  }
}

// Bytes from one row's start to the next in the split layout (cols a multiple of the block): a
// multiple of 32, so that every row starts at a 32-byte sector.
LFM_HOST_DEVICE constexpr size_t split_row_bytes(DType t, int64_t cols) {
  const SplitBlock b = split_block(t);
  const size_t raw = static_cast<size_t>(cols / b.elems) * static_cast<size_t>(b.bytes);
  return (raw + 31) / 32 * 32;
}

// Stored rows → split rows, and back. `out` holds rows * split_row_bytes (join: rows *
// dtype_row_bytes). Throws when the type has no split layout or cols is not a whole number of blocks.
void split_rows(DType t, const void* stored, int64_t rows, int64_t cols, void* out);
void join_rows(DType t, const void* split, int64_t rows, int64_t cols, void* out);

}  // namespace lfm
