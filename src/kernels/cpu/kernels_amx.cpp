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

// Tiles: 0-2 accumulators (C: 16 tokens × 16 rows fp32, one per activation term), 3-5 the
// terms' activations (A: 16 tokens × 32 columns bf16), 6-7 weights (B: 16 column pairs × 16 rows
// × 2) for even and odd column blocks. Separate registers for everything in flight: a tile
// register is not renamed, so reloading one waits for the instruction still reading it. Each
// term has its own accumulator (three independent chains even for one token), and every output
// is (Σ h·w + Σ m·w) + Σ l·w whatever the batch.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// rows: tokens per A and C tile (fewer than 16 when the whole batch is smaller: a decode step
// then loads only its own activation rows).
void configure_tiles(int rows) {
  TileConfig c;
  for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = static_cast<uint8_t>(i >= 6 ? 16 : rows);
  _tile_loadconfig(&c);
}

// 16 floats → bf16, round to nearest even (as the tile unit's inputs expect) and back.
inline __m256i to_bf16(__m512 v) { return (__m256i)_mm512_cvtneps_pbh(v); }
inline __m512 from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

constexpr int64_t kOutLd = 16;  // floats per row of the per-term result buffers

constexpr int64_t kPrefetchBlocks = 16;

// Column block kb with weight tile B (6 or 7): C_s += A_s · B for the three terms.
template <int B>
inline void block_step(const uint16_t* a, int64_t plane, size_t lda, const uint8_t* panel, int64_t kb) {
  // A tile load does not wake the hardware prefetcher the way vector loads do: ask for the
  // weights kPrefetchBlocks ahead (decode streams them from memory once).
  for (int line = 0; line < 16; ++line)
    _mm_prefetch(reinterpret_cast<const char*>(panel + (kb + kPrefetchBlocks) * 1024 + line * 64), _MM_HINT_T1);
  _tile_loadd(B, panel + kb * 1024, 64);
  _tile_loadd(3, a + kb * 32, lda);
  _tile_loadd(4, a + plane + kb * 32, lda);
  _tile_loadd(5, a + 2 * plane + kb * 32, lda);
  _tile_dpbf16ps(0, 3, B);
  _tile_dpbf16ps(1, 4, B);
  _tile_dpbf16ps(2, 5, B);
}

// One token tile × one panel: per-term sums into out[term][16 tokens][16 rows].
void tile_block(const uint16_t* a, int64_t plane, int64_t K, const uint8_t* panel, float* out) {
  const size_t lda = static_cast<size_t>(K) * 2;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  const int64_t kblocks = K / 32;
  int64_t kb = 0;
  for (; kb + 2 <= kblocks; kb += 2) {
    block_step<6>(a, plane, lda, panel, kb);
    block_step<7>(a, plane, lda, panel, kb + 1);
  }
  if (kb < kblocks) block_step<6>(a, plane, lda, panel, kb);
  _tile_stored(0, out, kOutLd * sizeof(float));
  _tile_stored(1, out + 16 * kOutLd, kOutLd * sizeof(float));
  _tile_stored(2, out + 32 * kOutLd, kOutLd * sizeof(float));
}

}  // namespace

void split_acts(const float* x, int64_t n, int64_t K, uint16_t* planes, int64_t rows) {
  const int64_t plane = rows * K;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 v = _mm512_loadu_ps(x + t * K + k);
      const __m256i h = to_bf16(v);
      const __m512 r1 = _mm512_sub_ps(v, from_bf16(h));  // exact: h is v's leading bits
      const __m256i m = to_bf16(r1);
      const __m256i l = to_bf16(_mm512_sub_ps(r1, from_bf16(m)));
      uint16_t* o = planes + t * K + k;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), h);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + plane), m);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * plane), l);
    }
}

void matmul_panels(const uint16_t* planes, int64_t rows, int64_t n, const TensorView& w, int64_t p0, int64_t p1, float* y) {
  const int64_t M = w.shape[0], K = w.shape[1];
  LFM_CHECK(w.packed_layout == PackedLayout::kPairs16 && w.packed && fits(K),
            "kernels: the AMX matmul needs a packed weight of whole 32-column blocks, got width ", K);
  const size_t pb = pairs16_panel_bytes(K);
  const int64_t plane = rows * K;
  const auto* base = static_cast<const uint8_t*>(w.packed);
  configure_tiles(static_cast<int>(std::min<int64_t>(16, n)));
  alignas(64) float out[kTerms * 16 * kOutLd];
  // Panels per pass over the activations: ~512 KiB of weights that stay in L2 while every
  // 16-token tile streams over them.
  const int64_t group = std::max<int64_t>(1, 512 * 1024 / static_cast<int64_t>(pb));
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    for (int64_t t = 0; t < n; t += 16) {
      const uint16_t* a = planes + t * K;
      const int64_t nr = std::min<int64_t>(16, n - t);
      for (int64_t p = g0; p < g1; ++p) {
        tile_block(a, plane, K, base + p * pb, out);
        const int64_t cols = std::min<int64_t>(16, M - p * 16);
        const __mmask16 m = static_cast<__mmask16>((1u << cols) - 1);
        for (int64_t r = 0; r < nr; ++r) {
          const float* o = out + r * kOutLd;
          const __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_load_ps(o), _mm512_load_ps(o + 16 * kOutLd)),
                                           _mm512_load_ps(o + 32 * kOutLd));
          _mm512_mask_storeu_ps(y + (t + r) * M + p * 16, m, sum);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace lfm::bf16_pairs

#pragma GCC diagnostic pop
#pragma GCC pop_options
