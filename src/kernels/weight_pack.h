// Weight packing: a one-time copy of a quantized matrix in the layout the int8 dot-product
// kernels read fastest. Packing changes where bytes sit, never their values (scales stay f16,
// quants keep their bits up to a fixed offset), so a packed matmul sees exactly the stored weights.
//
// PackedLayout::kRows16 (the 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), for rows
//   r = 16p + i (i = lane 0..15) of panel p: the panel's blocks are grouped in pairs (a "unit";
//   an odd last block leaves half a unit unused), and a unit of blocks 2u, 2u+1 holds
//     [block 2u: B bytes][block 2u+1: B bytes][f16 d of 2u: 16 × 2][f16 d of 2u+1: 16 × 2]
//     (Q4_1, Q5_1 then: [f16 m of 2u: 16 × 2][f16 m of 2u+1: 16 × 2])
//   where quant group g (64 bytes) of a block has in lane i (bytes 4i..4i+3) 4 bytes of row i's
//   block:
//     Q4_0, Q4_1 (B = 256, G = 4): the bytes as stored: low nibbles are elements 4g..4g+3, high
//                  nibbles elements 16+4g..16+4g+3 (unsigned 0..15; value = nibble − 8, or d·q + m);
//     Q5_0, Q5_1 (B = 320): the low 4 bits as Q4_0, then a plane of the fifth bits as Q5_K's
//                  below (value = q − 16, or d·q + m);
//     Q8_0 (B = 512, G = 8): each signed quant + 128 as an unsigned byte (value = byte − 128).
//   Rows past the matrix's end are zero. Units are 64-byte aligned (Q4_0 576, Q4_1 640, Q5_0 704,
//   Q5_1 768, Q8_0 1088 bytes: exactly the 32 stored blocks, so a copy costs the matrix's size plus
//   an odd last block's and a short last panel's padding), so a kernel loads every group with one
//   aligned 512-bit load and broadcasts 4 activation bytes against 16 rows at once.
//
// The same layout for the K-quants (Q4_K, Q5_K, Q6_K): the unit is a 256-element super-block,
//   [header 320 bytes][8 blocks of 32 elements, each (256 + H) bytes]
//   header: f16 d[16] | f16 dmin[16] (Q6_K: zero) | per block j: 32 bytes of 16-row scales:
//           Q4_K/Q5_K: u8 scale[16] | u8 min[16] (the 6-bit values of block j),
//           Q6_K: i8 scale[16] of elements 0..15 | i8 scale[16] of elements 16..31;
//   block: the low 4 bits of each unsigned quant q in the Q4_0 arrangement above (256 bytes),
//          then the high bits, lane i byte j (H = 0 for Q4_K):
//           Q5_K (H = 64): bit 2g = q[4g+j] >> 4, bit 2g+1 = q[16+4g+j] >> 4, g = 0..3;
//           Q6_K (H = 128): two 64-byte planes P = 0, 1 for groups g = 2P, 2P+1 with bits 0-1 =
//           q[4g+j] >> 4 and 2-3 = q[16+4g+j] >> 4 for g = 2P, bits 4-5 and 6-7 for g = 2P+1.
//   Values: Q4_K/Q5_K w = d·scale·q − dmin·min; Q6_K w = d·scale·(q − 32). Every size is a
//   multiple of 64 bytes (units of 2368, 2880, 3392).
//
// PackedLayout::kPairs16 (BF16; F16 on AMX), for the AMX tile unit (TDPBF16PS) and VDPBF16PS (kernels/cpu/bf16_pairs.h): panels of 16
//   rows; per column pair c (columns 2c, 2c+1) 64 bytes whose lane i (bytes 4i..4i+3) holds
//   row i's two stored values, column 2c in the low half. An odd last column pairs with zero;
//   rows past the end are zero. The copy costs as much memory as the matrix (whose mapped pages
//   the model then releases). BF16 values keep their stored bits. An F16 value w is stored as a
//   split code (pairs16_f16_code): the AMX kernel splits w into bf16 hi + lo (hi: w cut to 8
//   significant bits, lo = w − hi) for every block it reads, and from the code that takes eight
//   integer operations per 32 values where the f16 bits take thirteen conversions and masks.
//   Code bits: sign (15), m (14..12), E (11..7), F (6..0) with hi = ±2^(E−25)·(1 + F/128) and
//   lo = ±m·2^(E−35) (E = 0: w = ±0). f16 subnormals fit (hi's exponent ≥ −24); |w| ≥ 128, inf
//   and NaN do not: such a matrix is packed in kChunks16 (pack_pairs16_or_chunks16_into).
//
// PackedLayout::kChunks16 (F32, F16, and BF16 where the AMX layout does not apply, on the SIMD
//   backends), panels of 16 rows: the panel's columns in chunks of kChunkCols = 32, and chunk c
//   holds rows 0..15's values of columns 32c..32c+31 one row after another (16 × 32 stored
//   values: 1 KiB for F16/BF16, 2 KiB for F32; BF16 runs pair column j with column j + 16,
//   chunks16_position). A decode GEMV that takes a panel's 16 rows at
//   once then reads one sequential stream instead of 16 (on a Zen 5 EPYC, 2 threads, a copy of
//   the kernel outside the repo: AVX-512 53-61 GB/s against 28-30 for rows read 8 at a time, same
//   minute; AVX2 40-44 against 24-25 for rows read 4 at a time). Values keep their stored bits;
//   rows past the matrix's end and columns past the last whole chunk are zero. Same size as the
//   matrix up to that padding. The copy lives in memory the process allocates and the mapped
//   originals' pages are released (TensorView::row still reads `data`, as stored): read from the
//   mapped file, even rows as stored decoded at only 85-87% of the read ceiling against 98-99%
//   from a copy (F16 LFM2-1.2B tg64 9.8-9.9 -> 11.0-11.1 tok/s, Xeon; the page cache's placement
//   of the file's pages, not the instruction stream, cost the difference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/aligned_buffer.h"
#include "core/tensor.h"
#include "kernels/weight_set.h"

namespace lfm {

// F32, F16 and BF16: matrices the kernels multiply in their stored values (no blocks to decode);
// the kChunks16 layout holds these.
inline bool plain_matrix_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Rows per panel and bytes per unit (two blocks of 16 rows) of the kRows16 layout.
constexpr int64_t kPackRows = 16;
constexpr bool rows16_kquant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }
constexpr bool rows16_block32(DType t) {  // the formats of 32-element blocks with one d (and m) each
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_0;
}
// Q3_K is packed as Q6_K: its values d·(sc − 32)·(q − 4), q in 0..7, are exactly Q6_K's
// d·sc6·(q6 − 32) with sc6 = sc − 32 and q6 = q + 28, so the Q6_K kernels multiply it unchanged
// (its packed copy takes Q6_K's 6.56 bits per weight instead of 3.44).
constexpr DType rows16_kernel_type(DType t) { return t == DType::Q3_K ? DType::Q6_K : t; }
constexpr bool rows16_packable(DType t) { return rows16_block32(t) || rows16_kquant(rows16_kernel_type(t)); }
// The 32-block formats with a fifth bit per quant (Q5_0, Q5_1): their blocks also hold its plane.
constexpr bool rows16_fifth_bits(DType t) { return t == DType::Q5_0 || t == DType::Q5_1; }
// The 32-block formats whose values are d·q + m (Q4_1, Q5_1): their units also hold the m.
constexpr bool rows16_has_mins(DType t) { return t == DType::Q4_1 || t == DType::Q5_1; }
// Quant groups of 64 bytes per block: 8 (Q8_0) or 4 (the rest's low 4 bits).
constexpr int64_t rows16_group_count(DType t) { return t == DType::Q8_0 ? 8 : 4; }
// B: the bytes of one block of 32 elements of 16 rows (K-quants: 256 + H).
constexpr size_t rows16_kblock_bytes(DType t) {
  switch (t) {
    case DType::Q8_0: return 512;
    case DType::Q5_0: case DType::Q5_1: case DType::Q5_K: return 320;
    case DType::Q6_K: return 384;
    default: return 256;  // Q4_0, Q4_1, Q4_K
  }
}
// One unit: two 32-blocks and their d (and m); for the K-quants one super-block.
constexpr size_t rows16_unit_bytes(DType t) {
  if (rows16_kquant(t)) return 320 + 8 * rows16_kblock_bytes(t);
  return 2 * rows16_kblock_bytes(t) + (rows16_has_mins(t) ? 128 : 64);
}
size_t rows16_panel_bytes(DType t, int64_t cols);  // one panel of 16 rows, all its units

// Packs a [rows, cols] matrix of those types (cols whole blocks); throws lfm::Error otherwise.
AlignedBuffer pack_rows16(const TensorView& w);

// One panel of 16 BF16 or F16 rows of `cols` columns in the kPairs16 layout.
size_t pairs16_panel_bytes(int64_t cols);
// The kPairs16 code of an f16 value (bits as stored), or -1 for |w| ≥ 128, inf and NaN.
int32_t pairs16_f16_code(uint16_t f16);
// Packs a [rows, cols] BF16 or F16 matrix; throws lfm::Error for other types or shapes.
AlignedBuffer pack_pairs16(const TensorView& w);
// kChunks16: columns per chunk, and the bytes of one panel of 16 rows of `cols` columns of t.
constexpr int64_t kChunkCols = 32;
size_t chunks16_panel_bytes(DType t, int64_t cols);
// Where column c (0 .. 31) of a chunk sits in a row's run: in order, except BF16, whose runs
// hold columns j and j + 16 side by side (positions 2j and 2j + 1; every chunk, the last one's
// missing columns as zeros). A kernel then widens 16 bf16 values to float32 with one in-lane
// shift or mask of 16 32-bit words (their low or high halves) instead of a zero-extension that
// crosses the register's 128-bit lanes (slow on Zen 4 at 512 bits, and on Intel's shuffle port,
// which its FMAs share). The lanes get the same columns either way: the same bits.
constexpr int64_t chunks16_position(DType t, int64_t c) {
  return t == DType::BF16 ? (c < kChunkCols / 2 ? 2 * c : 2 * (c - kChunkCols / 2) + 1) : c;
}
// pack_rows16, pack_pairs16 or the kChunks16 copy, as `layout` says.
AlignedBuffer pack_weight(PackedLayout layout, const TensorView& w);
// The same in two steps, for callers that place many copies in one buffer: the bytes w's copy
// takes in `layout` (checks w as the packers do; throws lfm::Error), then the copy written to dst
// (that many bytes, 64-byte aligned).
size_t packed_size(PackedLayout layout, const TensorView& w);
void pack_weight_into(PackedLayout layout, const TensorView& w, void* dst);
// pack_weight_into for kPairs16, except that an F16 matrix holding a value without a code
// (pairs16_f16_code) is written in kChunks16 instead, the same number of bytes (kPairs16 takes
// whole 32-column blocks). Returns the layout written.
PackedLayout pack_pairs16_or_chunks16_into(const TensorView& w, void* dst);

// The layout the CPU kernels selected for this process (cpu_features.h, LFM_ISA) read faster
// than the stored one for dtype t, or kNone: kRows16 for the packable types on AVX-512 VNNI and
// AVX2; kPairs16 for BF16 and F16 where the AMX tile unit is usable (kernels/cpu/bf16_pairs.h;
// LFM_AMX_F16=0 keeps F16 in kChunks16); kChunks16 for the other F32/F16/BF16 matrices.
// LFM_PACK=0 in the environment turns packing off.
PackedLayout cpu_packed_layout(DType t);
// Whether this process's kernels read a BF16 matrix multiplying `act` activations
// (TensorView::act_type) in kPairs16 column pairs: on AVX-512 with AMX whatever `act` is, or with
// AVX-512 BF16 (VDPBF16PS) when `act` is BF16. An F16 matrix: with AMX and float32 activations,
// unless LFM_AMX_F16=0. False for other types.
bool pairs16_selected(DType t, DType act);
// The same for one matrix: kPairs16 where pairs16_selected says so for its act_type; falling back
// to kChunks16 (plain types) or kNone where its shape does not suit the layout's kernel
// (kPairs16: whole 32-column blocks).
PackedLayout cpu_packed_layout(const TensorView& w);

}  // namespace lfm

namespace lfm {

// The CPU backends' Backend::prepare_weights (they share one layout choice, cpu_packed_layout):
// every matrix with a faster layout is copied into it, the copies one after another in one buffer
// (large enough to be all huge pages; no copy leaves a partly used page behind), one worker per
// core, each original released as soon as its copy exists so resident memory stays about one
// model's worth. Tables and vectors stay where they are (host memory).
std::unique_ptr<PreparedWeights> prepare_cpu_weights(WeightSet& set);

}  // namespace lfm
