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

// rows: tokens per tile when the whole batch is smaller than 16 (a decode step then loads only
// its own activation rows; only the one-token-tile variant runs, whose B tiles are 5 and 6).
void configure_tiles(int rows) {
  TileConfig c;
  for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = static_cast<uint8_t>(i >= 5 ? 16 : rows);
  _tile_loadconfig(&c);
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
  if (terms == 1) return matmul_panels_t<1>(planes, rows, n, w, p0, p1, y);
  matmul_panels_t<kTerms>(planes, rows, n, w, p0, p1, y);
}

}  // namespace lfm::bf16_pairs

#pragma GCC diagnostic pop
#pragma GCC pop_options
