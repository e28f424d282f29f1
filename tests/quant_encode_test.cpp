// Tests of the ggml block formats' encoders (round-trip error bounds, ggml's rounding) and of the
// reference matmul on quantized weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/backend.h"
#include "kernels/dequant.h"
#include "convert/quant.h"
#include "convert/quant_encode_util.h"
#include "kernels/quant_blocks.h"
#include "quant_test_util.h"

namespace lfm {
namespace {

using namespace quant_test;

// ---------------------------------------------------------------------------------------------
// Encoders

// The encoders' inline rounding agrees with std::nearbyint (round half to even) on ties, on
// random values across the range the K-quant searches use, and clamps what ggml would reject.
TEST(QuantEncode, RoundHalfEvenMatchesNearbyint) {
  for (float v : {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 0.49999997f, 63.5f, -64.5f, 4194302.5f, -4194302.5f, 0.0f, -0.0f})
    EXPECT_EQ(quant::round_half_even(v), static_cast<int>(std::nearbyint(v))) << v;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> small(-300.0f, 300.0f), large(-4194000.0f, 4194000.0f);
  for (int i = 0; i < 200000; ++i) {
    const float v = i % 2 ? small(rng) : large(rng);
    ASSERT_EQ(quant::round_half_even(v), static_cast<int>(std::nearbyint(v))) << v;
  }
  EXPECT_EQ(quant::round_half_even(1e9f), 4194303);
  EXPECT_EQ(quant::round_half_even(-1e9f), -4194303);
  EXPECT_EQ(quant::round_half_even(std::nanf("")), -4194303);
}

constexpr float kF16Eps = 1.0f / 2048.0f;  // relative rounding error of a normal f16: 2^-11

// Encodes x, decodes it, and returns the decoded row.
std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  const auto bytes = encode_misaligned(t, x);
  return decode_misaligned(t, bytes, static_cast<int64_t>(x.size()));
}

// Test rows: N(0,1), a shifted/scaled row (all-positive blocks exercise the mins), and a row with
// outliers. Lengths: 32*7 = 224 (odd number of 32-blocks) for the 32-element types, 256*3 = 768 for all.
std::vector<std::vector<float>> test_rows(int64_t n) {
  std::vector<std::vector<float>> rows = {gaussian(n, 11), gaussian(n, 12, 0.02f, 0.05f), gaussian(n, 13, 3.0f)};
  for (int64_t i = 0; i < n; i += 37) rows[2][i] *= 25.0f;
  return rows;
}

// Per-element bound for the 32-element formats, from each block's extremes.
//   Q8_0: d = amax/127, q = round(x/d): |x - qd| <= d/2; the stored f16 d' has |d - d'| <= d 2^-11 and
//         |q| <= 127, so |err| <= d (1/2 + 127 * 2^-11).
//   Q4_0: d = amax/8 in magnitude; the extreme is exactly -8d, the other side reaches 7d, so
//         elements beyond 7.5d (opposite sign to the extreme) clamp: |err| <= d there, d/2 elsewhere;
//         plus 8 d 2^-11 from the f16 scale. Q5_0 likewise with 16 and 15.
//   Q4_1: d = (max - min)/15, |err| <= d/2 + 15 d 2^-11 (f16 d) + |min| 2^-11 (f16 m). Q5_1 with 31.
// A relative slack of 1e-5 covers float32 rounding in the encoder's arithmetic.
void check_q32_bound(DType t, const std::vector<float>& x, const std::vector<float>& y) {
  for (size_t b0 = 0; b0 < x.size(); b0 += 32) {
    float amax = 0, max = 0, mn = x[b0], mx = x[b0];
    for (size_t i = b0; i < b0 + 32; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        max = x[i];
      }
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
    }
    for (size_t i = b0; i < b0 + 32; ++i) {
      float bound = 0;
      switch (t) {
        case DType::Q8_0: bound = amax / 127 * (0.5f + 127 * kF16Eps); break;
        case DType::Q4_0:
        case DType::Q5_0: {
          const float levels = t == DType::Q4_0 ? 8.0f : 16.0f;
          const float d = amax / levels;
          const bool clamped_side = (x[i] * max < 0) && std::fabs(x[i]) > (levels - 0.5f) * d;
          bound = (clamped_side ? d : 0.5f * d) + levels * d * kF16Eps;
          break;
        }
        case DType::Q4_1:
        case DType::Q5_1: {
          const float levels = t == DType::Q4_1 ? 15.0f : 31.0f;
          const float d = (mx - mn) / levels;
          bound = 0.5f * d + levels * d * kF16Eps + std::fabs(mn) * kF16Eps;
          break;
        }
        default: FAIL();
      }
      ASSERT_LE(std::fabs(y[i] - x[i]), bound * (1 + 1e-5f) + 1e-30f)
          << dtype_name(t) << " element " << i << " x=" << x[i] << " y=" << y[i];
    }
  }
}

TEST(QuantEncode, Q32FormatsWithinDerivedBounds) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t n : {32 * 7, 256 * 3})
      for (const auto& x : test_rows(n)) check_q32_bound(t, x, round_trip(t, x));
}

TEST(QuantEncode, Q8_KWithinHalfStep) {
  // d = amax/127 stored as float32 (no f16 rounding) and q = round(x/d): |err| <= d/2.
  for (const auto& x : test_rows(256 * 3)) {
    const auto y = round_trip(DType::Q8_K, x);
    for (size_t b0 = 0; b0 < x.size(); b0 += 256) {
      float amax = 0;
      for (size_t i = b0; i < b0 + 256; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (size_t i = b0; i < b0 + 256; ++i) ASSERT_LE(std::fabs(y[i] - x[i]), amax / 127 * 0.5f * (1 + 1e-5f)) << i;
    }
  }
}

TEST(QuantEncode, Q8_KBlockSums) {
  const auto x = gaussian(512, 5);
  const auto bytes = encode_misaligned(DType::Q8_K, x);
  for (int blk = 0; blk < 2; ++blk) {
    quant::BlockQ8_K b;
    std::memcpy(&b, bytes.data() + 292 * blk, 292);
    int amax_q = 0;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
      EXPECT_EQ(b.bsums[g], sum) << blk << " " << g;
    }
    for (int j = 0; j < 256; ++j) amax_q = std::max(amax_q, std::abs(static_cast<int>(b.qs[j])));
    EXPECT_EQ(amax_q, 127);  // the extreme element maps to ±127
  }
}

// K-quants: every element must decode to the level nearest to it on the grid its sub-block
// actually stores (Q4_K/Q5_K: d*sc*q - dmin*m, q in 0..nmax; Q6_K: d*sc*(q - 32), q in 0..63),
// i.e. |err| <= step/2 inside the grid's range and = the distance to the end level outside.
// Tolerance 1e-5 relative to the grid's magnitude for float32 arithmetic.
void check_k_nearest_level(DType t, const std::vector<float>& x, const std::vector<float>& y) {
  const auto bytes = encode_misaligned(t, x);
  const size_t bb = static_cast<size_t>(dtype_traits(t).block_bytes);
  for (size_t blk = 0; blk < x.size() / 256; ++blk) {
    const int sub = t == DType::Q6_K ? 16 : 32;
    for (int s = 0; s < 256 / sub; ++s) {
      float step, lo, hi;
      if (t == DType::Q6_K) {
        quant::BlockQ6_K b;
        std::memcpy(&b, bytes.data() + bb * blk, bb);
        step = f16_to_f32(b.d) * b.scales[s];
        lo = std::min(-32 * step, 31 * step);
        hi = std::max(-32 * step, 31 * step);
        step = std::fabs(step);
      } else {
        quant::BlockQ4_K b4;  // Q5_K shares d, dmin and scales at the same offsets
        std::memcpy(&b4, bytes.data() + bb * blk, 16);
        const auto sm = quant::unpack_k_scale(b4.scales, s);
        step = f16_to_f32(b4.d) * sm.scale;
        lo = -f16_to_f32(b4.dmin) * sm.min;
        hi = lo + step * (t == DType::Q4_K ? 15 : 31);
      }
      const float tol = 1e-5f * (std::fabs(lo) + std::fabs(hi)) + 1e-30f;
      for (int l = 0; l < sub; ++l) {
        const size_t i = 256 * blk + static_cast<size_t>(sub * s + l);
        const float outside = std::max({0.0f, lo - x[i], x[i] - hi});
        ASSERT_LE(std::fabs(y[i] - x[i]), std::max(0.5f * step, outside) + tol)
            << dtype_name(t) << " element " << i << " x=" << x[i] << " y=" << y[i] << " step=" << step;
      }
    }
  }
}

TEST(QuantEncode, KQuantsRoundToTheirStoredGrid) {
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (const auto& x : test_rows(256 * 3)) check_k_nearest_level(t, x, round_trip(t, x));
}

// RMS error against the uniform-rounding model: rounding to a grid of step s leaves an RMS error
// of s/sqrt(12). Each format's natural step per block is computed from the data (Q8_0: amax/127,
// Q4_0: amax/8, Q4_1: range/15, Q5_0: amax/16, Q5_1: range/31, Q8_K: amax/127; the K-quants: the
// plain min/max grid of each sub-block, range(min(0,min)..max)/15 or /31 for Q4_K/Q5_K and
// amax/32 for Q6_K; F16/BF16: |x| 2^-11 / 2^-8 relative to each element, whose uniform model
// gives 2^-11/sqrt(3)). The measured RMS must stay within the model (the factor allows for the
// clamped half-step of the symmetric formats, the 6-bit/8-bit scale rounding of the K-quants,
// and sampling noise): a wrong layout, scale or rounding blows well past it. The test also
// prints the RMS relative error, sqrt(Σerr²/Σx²), of each type on N(0,1) data.
TEST(QuantEncode, RmsErrorOnGaussianDataMatchesModel) {
  const int64_t n = 256 * 64;
  const auto x = gaussian(n, 2024);
  double sum_x2 = 0;
  for (float v : x) sum_x2 += static_cast<double>(v) * v;
  const DType types[] = {DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                         DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K};
  for (DType t : types) {
    const auto y = round_trip(t, x);
    double sum_err2 = 0, model = 0;  // model: Σ step²/12 over elements
    const int group = t == DType::Q6_K ? 16 : (t == DType::Q8_K ? 256 : 32);
    for (int64_t g0 = 0; g0 < n; g0 += group) {
      float amax = 0, mn = x[g0], mx = x[g0];
      for (int64_t i = g0; i < g0 + group; ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        mn = std::min(mn, x[i]);
        mx = std::max(mx, x[i]);
      }
      for (int64_t i = g0; i < g0 + group; ++i) {
        double step = 0;
        switch (t) {
          case DType::F16: step = std::fabs(x[i]) * 2 * kF16Eps; break;
          case DType::BF16: step = std::fabs(x[i]) * std::ldexp(1.0, -7); break;
          case DType::Q8_0: case DType::Q8_K: step = amax / 127.0; break;
          case DType::Q4_0: step = amax / 8.0; break;
          case DType::Q5_0: step = amax / 16.0; break;
          case DType::Q4_1: step = (mx - mn) / 15.0; break;
          case DType::Q5_1: step = (mx - mn) / 31.0; break;
          case DType::Q4_K: step = (mx - std::min(0.0f, mn)) / 15.0; break;
          case DType::Q5_K: step = (mx - std::min(0.0f, mn)) / 31.0; break;
          case DType::Q6_K: step = amax / 32.0; break;
          default: FAIL();
        }
        model += step * step / 12.0;
        const double e = static_cast<double>(y[i]) - x[i];
        sum_err2 += e * e;
      }
    }
    const double rms_rel = std::sqrt(sum_err2 / sum_x2), model_rel = std::sqrt(model / sum_x2);
    std::printf("[ quant    ] %-5s RMS relative error %.5f (uniform model %.5f)\n", dtype_name(t), rms_rel, model_rel);
    EXPECT_LE(rms_rel, 1.15 * model_rel) << dtype_name(t);
    EXPECT_GT(rms_rel, 0.0) << dtype_name(t);
  }
}

TEST(QuantEncode, ZeroRowsEncodeToZero) {
  for (DType t : kQuantTypes) {
    const int64_t n = 256 * 2;
    const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
    const auto bytes = encode_misaligned(t, zeros);
    const auto y = decode_misaligned(t, bytes, n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
    // Scales must be exactly zero too (no NaN/inf from dividing by a zero range).
    if (t == DType::Q6_K || t == DType::Q8_K) {
      for (uint8_t byte : bytes) ASSERT_EQ(byte, 0) << dtype_name(t);  // ggml zero-fills these blocks
    }
    if (t == DType::Q4_K || t == DType::Q5_K) {  // d, dmin and the packed scales/mins
      for (size_t blk = 0; blk < 2; ++blk)
        for (size_t k = 0; k < 16; ++k) ASSERT_EQ(bytes[blk * dtype_traits(t).block_bytes + k], 0) << dtype_name(t);
    }
  }
}

TEST(QuantEncode, DeterministicAndAlignmentIndependent) {
  const auto x = gaussian(256 * 3, 99);
  for (DType t : kQuantTypes) {
    const auto a = encode_misaligned(t, x);
    std::vector<uint8_t> b(a.size());
    quantize_row(t, x.data(), b.data(), static_cast<int64_t>(x.size()));  // aligned destination
    EXPECT_EQ(a, b) << dtype_name(t);
  }
}

TEST(QuantEncode, Q4_0MatchesGgmlRoundingByHand) {
  // x[j] = j/2 - 8: the extreme is -8, so d = -8 / -8 = 1 and q = trunc(x + 8.5) = floor((j + 1)/2),
  // ties rounding up; element 31 (7.5) would need q = 16 and clamps to 15.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * static_cast<float>(j) - 8.0f;
  const auto bytes = encode_misaligned(DType::Q4_0, x);
  EXPECT_EQ(bytes[0], 0x00);
  EXPECT_EQ(bytes[1], 0x3C);  // f16 1.0
  EXPECT_EQ(bytes[2], 0x80);  // element 0: q 0; element 16 (0.0): q 8
  EXPECT_EQ(bytes[3], 0x91);  // element 1 (-7.5): q 1; element 17 (0.5): q 9
  EXPECT_EQ(bytes[4], 0x91);  // element 2 (-7.0): trunc(1.5) = 1; element 18 (1.0): trunc(9.5) = 9
  EXPECT_EQ(bytes[17], 0xF8); // element 15 (-0.5): q 8; element 31 (7.5): clamped to 15
}

TEST(QuantEncode, Q8_0ExactGridRoundTripsExactly) {
  // Values k * 0.5 with the extreme 127 * 0.5: d = 0.5 exactly, so decoding reproduces x exactly.
  std::vector<float> x(64);
  for (int j = 0; j < 64; ++j) x[j] = 0.5f * static_cast<float>((j * 29) % 255 - 127);
  x[5] = 63.5f;
  x[40] = -63.5f;
  EXPECT_EQ(round_trip(DType::Q8_0, x), x);
}

TEST(QuantEncode, Q6_KLargestScaleMapsToMinus128) {
  const auto x = gaussian(256, 31);
  const auto bytes = encode_misaligned(DType::Q6_K, x);
  quant::BlockQ6_K b;
  std::memcpy(&b, bytes.data(), sizeof b);
  int extreme = 0;
  for (int s = 0; s < 16; ++s)
    if (std::abs(static_cast<int>(b.scales[s])) > std::abs(extreme)) extreme = b.scales[s];
  EXPECT_EQ(extreme, -128);
}

// ---------------------------------------------------------------------------------------------
// Matmul on quantized weights

TEST(QuantMatmul, QuantizedWeightMatchesItsDequantizedCopy) {
  ThreadPool pool(2);
  auto backend = make_reference_backend(pool);
  const int64_t out = 7, in = 256 * 3, n = 3;
  const auto w = gaussian(static_cast<size_t>(out * in), 3, 0.05f);
  const auto x = gaussian(static_cast<size_t>(n * in), 4);
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    const size_t row_bytes = dtype_row_bytes(t, in);
    std::vector<uint8_t> wq(row_bytes * out);
    std::vector<float> wd(static_cast<size_t>(out * in));
    for (int64_t r = 0; r < out; ++r) {
      quantize_row(t, w.data() + r * in, wq.data() + r * row_bytes, in);
      dequantize_row(t, wq.data() + r * row_bytes, wd.data() + r * in, in);
    }
    const TensorView qv{t, {out, in}, wq.data(), wq.size()};
    const TensorView fv{DType::F32, {out, in}, wd.data(), wd.size() * 4};
    std::vector<float> yq(static_cast<size_t>(n * out)), yf(yq.size());
    backend->matmul(x.data(), n, qv, yq.data());
    backend->matmul(x.data(), n, fv, yf.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double mag = 0;  // Σ|x||w|: scale of float32 summation error
        for (int64_t k = 0; k < in; ++k) mag += std::fabs(x[i * in + k] * wd[j * in + k]);
        EXPECT_NEAR(yq[i * out + j], yf[i * out + j], 1e-6 * mag) << dtype_name(t);
      }
    // And the quantized product stays close to the product with the original weights.
    std::vector<float> y0(yq.size());
    const TensorView ov{DType::F32, {out, in}, w.data(), w.size() * 4};
    backend->matmul(x.data(), n, ov, y0.data());
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < y0.size(); ++i) {
      err2 += (yq[i] - y0[i]) * (yq[i] - y0[i]);
      ref2 += y0[i] * y0[i];
    }
    EXPECT_LT(std::sqrt(err2 / ref2), 0.2) << dtype_name(t);  // Q4 weights: ~8% RMS, so products well under 20%
  }
}

}  // namespace
}  // namespace lfm
