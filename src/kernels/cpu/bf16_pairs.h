// Matmul over BF16 (and, on AMX, F16) weights in the kPairs16 layout (kernels/weight_pack.h), two ways:
// - the AMX tile unit (Sapphire Rapids and later): TDPBF16PS multiplies 16 tokens × 32 columns of
//   bf16 activations by 32 columns × 16 rows of bf16 weights into 16 × 16 fp32 sums in one
//   instruction. A B tile is 16 consecutive column pairs of one panel: 1 KiB, contiguous.
// - AVX-512 BF16 (VDPBF16PS; Zen 4/5, Cooper Lake and later), for weights whose act_type is BF16:
//   one instruction adds two columns' products for the 16 rows of a panel, 32 products where an
//   FMA does 16.
//
// Exactness: with float32 activations (act_type F32) each activation is split into three bf16
// terms, x = h + m + l with h = bf16(x), m = bf16(x − h), l = bf16(x − h − m) (each subtraction
// exact in fp32), which keeps 24 significant bits: as many as x has. The weights are exactly bf16
// and every product of two bf16 values is exact in fp32, so y differs from the float32 product
// only by the order of its fp32 additions (the float tolerance of the other kernels), at a third
// of the tile unit's rate. With act_type BF16 the activation is rounded once (h alone): the
// result is the float32 product of bf16(x) and w, at the full rate. Every output's sum runs over
// the columns in order, whatever the tiling or thread split (batch invariance).
//
// F16 weights (AMX only): each value is stored as a code that is split, as its block is read,
// with integer operations into bf16 hi + lo (exact:
// an f16 has 11 significant bits), and each output sums h·hi, m·hi, l·hi and h·lo, m·lo in two
// fp32 sums added at the end (kernels_amx.cpp): float32-exact as for BF16, at five tile products
// per block instead of three. Decode pays the split for every weight it streams.
//
// Compiled in their own translation units (kernels_amx.cpp: AMX and AVX-512 BF16;
// kernels_bf16_dot.cpp: AVX-512 BF16); callers check available() / dot_available() first.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace lfm::bf16_pairs {

// Whether the CPU has AMX-BF16 and AVX-512 BF16 and the OS granted this process the tile state
// (asked once). LFM_AMX=0 in the environment says no.
bool available();
// Whether a BF16 matrix of that width can take this path (whole 32-column blocks).
inline bool fits(int64_t cols) { return cols > 0 && cols % 32 == 0; }

constexpr int kTerms = 3;
// Terms the activations of a matmul over w take: 3 (float32-exact) or 1 (act_type BF16).
inline int terms_for(const TensorView& w) { return w.act_type == DType::BF16 ? 1 : kTerms; }
// Rows of the AMX activation planes for n tokens: whole 16-row tiles.
inline int64_t act_rows(int64_t n) { return (n + 15) / 16 * 16; }
// Activations x [n, K] → planes [terms][rows][K] of bf16 (h, m, l above; h alone for one term)
// for rows t < n; the caller zeroes rows n .. rows. Needs AVX-512 BF16.
void split_acts(const float* x, int64_t n, int64_t K, int terms, uint16_t* planes, int64_t rows);
// AMX: y[t, r] (ldy = M) for tokens t < n and the rows of panels [p0, p1) of w (packed kPairs16;
// BF16, or F16 with three terms).
void matmul_panels(const uint16_t* planes, int terms, int64_t rows, int64_t n, const TensorView& w, int64_t p0,
                   int64_t p1, float* y);

// hi and lo (bf16 bits) of n F16 values stored as kPairs16 codes (weight_pack.h; n a multiple of
// 32), as the AMX kernel splits them. Needs AVX-512 BW; for tests.
void split_f16_codes(const uint16_t* codes, int64_t n, uint16_t* hi, uint16_t* lo);
// codes[i] = pairs16_f16_code(f16[i]) for i < n (weight_pack.h), 32 at a time; false (codes
// partly written) when a value has none. Needs AVX-512 BW.
bool encode_f16_codes(const uint16_t* f16, int64_t n, uint16_t* codes);

// Whether the CPU has AVX-512 F/BW/BF16 (LFM_ISA below avx512 says no).
bool dot_available();
// The VDPBF16PS kernel's activations: x [n, K] rounded to bf16 (nearest even) in token tiles of
// kDotTileTokens (the last one narrower), each tile column-pair-major: pair c of token t (tile
// T = t / kDotTileTokens, width W) at 32-bit pair T · kDotTileTokens · K/2 + c · W + t mod
// kDotTileTokens. A tile's tokens then read one contiguous run per pair; rows K apart (4 or 16 KiB
// for the 1.2B widths) would all share one set of the L1 cache. Writes tokens [t0, t1) of the n;
// acts holds n · K values; K a multiple of 16.
constexpr int64_t kDotTileTokens = 12;
void dot_pack_acts(const float* x, int64_t n, int64_t K, int64_t t0, int64_t t1, uint16_t* acts);
// VDPBF16PS: y[t, r] (ldy = M) for tokens t < n and the rows of panels [p0, p1) of w (packed
// kPairs16), from acts of dot_pack_acts.
void dot_matmul_panels(const uint16_t* acts, int64_t n, const TensorView& w, int64_t p0, int64_t p1, float* y);

}  // namespace lfm::bf16_pairs
