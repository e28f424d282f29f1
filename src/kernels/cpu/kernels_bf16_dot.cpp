// The AVX-512 BF16 matmul over kPairs16 panels (bf16_pairs.h), for weights whose act_type is
// BF16: activations rounded to bf16 once, VDPBF16PS adding two columns' products per lane.
// Compiled for AVX-512 BF16 (the pragma below, after all headers); only called when
// dot_available() says the CPU has it.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/bf16_pairs.h"
#include "kernels/cpu_features.h"
#include "kernels/weight_pack.h"

namespace lfm::bf16_pairs {

bool dot_available() {
  const CpuFeatures& f = cpu_features();
  return selected_isa() == Isa::kAvx512 && f.avx512f && f.avx512bw && f.avx512bf16;
}

}  // namespace lfm::bf16_pairs

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

#include <immintrin.h>

namespace lfm::bf16_pairs {
namespace {

// 16 floats → bf16, round to nearest even (as the tile unit's inputs expect) and back.
inline __m256i to_bf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
inline __m512 from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

// Rows of a 16-row panel as one zmm: lane i is row i. A panel's column pair c is the 64 bytes at
// c·64 (weight_pack.h), so one load gives the 16 rows' two weights of that pair.
constexpr int64_t kPairBytes = 64;

// NP panels × NT tokens: acc[p][t] += w(panel p, pair c) · (x[t][2c], x[t][2c+1]) for every
// pair c in order. Each output is one lane of one accumulator that sees the pairs in the same
// order whatever NP and NT are, so every tiling (and the decode GEMV) gives the same bits.
// acts: one token tile of dot_pack_acts' layout (pair c of its token t at pair c · NT + t);
// y [n][M]; rows: valid rows of the last panel (16 but for a partial one).
template <int NP, int NT>
void dot_tile(const uint16_t* acts, int64_t K, const uint8_t* panel, size_t pb, float* y, int64_t M, int64_t row0,
              int last_rows) {
  __m512 acc[NP][NT];
  for (int p = 0; p < NP; ++p)
    for (int t = 0; t < NT; ++t) acc[p][t] = _mm512_setzero_ps();
  const int64_t pairs = K / 2;
  for (int64_t c = 0; c < pairs; ++c) {
    __m512bh w[NP];
    for (int p = 0; p < NP; ++p)
      w[p] = (__m512bh)_mm512_load_si512(panel + static_cast<size_t>(p) * pb + static_cast<size_t>(c) * kPairBytes);
    for (int t = 0; t < NT; ++t) {
      int32_t pair;
      __builtin_memcpy(&pair, acts + 2 * (c * NT + t), 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
      for (int p = 0; p < NP; ++p) acc[p][t] = _mm512_dpbf16_ps(acc[p][t], w[p], xv);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int rows = p == NP - 1 ? last_rows : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << rows) - 1);
    for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * M + row0 + p * 16, m, acc[p][t]);
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, const uint8_t*, size_t, float*, int64_t, int64_t, int);

template <int NP, int... NT>
constexpr TileFn pick(int nt, std::integer_sequence<int, NT...>) {
  TileFn f = nullptr;
  ((f = nt == NT + 1 ? &dot_tile<NP, NT + 1> : f), ...);
  return f;
}

// Token tiles: up to 12 tokens × 2 panels (24 accumulators, 2 weight and 1 broadcast registers).
constexpr int kTileTokens = static_cast<int>(kDotTileTokens);
template <int NP>
TileFn tile_fn(int nt) {
  return pick<NP>(nt, std::make_integer_sequence<int, kTileTokens>{});
}

}  // namespace

void split_acts(const float* x, int64_t n, int64_t K, int terms, uint16_t* planes, int64_t rows) {
  const int64_t plane = rows * K;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 v = _mm512_loadu_ps(x + t * K + k);
      const __m256i h = to_bf16(v);
      if (terms == 1) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(planes + t * K + k), h);
        continue;
      }
      const __m512 r1 = _mm512_sub_ps(v, from_bf16(h));  // exact: h is v's leading bits
      const __m256i m = to_bf16(r1);
      const __m256i l = to_bf16(_mm512_sub_ps(r1, from_bf16(m)));
      uint16_t* o = planes + t * K + k;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), h);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + plane), m);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * plane), l);
    }
}

void dot_pack_acts(const float* x, int64_t n, int64_t K, int64_t t0, int64_t t1, uint16_t* acts) {
  const int64_t pairs = K / 2;
  alignas(32) uint32_t round[8];
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t tile = t / kDotTileTokens, width = std::min(kDotTileTokens, n - tile * kDotTileTokens);
    auto* out = reinterpret_cast<uint32_t*>(acts) + tile * kDotTileTokens * pairs + (t - tile * kDotTileTokens);
    for (int64_t k = 0; k < K; k += 16) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(round), to_bf16(_mm512_loadu_ps(x + t * K + k)));
      for (int64_t i = 0; i < 8; ++i) out[(k / 2 + i) * width] = round[i];
    }
  }
}

void dot_matmul_panels(const uint16_t* acts, int64_t n, const TensorView& w, int64_t p0, int64_t p1, float* y) {
  const int64_t M = w.shape[0], K = w.shape[1];
  LFM_CHECK(w.packed_layout == PackedLayout::kPairs16 && w.packed && fits(K),
            "kernels: the bf16 dot-product matmul needs a packed weight of whole 32-column blocks, got width ", K);
  const size_t pb = pairs16_panel_bytes(K);
  const auto* base = static_cast<const uint8_t*>(w.packed);
  auto rows_of = [&](int64_t p) { return static_cast<int>(std::min<int64_t>(16, M - p * 16)); };
  if (n <= 4) {
    // Decode: four panels' streams at once per token group (latency of the accumulator chains
    // hidden across panels), every weight read once.
    int64_t p = p0;
    for (; p + 4 <= p1; p += 4)
      tile_fn<4>(static_cast<int>(n))(acts, K, base + p * pb, pb, y, M, p * 16, rows_of(p + 3));
    for (; p < p1; ++p) tile_fn<1>(static_cast<int>(n))(acts, K, base + p * pb, pb, y, M, p * 16, rows_of(p));
    return;
  }
  // Prefill: ~512 KiB of panels stay in L2 while every 12-token tile streams over them.
  const int64_t group = std::max<int64_t>(2, static_cast<int64_t>(512 * 1024 / pb) / 2 * 2);
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    for (int64_t t = 0; t < n; t += kTileTokens) {
      const int nt = static_cast<int>(std::min<int64_t>(kTileTokens, n - t));
      const TileFn two = tile_fn<2>(nt), one = tile_fn<1>(nt);
      for (int64_t p = g0; p < g1; p += 2) {
        if (p + 1 < g1) two(acts + t * K, K, base + p * pb, pb, y + t * M, M, p * 16, rows_of(p + 1));
        else one(acts + t * K, K, base + p * pb, pb, y + t * M, M, p * 16, rows_of(p));
      }
    }
  }
}

}  // namespace lfm::bf16_pairs

#pragma GCC diagnostic pop
#pragma GCC pop_options
