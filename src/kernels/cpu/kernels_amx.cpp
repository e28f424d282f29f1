// The AMX-BF16 matmul (bf16_pairs.h). Compiled for the tile instructions and AVX-512 BF16 (the
// pragma below, after all headers); only called when available() says the CPU has them and the
// kernel granted this process the tile state.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/bf16_pairs.h"
#include "kernels/cpu_features.h"
#include "kernels/weight_pack.h"

namespace lfm::bf16_pairs {

bool available() {
  static const bool ok = [] {
#if defined(__x86_64__) && defined(SYS_arch_prctl)
    const char* env = std::getenv("LFM_AMX");
    if (env && std::string(env) == "0") return false;
    const CpuFeatures& f = cpu_features();
    if (!f.avx512f || !f.avx512bw || !f.avx512bf16) return false;
    if (!__builtin_cpu_supports("amx-bf16") || !__builtin_cpu_supports("amx-tile")) return false;
    // Linux hands out the 8 KiB tile data state only on request (ARCH_REQ_XCOMP_PERM for
    // XFEATURE_XTILEDATA); without it the first tile instruction faults.
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

}  // namespace lfm::bf16_pairs

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16")

#include <immintrin.h>

namespace lfm::bf16_pairs {
namespace {

// Every output accumulates, per 32-column block in order, h·w then m·w then l·w (h·w alone with
// one term) into one fp32 sum: the same arithmetic for every tiling below, so results never
// depend on the batch.
//
// Tile registers are not renamed (reloading one waits for the instruction still reading it),
// so each variant keeps everything in flight in its own registers:
//   one token tile (any batch of at most 16 tokens, e.g. decode) × NP panels:
//     C 0..NP-1, the terms' A 2, 3, 4, B 5, 6 — T + NP loads per T·NP products;
//   two token tiles × NP panels: C 0..2·NP-1 (C[m·NP + p]), A 4, 5 (token tiles, reloaded per
//     term), B 6, 7 — each B serves two token tiles, each A NP panels.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// ldtilecfg of the whole 64-byte configuration. GCC 12's _tile_loadconfig names only the first
// 8 bytes as the instruction's memory operand, so the compiler may drop stores to the rest of the
// object as dead: a configuration built differently from configure_tiles' lost its colsb that
// way (#GP on ldtilecfg).
inline void load_tile_config(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c)); }

// rows: tokens per tile when the whole batch is smaller than 16 (a decode step then loads only
// its own activation rows; only the one-token-tile variant runs, whose B tiles are 5 and 6).
void configure_tiles(int rows) {
  TileConfig c;
  for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = static_cast<uint8_t>(i >= 5 ? 16 : rows);
  load_tile_config(c);
}

constexpr int64_t kPrefetchBlocks = 2;  // 2 KiB ahead: 1.2B BF16 tg 11.1 (16), 11.6 (8), 13.3 (2) tok/s

// A tile load does not wake the hardware prefetcher the way vector loads do: ask for the weights
// kPrefetchBlocks ahead (decode streams them from memory once).
inline void prefetch_block(const uint8_t* p) {
  for (int line = 0; line < 16; ++line) _mm_prefetch(reinterpret_cast<const char*>(p + line * 64), _MM_HINT_T1);
}

// One token tile × NP panels → out [16 tokens][NP·16 rows] (ld NP·16); T activation terms.
template <int NP, int T>
void one_tile(const uint16_t* a, int64_t plane, int64_t K, const uint8_t* panel, size_t pb, float* out) {
  const size_t lda = static_cast<size_t>(K) * 2;
  _tile_zero(0);
  if constexpr (NP == 2) _tile_zero(1);
  for (int64_t kb = 0; kb < K / 32; ++kb) {
    const uint8_t* b0 = panel + kb * 1024;
    prefetch_block(b0 + kPrefetchBlocks * 1024);
    _tile_loadd(2, a + kb * 32, lda);
    if constexpr (T == 3) {
      _tile_loadd(3, a + plane + kb * 32, lda);
      _tile_loadd(4, a + 2 * plane + kb * 32, lda);
    }
    _tile_loadd(5, b0, 64);
    if constexpr (NP == 2) {
      prefetch_block(b0 + pb + kPrefetchBlocks * 1024);
      _tile_loadd(6, b0 + pb, 64);
      _tile_dpbf16ps(0, 2, 5);
      _tile_dpbf16ps(1, 2, 6);
      if constexpr (T == 3) {
        _tile_dpbf16ps(0, 3, 5);
        _tile_dpbf16ps(1, 3, 6);
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
      }
    } else {
      _tile_dpbf16ps(0, 2, 5);
      if constexpr (T == 3) {
        _tile_dpbf16ps(0, 3, 5);
        _tile_dpbf16ps(0, 4, 5);
      }
    }
  }
  constexpr size_t ldo = NP * 16 * sizeof(float);
  _tile_stored(0, out, ldo);
  if constexpr (NP == 2) _tile_stored(1, out + 16, ldo);
}

// Two token tiles × NP panels → out [32 tokens][NP·16 rows] (ld NP·16); T activation terms.
template <int NP, int T>
void two_tiles(const uint16_t* a, int64_t plane, int64_t K, const uint8_t* panel, size_t pb, float* out) {
  const size_t lda = static_cast<size_t>(K) * 2;
  const int64_t second = 16 * K;  // the second token tile's first row
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (NP == 2) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t kb = 0; kb < K / 32; ++kb) {
    const uint8_t* b0 = panel + kb * 1024;
    _tile_loadd(6, b0, 64);
    if constexpr (NP == 2) _tile_loadd(7, b0 + pb, 64);
    for (int s = 0; s < T; ++s) {
      const uint16_t* as = a + s * plane + kb * 32;
      _tile_loadd(4, as, lda);
      _tile_loadd(5, as + second, lda);
      if constexpr (NP == 2) {  // C[m·2 + p]
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      } else {  // C[m]
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 5, 6);
      }
    }
  }
  constexpr size_t ldo = NP * 16 * sizeof(float);
  if constexpr (NP == 2) {
    _tile_stored(0, out, ldo);
    _tile_stored(1, out + 16, ldo);
    _tile_stored(2, out + 16 * 32, ldo);
    _tile_stored(3, out + 16 * 32 + 16, ldo);
  } else {
    _tile_stored(0, out, ldo);
    _tile_stored(1, out + 16 * 16, ldo);
  }
}

// F16 weights (kPairs16 holding split codes, weight_pack.h). Each value w is split into two bf16
// values, hi = w with its significand cut to bf16's 8 bits and lo = w − hi (at most 3 significant
// bits), both exact in bf16, so hi + lo = w exactly (f16 subnormals are normal numbers in bf16). The
// activations take three terms as for BF16. Each output keeps two fp32 sums over the 32-column
// blocks in order: S_hi adds h·hi, m·hi, l·hi and S_lo adds h·lo, m·lo per block (l·lo, below
// 2⁻²³ of the product, is left out); y = S_hi + S_lo. That is the float32 product of x and w up
// to the order of its additions, as for BF16 weights, and the same for every tiling and batch.
// (Two sums, in two tile registers, also keep two accumulations in flight in a decode step.)
//
// 32 codes (sign 15, m 14..12, E 11..7, F 6..0) → their hi and lo as bf16 bits. hi: the code
// without m, E moved up to bf16's exponent by adding 102 (E − 25 + 127) where E ≠ 0 (E = 0 is ±0).
// lo = ±m·2^(E−35): the bf16 bits of ±m (a table on sign and m, less 35 in the exponent field)
// plus E in that field, zero where m = 0.
inline void split_f16_codes32(const void* src, uint16_t* hi, uint16_t* lo) {
  const __m512i code = _mm512_load_si512(src);
  const __m512i e_field = _mm512_set1_epi16(0x0F80);
  const __mmask32 nonzero = _mm512_test_epi16_mask(code, e_field);
  const __m512i h = _mm512_and_si512(code, _mm512_set1_epi16(static_cast<short>(0x8FFF)));
  _mm512_store_si512(hi, _mm512_mask_add_epi16(h, nonzero, h, _mm512_set1_epi16(102 << 7)));
  // ±m as bf16 bits less 35 in the exponent, indexed by sign·8 + m (entries 0 and 8 unused).
  const __m512i table = _mm512_set_epi16(  // entry 31 first; 16..31 repeat 0..15
      -0x50A0, -0x50C0, -0x50E0, -0x5100, -0x5140, -0x5180, -0x5200, 0x0, 0x2F60, 0x2F40, 0x2F20, 0x2F00, 0x2EC0,
      0x2E80, 0x2E00, 0x0, -0x50A0, -0x50C0, -0x50E0, -0x5100, -0x5140, -0x5180, -0x5200, 0x0, 0x2F60, 0x2F40, 0x2F20,
      0x2F00, 0x2EC0, 0x2E80, 0x2E00, 0x0);
  const __mmask32 has_lo = _mm512_test_epi16_mask(code, _mm512_set1_epi16(0x7000));
  const __m512i m = _mm512_permutexvar_epi16(_mm512_srli_epi16(code, 12), table);
  _mm512_store_si512(lo, _mm512_maskz_add_epi16(has_lo, m, _mm512_and_si512(code, e_field)));
}

// One block (16 column pairs × 16 rows, 1 KiB of codes) → its hi and lo blocks (1 KiB of bf16
// each, same placement).
inline void split_f16_block(const uint8_t* src, uint16_t* hi, uint16_t* lo) {
  for (int v = 0; v < 16; ++v) split_f16_codes32(src + v * 64, hi + v * 32, lo + v * 32);
}

}  // namespace

void split_f16_codes(const uint16_t* codes, int64_t n, uint16_t* hi, uint16_t* lo) {
  LFM_CHECK(n % 32 == 0, "kernels: F16 codes are split 32 at a time, not ", n);
  alignas(64) uint16_t c[32], h[32], l[32];
  for (int64_t i = 0; i < n; i += 32) {
    std::memcpy(c, codes + i, sizeof c);
    split_f16_codes32(c, h, l);
    std::memcpy(hi + i, h, sizeof h);
    std::memcpy(lo + i, l, sizeof l);
  }
}

bool encode_f16_codes(const uint16_t* f16, int64_t n, uint16_t* codes) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i h = _mm512_loadu_si512(f16 + i);
    const __m512i a = _mm512_and_si512(h, _mm512_set1_epi16(0x7FFF));
    if (_mm512_cmpge_epu16_mask(a, _mm512_set1_epi16(0x5800))) return false;  // |w| ≥ 128, inf, NaN
    // Normal values: sign | m << 12 | (E5 + 10) << 7 | F, as pairs16_f16_code.
    const __m512i code = _mm512_or_si512(
        _mm512_or_si512(_mm512_and_si512(h, _mm512_set1_epi16(static_cast<short>(0x8000))),
                        _mm512_slli_epi16(_mm512_and_si512(a, _mm512_set1_epi16(7)), 12)),
        _mm512_add_epi16(_mm512_srli_epi16(a, 3), _mm512_set1_epi16(10 << 7)));
    _mm512_storeu_si512(codes + i, code);
    // Zeros and subnormals (rare in weights) one at a time.
    for (__mmask32 small = _mm512_cmplt_epu16_mask(a, _mm512_set1_epi16(0x0400)); small; small &= small - 1) {
      const int64_t j = i + __builtin_ctz(small);
      codes[j] = static_cast<uint16_t>(pairs16_f16_code(f16[j]));
    }
  }
  for (; i < n; ++i) {
    const int32_t code = pairs16_f16_code(f16[i]);
    if (code < 0) return false;
    codes[i] = static_cast<uint16_t>(code);
  }
  return true;
}

namespace {

// Split blocks of a panel: block kb's hi at kb·2 KiB, its lo 1 KiB after.
constexpr int64_t kSplitBlockBytes = 2048;

// Block kb of an F16 panel split into dst (2 KiB), asking for the block kPrefetchBlocks ahead.
inline void split_panel_block(const uint8_t* panel, int64_t kb, uint8_t* dst) {
  prefetch_block(panel + (kb + kPrefetchBlocks) * 1024);
  split_f16_block(panel + kb * 1024, reinterpret_cast<uint16_t*>(dst), reinterpret_cast<uint16_t*>(dst + 1024));
}

// One block's five products for one token tile: C 0 (S_hi), C 1 (S_lo), the terms' A 2, 3, 4,
// B 5 (hi), 6 (lo).
inline void one_tile_f16_block(const uint16_t* a, int64_t plane, size_t lda, const uint8_t* b) {
  _tile_loadd(2, a, lda);
  _tile_loadd(3, a + plane, lda);
  _tile_loadd(4, a + 2 * plane, lda);
  _tile_loadd(5, b, 64);
  _tile_loadd(6, b + 1024, 64);
  _tile_dpbf16ps(0, 2, 5);
  _tile_dpbf16ps(1, 2, 6);
  _tile_dpbf16ps(0, 3, 5);
  _tile_dpbf16ps(1, 3, 6);
  _tile_dpbf16ps(0, 4, 5);
}

// One token tile × one F16 panel → out: S_hi [16 tokens][16 rows], then S_lo likewise. `split`
// holds the panel's blocks already split; with `panel` instead (split null) each block is split
// as it streams in from memory (a decode step reads the weights once), kSplitAhead blocks before
// its tile loads, into a ring of buffers: a tile load of bytes still in the store buffer waits
// for them to reach the cache.
constexpr int64_t kSplitAhead = 2, kSplitRing = 4;
void one_tile_f16(const uint16_t* a, int64_t plane, int64_t K, const uint8_t* split, const uint8_t* panel, float* out) {
  const size_t lda = static_cast<size_t>(K) * 2;
  const int64_t blocks = K / 32;
  alignas(64) uint8_t ring[kSplitRing][kSplitBlockBytes];
  if (!split)
    for (int64_t kb = 0; kb < std::min(kSplitAhead, blocks); ++kb) split_panel_block(panel, kb, ring[kb % kSplitRing]);
  _tile_zero(0);
  _tile_zero(1);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const uint8_t* b;
    if (split) {
      b = split + kb * kSplitBlockBytes;
    } else {
      const int64_t next = kb + kSplitAhead;
      if (next < blocks) split_panel_block(panel, next, ring[next % kSplitRing]);
      b = ring[kb % kSplitRing];
    }
    one_tile_f16_block(a + kb * 32, plane, lda, b);
  }
  _tile_stored(0, out, 16 * sizeof(float));
  _tile_stored(1, out + 16 * 16, 16 * sizeof(float));
}

// Two token tiles × one F16 panel (blocks already split) → out: S_hi [32 tokens][16 rows], then
// S_lo. C 0, 1 (S_hi of token tiles 0, 1), 2, 3 (their S_lo), A 4, 5, B 6 (hi), 7 (lo).
void two_tiles_f16(const uint16_t* a, int64_t plane, int64_t K, const uint8_t* split, float* out) {
  const size_t lda = static_cast<size_t>(K) * 2;
  const int64_t second = 16 * K;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kb = 0; kb < K / 32; ++kb) {
    const uint8_t* b = split + kb * kSplitBlockBytes;
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b + 1024, 64);
    for (int s = 0; s < kTerms; ++s) {
      const uint16_t* as = a + s * plane + kb * 32;
      _tile_loadd(4, as, lda);
      _tile_loadd(5, as + second, lda);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 5, 6);
      if (s < 2) {
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  _tile_stored(0, out, 16 * sizeof(float));
  _tile_stored(1, out + 16 * 16, 16 * sizeof(float));
  _tile_stored(2, out + 32 * 16, 16 * sizeof(float));
  _tile_stored(3, out + 48 * 16, 16 * sizeof(float));
}

// y rows t0 .. t0 + nr of panel p: S_hi + S_lo from out (tokens' sums of 16 rows, S_lo `lo`
// floats after S_hi).
inline void store_f16_sums(const float* out, int64_t lo, int64_t nr, int64_t p, int64_t M, int64_t t0, float* y) {
  const int64_t cols = std::min<int64_t>(16, M - p * 16);
  const __mmask16 m = static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t r = 0; r < nr; ++r) {
    const __m512 v = _mm512_add_ps(_mm512_load_ps(out + r * 16), _mm512_load_ps(out + lo + r * 16));
    _mm512_mask_storeu_ps(y + (t0 + r) * M + p * 16, m, v);
  }
}

void matmul_panels_f16(const uint16_t* planes, int64_t rows, int64_t n, const TensorView& w, int64_t p0, int64_t p1,
                       float* y) {
  const int64_t M = w.shape[0], K = w.shape[1];
  const size_t pb = pairs16_panel_bytes(K);
  const int64_t plane = rows * K;
  const auto* base = static_cast<const uint8_t*>(w.packed);
  configure_tiles(static_cast<int>(std::min<int64_t>(16, n)));
  alignas(64) float out[64 * 16];
  if (n <= 16) {  // one token tile: every block used once, split as it streams in
    for (int64_t p = p0; p < p1; ++p) {
      one_tile_f16(planes, plane, K, nullptr, base + p * pb, out);
      store_f16_sums(out, 16 * 16, n, p, M, 0, y);
    }
    return _tile_release();
  }
  // Panels per pass: ~256 KiB of f16 weights, split once into twice that (stays in L2 while
  // every 32-token block streams over it).
  const int64_t group = std::max<int64_t>(1, 256 * 1024 / static_cast<int64_t>(pb));
  thread_local AlignedVector<uint8_t> split;
  split.resize(static_cast<size_t>(group) * (K / 32) * kSplitBlockBytes);
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    for (int64_t p = g0; p < g1; ++p) {
      const uint8_t* src = base + p * pb;
      uint8_t* dst = split.data() + (p - g0) * (K / 32) * kSplitBlockBytes;
      for (int64_t kb = 0; kb < K / 32; ++kb) split_panel_block(src, kb, dst + kb * kSplitBlockBytes);
    }
    for (int64_t t = 0; t < n; t += 32) {
      const bool two = n - t > 16;
      const uint16_t* a = planes + t * K;
      for (int64_t p = g0; p < g1; ++p) {
        const uint8_t* s = split.data() + (p - g0) * (K / 32) * kSplitBlockBytes;
        if (two) two_tiles_f16(a, plane, K, s, out);
        else one_tile_f16(a, plane, K, s, nullptr, out);
        store_f16_sums(out, two ? 32 * 16 : 16 * 16, std::min<int64_t>(32, n - t), p, M, t, y);
      }
    }
  }
  _tile_release();
}

template <int T>
void matmul_panels_t(const uint16_t* planes, int64_t rows, int64_t n, const TensorView& w, int64_t p0, int64_t p1,
                     float* y) {
  const int64_t M = w.shape[0], K = w.shape[1];
  LFM_CHECK(w.packed_layout == PackedLayout::kPairs16 && w.packed && fits(K),
            "kernels: the AMX matmul needs a packed weight of whole 32-column blocks, got width ", K);
  const size_t pb = pairs16_panel_bytes(K);
  const int64_t plane = rows * K;
  const auto* base = static_cast<const uint8_t*>(w.packed);
  configure_tiles(static_cast<int>(std::min<int64_t>(16, n)));
  alignas(64) float out[32 * 32];
  // Panels per pass over the activations: ~512 KiB of weights that stay in L2 while every
  // 32-token block streams over them.
  const int64_t group = std::max<int64_t>(2, (512 * 1024 / static_cast<int64_t>(pb)) / 2 * 2);
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    for (int64_t t = 0; t < n; t += 32) {
      const bool two = n - t > 16;
      const uint16_t* a = planes + t * K;
      for (int64_t p = g0; p < g1; p += 2) {
        const int np = p + 1 < g1 ? 2 : 1;
        const uint8_t* panel = base + p * pb;
        if (two && np == 2) two_tiles<2, T>(a, plane, K, panel, pb, out);
        else if (two) two_tiles<1, T>(a, plane, K, panel, pb, out);
        else if (np == 2) one_tile<2, T>(a, plane, K, panel, pb, out);
        else one_tile<1, T>(a, plane, K, panel, pb, out);
        const int64_t nr = std::min<int64_t>(32, n - t), cols = std::min<int64_t>(np * 16, M - p * 16);
        for (int64_t r = 0; r < nr; ++r)
          std::memcpy(y + (t + r) * M + p * 16, out + r * np * 16, static_cast<size_t>(cols) * sizeof(float));
      }
    }
  }
  _tile_release();
}

}  // namespace

void matmul_panels(const uint16_t* planes, int terms, int64_t rows, int64_t n, const TensorView& w, int64_t p0,
                   int64_t p1, float* y) {
  LFM_CHECK(terms == 1 || terms == kTerms, "kernels: the AMX matmul takes 1 or ", kTerms, " terms, got ", terms);
  if (w.dtype == DType::F16) {
    LFM_CHECK(terms == kTerms && w.packed_layout == PackedLayout::kPairs16 && w.packed && fits(w.shape[1]),
              "kernels: the AMX F16 matmul needs float32 activations and a packed weight of whole 32-column "
              "blocks, got width ", w.shape[1]);
    return matmul_panels_f16(planes, rows, n, w, p0, p1, y);
  }
  if (terms == 1) return matmul_panels_t<1>(planes, rows, n, w, p0, p1, y);
  matmul_panels_t<kTerms>(planes, rows, n, w, p0, p1, y);
}

}  // namespace lfm::bf16_pairs

#pragma GCC diagnostic pop
#pragma GCC pop_options
