// Weight packing: a one-time copy of a quantized matrix in the layout the int8 dot-product
// kernels read fastest. Packing changes where bytes sit, never their values (scales stay f16,
// quants keep their bits up to a fixed offset), so a packed matmul sees exactly the stored weights.
//
// PackedLayout::kRows16 (Q4_0 and Q8_0), for rows r = 16p + i (i = lane 0..15) of panel p:
//   the panel's blocks are grouped in pairs (a "unit"; an odd last block leaves half a unit
//   unused), and a unit of blocks 2u, 2u+1 holds
//     [quants of block 2u: G × 64 bytes][quants of block 2u+1: G × 64 bytes][f16 scales 2u: 16 × 2][f16 scales 2u+1: 16 × 2]
//   where quant group g (64 bytes) has in lane i (bytes 4i..4i+3) the 4 stored bytes qs[4g..4g+3]
//   of row i's block:
//     Q4_0, G = 4: the bytes as stored: low nibbles are elements 4g..4g+3, high nibbles
//                  elements 16+4g..16+4g+3 (unsigned 0..15, value = nibble - 8);
//     Q8_0, G = 8: each signed quant + 128 as an unsigned byte (value = byte - 128).
//   Rows past the matrix's end are zero. Units are 64-byte aligned (576 / 1088 bytes), so a
//   kernel loads every group with one aligned 512-bit load and broadcasts 4 activation bytes
//   against 16 rows at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/aligned_buffer.h"
#include "core/tensor.h"

namespace lfm {

// Rows per panel and bytes per unit (two blocks of 16 rows) of the kRows16 layout.
constexpr int64_t kPackRows = 16;
bool rows16_packable(DType t);                 // Q4_0, Q8_0
int64_t rows16_group_count(DType t);           // G: 4 (Q4_0) or 8 (Q8_0)
size_t rows16_unit_bytes(DType t);             // 2 · G · 64 + 64
size_t rows16_panel_bytes(DType t, int64_t cols);  // one panel of 16 rows, all its units

// Packs a [rows, cols] Q4_0 / Q8_0 matrix (cols a multiple of 32); throws lfm::Error otherwise.
AlignedBuffer pack_rows16(const TensorView& w);

// The layout the CPU kernels selected for this process (cpu_features.h, LFM_ISA) read faster
// than the stored one for dtype t, or kNone. LFM_PACK=0 in the environment turns packing off.
PackedLayout cpu_packed_layout(DType t);

}  // namespace lfm
