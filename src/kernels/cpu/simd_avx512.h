// 16-lane float vectors for the AVX-512 kernels (F/BW/VL/DQ/VNNI + FMA + F16C). Included only by
// translation units compiled with those flags (see CMakeLists.txt).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace lfm::simd {

struct Avx512 {
  static constexpr int W = 16;
  using F = __m512;

  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float v) { return _mm512_set1_ps(v); }
  static F loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F round_even(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F pow2(F n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static F keep_nan(F x, F y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x); }
  // A fixed reduction tree (halves, then quarters, ...), the same for every call.
  static float hsum(F v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
  }
  static float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static F from_f16(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  static F from_bf16(const void* p) {
    const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // W 32-bit words holding two bf16 values each (weight_pack.h's paired BF16 chunks): the low
  // halves' values (`even`) or the high halves' (`odd`) as floats, each one in-lane operation.
  static F from_bf16_even(const void* p) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(p), 16)); }
  static F from_bf16_odd(const void* p) {
    const __m512i words = _mm512_loadu_si512(p);
    return _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static void u8x16_to_f32(__m128i v, float* out) { _mm512_storeu_ps(out, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v))); }
  static void i8x16_to_f32(__m128i v, float* out) { _mm512_storeu_ps(out, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v))); }
  static void to_f16(F v, void* p) {
    _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};

}  // namespace lfm::simd
