// Encoders for the K-quants (Q3_K, Q4_K, Q5_K, Q6_K, Q8_K), following the semantics of ggml's
// reference quantizers without importance matrices (quantize_row_q{3,4,5,6,8}_K_ref), so that our
// files match what `llama-quantize` produces without --imatrix:
//   * Q4_K/Q5_K: each 32-element sub-block gets an affine fit x ≈ scale * q - min from a small
//     grid search over the inverse scale with a weighted least-squares refit (search_affine_fit,
//     ggml's make_qkx2_quants); the 8 scales and 8 mins are then quantized to 6 bits against the
//     super-block's f16 d and dmin, and every element is re-quantized against the scale/min the
//     decoder will actually see.
//   * Q6_K: each 16-element sub-block gets a symmetric fit x ≈ scale * q (search_symmetric_fit,
//     ggml's make_qx_quants with x² weights); scales are quantized to int8 against an f16 d, and
//     elements re-quantized as above.
//   * Q8_K: plain symmetric round-to-nearest with a float32 scale, plus the 16-element sums.
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "kernels/quant_blocks.h"
#include "convert/quant_encode_util.h"

namespace lfm::quant {

namespace {

// Below this the group is treated as all zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Symmetric fit x[i] ≈ scale * (L[i] - nmax), L[i] in [0, 2*nmax - 1], minimising
// Σ x[i]² (x[i] - scale * l[i])². The element with the largest magnitude pins the grid: inverse
// scales -(nmax + 0.1 k) / max for k = -9..9 are tried, each followed by the least-squares scale
// for its rounding, and the best weighted fit wins. Returns the scale (0 for an all-zero group).
float search_symmetric_fit(int n, int nmax, const float* x, uint8_t* L) {
  const float max = signed_abs_max(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  // Σ w x l and Σ w l² for the rounding at inverse scale `iscale`, with w = x².
  auto fit = [&](float iscale, float& sum_lx, float& sum_l2, bool store) {
    sum_lx = 0.0f;
    sum_l2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(round_half_even(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = static_cast<uint8_t>(l + nmax);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * static_cast<float>(l);
      sum_l2 += w * static_cast<float>(l) * static_cast<float>(l);  // ggml's (w*l)*l order
    }
  };
  float sum_lx, sum_l2;
  fit(-static_cast<float>(nmax) / max, sum_lx, sum_l2, true);
  float scale = sum_l2 != 0.0f ? sum_lx / sum_l2 : 0.0f;
  // For the least-squares scale the weighted error is Σwx² - sum_lx²/sum_l2, so maximising
  // sum_lx²/sum_l2 (= scale * sum_lx) minimises it.
  float best = scale * sum_lx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    float lx, l2;
    fit(iscale, lx, l2, false);
    if (l2 > 0.0f && lx * lx > best * l2) {
      fit(iscale, lx, l2, true);
      scale = lx / l2;
      best = scale * lx;
    }
  }
  return scale;
}

// Affine fit x[i] ≈ scale * L[i] - the_min with L[i] in [0, nmax], the_min >= 0 (the grid always
// reaches down to at least 0), minimising Σ w[i] (x[i] - scale L[i] + the_min)². Starts from the
// min/max grid, then tries inverse scales (rmin + rdelta k + nmax) / (max - min) for k = 0..nstep,
// each with the weighted least-squares (scale, min) for its rounding; keeps the best. `scratch`
// holds n candidate quants. Returns the scale and writes the_min.
float search_affine_fit(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                        uint8_t* scratch, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {  // constant group (including all zero)
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(round_half_even(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  for (int k = 0; k <= nstep; ++k) {
    iscale = (rmin + rdelta * static_cast<float>(k) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(round_half_even(iscale * (x[i] - min)), 0, nmax);
      scratch[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    // Normal equations of the weighted fit x ≈ s * l + m.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0.0f) {  // the format can only subtract a min: refit through zero
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0.0f;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(scratch[i]) + this_min - x[i];
        error += w[i] * (diff * diff);
      }
      if (error < best_error) {
        std::memcpy(L, scratch, static_cast<size_t>(n));
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Shared by Q4_K and Q5_K: fits the 8 sub-blocks, quantizes their scales/mins to 6 bits into
// d/dmin/packed, and writes the final quants L[0..255] in [0, nmax] against the stored values.
// (rmin, nstep) are ggml's search settings: (-1, 20) for Q4_K and (-0.5, 15) for Q5_K.
void fit_k_super_block(const float* x, int nmax, float rmin, int nstep, uint16_t& d_out, uint16_t& dmin_out,
                       uint8_t packed[kKScaleBytes], uint8_t L[kQK_K]) {
  constexpr int kSub = kQK_K / 32;
  float scales[kSub], mins[kSub], weights[32];
  uint8_t scratch[32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < kSub; ++j) {
    const float* xs = x + 32 * j;
    // Weight large-magnitude elements more, relative to the sub-block's RMS.
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(xs[l]);
    scales[j] = search_affine_fit(32, nmax, xs, weights, L + 32 * j, &mins[j], scratch, rmin, 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t q_scale[kSub], q_min[kSub];
  for (int j = 0; j < kSub; ++j) {
    q_scale[j] = static_cast<uint8_t>(clamp_int(round_half_even(inv_scale * scales[j]), 0, 63));
    q_min[j] = static_cast<uint8_t>(clamp_int(round_half_even(inv_min * mins[j]), 0, 63));
  }
  pack_k_scales(q_scale, q_min, packed);
  d_out = f32_to_f16(max_scale / 63.0f);
  dmin_out = f32_to_f16(max_min / 63.0f);

  // Re-quantize against what the decoder computes: d * sc and dmin * m from the stored bits.
  const float d = f16_to_f32(d_out), dmin = f16_to_f32(dmin_out);
  for (int j = 0; j < kSub; ++j) {
    const KScaleMin sm = unpack_k_scale(packed, j);
    const float step = d * static_cast<float>(sm.scale);
    if (step == 0.0f) continue;  // every quant decodes to -dmin * m: keep the fit's quants
    const float offset = dmin * static_cast<float>(sm.min);
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(clamp_int(round_half_even((x[32 * j + l] + offset) / step), 0, nmax));
  }
}

// Symmetric fit x[i] ≈ scale * L[i] with L[i] in [-nmax, nmax - 1] (ggml's make_q3_quants with
// its rmse search): round at the inverse scale that maps the largest-magnitude element to -nmax,
// then up to 5 passes that move one element at a time to the level its least-squares scale
// asks for, whenever that raises (Σ w x l)² / Σ w l² (w = x²). Writes L[i] + nmax (0 for an
// all-zero group) and returns the least-squares scale.
float search_q3_fit(int n, int nmax, const float* x, int8_t* L) {
  const float max = signed_abs_max(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(round_half_even(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
      if (slx <= 0.0f) continue;
      float sl2 = suml2 - w * static_cast<float>(L[i]) * static_cast<float>(L[i]);
      const int l = clamp_int(round_half_even(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      slx += w * x[i] * static_cast<float>(l);
      sl2 += w * static_cast<float>(l) * static_cast<float>(l);
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

}  // namespace

// Q3_K (quantize_row_q3_K_ref): 16 sub-blocks fitted with search_q3_fit; the signed largest
// scale maps to the 6-bit level 0 (sc − 32 = −32), the others round to theirs; every element is
// then re-quantized against the scale the decoder will see (a sub-block whose scale rounds to 0
// keeps its fitted quants, which decode to 0 anyway).
void encode_q3_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int kSub = kQK_K / 16;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ3_K b{};
    int8_t L[kQK_K];
    float scales[kSub];
    for (int j = 0; j < kSub; ++j) scales[j] = search_q3_fit(16, 4, x + 16 * j, L + 16 * j);
    const float max_scale = signed_abs_max(scales, kSub);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < kSub; ++j) {
        const int l = clamp_int(round_half_even(iscale * scales[j]), -32, 31) + 32;
        b.scales[j % 8] |= static_cast<uint8_t>((l & 0x0F) << (4 * (j / 8)));
        b.scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      b.d = f32_to_f16(1.0f / iscale);
    }
    const float d_all = f16_to_f32(b.d);
    for (int j = 0; j < kSub; ++j) {
      const int sc = unpack_q3k_scale(b.scales, j) - 32;
      const float d = d_all * static_cast<float>(sc);
      if (d == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * j + l] = static_cast<int8_t>(clamp_int(round_half_even(x[16 * j + l] / d), -4, 3) + 4);
    }
    // Element e = 128h + 32j + l: its third bit in hmask[l] bit 4h + j, the low two in qs.
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      if (L[e] > 3) b.hmask[l] |= static_cast<uint8_t>(1u << (4 * h + j));
      b.qs[32 * h + l] |= static_cast<uint8_t>((L[e] & 3) << (2 * j));
    }
    store_block(dst, i, b);
  }
}

void encode_q4_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    BlockQ4_K b{};
    uint8_t L[kQK_K];
    fit_k_super_block(src + i * kQK_K, 15, -1.0f, 20, b.d, b.dmin, b.scales, L);
    for (int chunk = 0; chunk < 4; ++chunk)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * chunk + l] = static_cast<uint8_t>(L[64 * chunk + l] | (L[64 * chunk + 32 + l] << 4));
    store_block(dst, i, b);
  }
}

void encode_q5_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    BlockQ5_K b{};
    uint8_t L[kQK_K];
    fit_k_super_block(src + i * kQK_K, 31, -0.5f, 15, b.d, b.dmin, b.scales, L);
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * chunk + l], hi = L[64 * chunk + 32 + l];
        b.qs[32 * chunk + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        b.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * chunk)) | ((hi >> 4) << (2 * chunk + 1)));
      }
    }
    store_block(dst, i, b);
  }
}

void encode_q6_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int kSub = kQK_K / 16;
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ6_K b{};
    uint8_t L[kQK_K];
    float scales[kSub];
    for (int j = 0; j < kSub; ++j) scales[j] = search_symmetric_fit(16, 32, x + 16 * j, L + 16 * j);
    const float max_scale = signed_abs_max(scales, kSub);
    if (std::fabs(max_scale) < kGroupMaxEps) {  // all-zero super-block: every field zero
      store_block(dst, i, b);
      continue;
    }
    // The signed largest scale maps to -128, the one int8 value with no positive counterpart.
    const float iscale = -128.0f / max_scale;
    b.d = f32_to_f16(1.0f / iscale);
    for (int j = 0; j < kSub; ++j)
      b.scales[j] = static_cast<int8_t>(clamp_int(round_half_even(iscale * scales[j]), -128, 127));
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < kSub; ++j) {
      const float step = d * static_cast<float>(b.scales[j]);
      if (step == 0.0f) continue;  // decodes to 0 whatever the quants are
      for (int l = 0; l < 16; ++l)
        L[16 * j + l] = static_cast<uint8_t>(clamp_int(round_half_even(x[16 * j + l] / step), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        b.ql[64 * h + l] = static_cast<uint8_t>((Lh[l] & 0x0F) | ((Lh[l + 64] & 0x0F) << 4));
        b.ql[64 * h + 32 + l] = static_cast<uint8_t>((Lh[l + 32] & 0x0F) | ((Lh[l + 96] & 0x0F) << 4));
        b.qh[32 * h + l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                                ((Lh[l + 96] >> 4) << 6));
      }
    }
    store_block(dst, i, b);
  }
}

void encode_q8_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ8_K b{};
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax != 0.0f) {
      // ggml uses 127 (not 128) here so its SIMD dot products never see -128.
      const float iscale = -127.0f / max;
      for (int j = 0; j < kQK_K; ++j) b.qs[j] = static_cast<int8_t>(clamp_int(round_half_even(iscale * x[j]), -128, 127));
      b.d = 1.0f / iscale;
      for (int g = 0; g < kQK_K / 16; ++g) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
        b.bsums[g] = static_cast<int16_t>(sum);
      }
    }
    store_block(dst, i, b);
  }
}

}  // namespace lfm::quant
