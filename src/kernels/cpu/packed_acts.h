// Activations quantized for the packed-weight kernels (simd_packed.inc on AVX-512 VNNI,
// simd_packed_avx2.inc on AVX2): int8 per token in blocks of 32 with a float32 scale each, plus
// what each weight format needs to undo its quant offset or apply its mins exactly. The ISA
// files quantize the values; the bookkeeping of what a block records lives here, once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/dtype.h"

namespace lfm {

struct PackedActs {
  int64_t n = 0, K = 0, blocks = 0;
  AlignedVector<int8_t> q;      // [n][K]          quantized x
  AlignedVector<float> dx;      // [n][blocks]     each block's scale
  AlignedVector<int32_t> off;   // [n][blocks][2]  Q4_0 / Q5_0 / Q8_0: [0] = offset · Σ q of the block;
                              //                 Q6_K: 32 · Σ q of elements 0..15 and of 16..31
  AlignedVector<float> sx;      // [n][blocks]     Q4_1 / Q5_1 / Q4_K / Q5_K: dx · Σ q (for the mins)

  // Sizes the buffers for n tokens of K values against weights of type wt.
  void reset(int64_t n_tokens, int64_t k, DType wt) {
    n = n_tokens;
    K = k;
    blocks = K / 32;
    type_ = wt;
    q.resize(static_cast<size_t>(n * K));
    dx.resize(static_cast<size_t>(n * blocks));
    off.resize(static_cast<size_t>(n * blocks * 2));
    sx.resize(static_cast<size_t>(n * blocks));
  }
  // Records block b of token t: its scale d and the exact sums of its quantized halves.
  void set_block(int64_t t, int64_t b, float d, int32_t s0, int32_t s1) {
    const int64_t ib = t * blocks + b;
    const int32_t o = offset(type_);
    const bool halves = type_ == DType::Q6_K;
    const bool mins = type_ == DType::Q4_1 || type_ == DType::Q5_1 || type_ == DType::Q4_K || type_ == DType::Q5_K;
    dx[ib] = d;
    off[2 * ib] = halves ? o * s0 : o * (s0 + s1);
    off[2 * ib + 1] = halves ? o * s1 : 0;
    sx[ib] = mins ? d * static_cast<float>(s0 + s1) : 0.0f;
  }
  // The weight offset of the format's unsigned quants (value = quant − offset); 0 for the
  // formats with mins (their Σ x goes to sx instead).
  static int32_t offset(DType t) {
    switch (t) {
      case DType::Q4_0: return 8;
      case DType::Q5_0: return 16;
      case DType::Q6_K: return 32;
      case DType::Q8_0: return 128;
      default: return 0;
    }
  }

 private:
  DType type_ = DType::Q4_0;
};

// One 16-row panel of a packed matmul's tile: its bytes, its outputs (token t0's row 16p; the
// next token's ldy further) and how many of its rows exist.
struct PanelOut {
  const uint8_t* panel;
  float* y;
  int valid;
};

}  // namespace lfm
