// 8-lane float vectors for the AVX2 + FMA + F16C kernels. Included only by translation units
// compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt); the kernels are written once against
// this small interface (kernels_impl.h) and instantiated per instruction set.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace lfm::simd {

struct Avx2 {
  static constexpr int W = 8;
  using F = __m256;

  static void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float v) { return _mm256_set1_ps(v); }
  static F loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F round_even(F a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // 2^n for integral n in [-126, 127].
  static F pow2(F n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  // y where x is a number, x where x is NaN.
  static F keep_nan(F x, F y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
  static float hsum(F v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
  }
  static float hmax(F v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  // W stored halves / bfloat16 values to float (exact).
  static F from_f16(const void* p) { return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
  static F from_bf16(const void* p) {
    const __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  // See Avx512::from_bf16_even / from_bf16_odd.
  static F from_bf16_even(const void* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)), 16));
  }
  static F from_bf16_odd(const void* p) {
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_loadu_si256(static_cast<const __m256i*>(p)),
                                                _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  // 16 bytes → 16 floats at out (unsigned or signed bytes).
  static void u8x16_to_f32(__m128i v, float* out) {
    _mm256_storeu_ps(out, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)));
    _mm256_storeu_ps(out + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))));
  }
  static void i8x16_to_f32(__m128i v, float* out) {
    _mm256_storeu_ps(out, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)));
    _mm256_storeu_ps(out + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))));
  }
  // Rounds W floats as storing them in f16 / bf16 would, and stores them.
  static void to_f16(F v, void* p) {
    _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
};

}  // namespace lfm::simd
