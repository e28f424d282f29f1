// AVX2 matmul: y[n, out] = x[n, in] · Wᵀ for weights of any stored type.
//
// Work split: each thread owns a contiguous range of output rows (weight rows), so every weight
// byte is read from memory once per call. A thread walks its range in panels of P rows: the
// panel is decoded to float32 once (F32 rows are used in place) into a thread-local buffer sized
// to stay in L2, then every token is multiplied against it in 4-token × 2-row register tiles.
//
// Determinism: each y[i, j] is an 8-lane FMA accumulation over k, a fixed horizontal sum, then a
// scalar tail — the same instruction sequence whichever tile, batch size or thread computes it.
// So a sequence's results never depend on its neighbours in a ragged batch.
#include "kernels/avx2_backend.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/dequant.h"

namespace lfm {

namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 s = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, s);
  return _mm_cvtss_f32(_mm_add_ss(s, sh));
}

// NT token rows × NR weight rows, dot products of length K.
template <int NT, int NR>
inline void dot_tile(const float* const* xs, const float* const* ws, int64_t K, float* out, int64_t out_stride) {
  __m256 acc[NT][NR];
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < NR; ++r) acc[t][r] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = _mm256_loadu_ps(ws[r] + k);
    for (int t = 0; t < NT; ++t) {
      const __m256 xv = _mm256_loadu_ps(xs[t] + k);
      for (int r = 0; r < NR; ++r) acc[t][r] = _mm256_fmadd_ps(xv, wv[r], acc[t][r]);
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < NR; ++r) {
      float s = hsum(acc[t][r]);
      for (int64_t kk = k; kk < K; ++kk) s += xs[t][kk] * ws[r][kk];
      out[t * out_stride + r] = s;
    }
}

template <int NR>
void dot_tokens(const float* x, int64_t n, int64_t K, const float* const* ws, float* y, int64_t out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float* xs[4] = {x + i * K, x + (i + 1) * K, x + (i + 2) * K, x + (i + 3) * K};
    dot_tile<4, NR>(xs, ws, K, y + i * out, out);
  }
  for (; i < n; ++i) {
    const float* xs[1] = {x + i * K};
    dot_tile<1, NR>(xs, ws, K, y + i * out, out);
  }
}

}  // namespace

void Avx2Backend::matmul(const float* x, int64_t n, const TensorView& w, float* y) {
  LFM_CHECK(w.shape.size() == 2, "kernels: matmul weight must be 2-D, got ", shape_str(w.shape));
  LFM_CHECK(dtype_decodable(w.dtype), "kernels: matmul has no path for weight type ", dtype_name(w.dtype));
  const int64_t out = w.shape[0], in = w.shape[1];
  const bool in_place = w.dtype == DType::F32;
  // Panel rows: ~256 KiB of decoded float32 (Zen 3 has 512 KiB L2), even, between 2 and 64.
  const int64_t panel = std::clamp<int64_t>((256 * 1024 / (in * 4)) & ~int64_t{1}, 2, 64);
  pool_.parallel_for(out, 2, [&](int64_t begin, int64_t end) {
    AlignedBuffer buf(in_place ? 0 : static_cast<size_t>(panel * in) * sizeof(float));
    float* dec = static_cast<float*>(buf.data());
    std::vector<const float*> rows(static_cast<size_t>(panel));
    for (int64_t p0 = begin; p0 < end; p0 += panel) {
      const int64_t np = std::min(panel, end - p0);
      for (int64_t r = 0; r < np; ++r) {
        if (in_place) {
          rows[r] = reinterpret_cast<const float*>(w.row(p0 + r));
        } else {
          dequantize_row(w.dtype, w.row(p0 + r), dec + r * in, in);
          rows[r] = dec + r * in;
        }
      }
      int64_t r = 0;
      for (; r + 2 <= np; r += 2) dot_tokens<2>(x, n, in, rows.data() + r, y + p0 + r, out);
      if (r < np) dot_tokens<1>(x, n, in, rows.data() + r, y + p0 + r, out);
    }
  });
}

bool cpu_has_avx2_fma_f16c() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

std::unique_ptr<Backend> make_cpu_backend(ThreadPool& pool) {
  if (cpu_has_avx2_fma_f16c()) return std::make_unique<Avx2Backend>(pool);
  return make_reference_backend(pool);
}

}  // namespace lfm
