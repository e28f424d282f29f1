// See resize.h for the algorithm. The mixed float/double expressions below are deliberate: each
// reproduces the promotions of ATen's scalar_t = float code (a float times `i + 0.5` is computed in
// double and stored back to float, and so on), which is what makes the weights bit-identical.
#include "image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace lfm::image {

namespace {

struct Taps {
  int64_t max_taps = 0;
  std::vector<int64_t> first, count;  // per output index
  std::vector<float> weights;         // [out][max_taps]
};

inline float triangle(float x) {  // ATen's aa_filter for bilinear
  if (x < 0.0) x = -x;
  if (x < 1.0) return static_cast<float>(1.0 - x);
  return 0.0f;
}

Taps compute_taps(int64_t in, int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  const float support = static_cast<float>(scale >= 1.0 ? (2 * 0.5) * scale : 2 * 0.5);
  Taps t;
  t.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out);
  t.count.resize(out);
  t.weights.assign(size_t(out * t.max_taps), 0.0f);
  const float invscale = static_cast<float>(scale >= 1.0 ? 1.0 / scale : 1.0);
  for (int64_t i = 0; i < out; ++i) {
    const float center = static_cast<float>(scale * (i + 0.5));
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t(0));
    const int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    float* w = &t.weights[size_t(i * t.max_taps)];
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = triangle(static_cast<float>((static_cast<float>(j + xmin) - center + 0.5) * invscale));
      total += w[j];
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    t.first[i] = xmin;
    t.count[i] = xsize;
  }
  return t;
}

// One output sample: the taps of `t` at index i over src[first + j·stride]. ATen's loop is
//   out = s[0]·w[0]; for j ≥ 1: out += s[j]·w[j]
// and the reference build (Debian's torch 1.13, AVX2 kernels, compiled with FMA contraction)
// vectorises the j ≥ 1 part 4 (or 8) lanes at a time: those products are rounded, then added in
// order; the last (count − 1) mod 4 terms run in the scalar epilogue, where the compiler fused
// multiply and add into one FMA. Reproducing that split makes every output bit-identical (a
// plain loop differs from torch by one float ulp on ~10% of outputs, fused everywhere on ~4%).
inline float apply(const Taps& t, int64_t i, const float* src, int64_t stride) {
  const float* w = &t.weights[size_t(i * t.max_taps)];
  const float* s = src + t.first[i] * stride;
  const int64_t rest = t.count[i] - 1, rounded = rest / 4 * 4;
  float acc = s[0] * w[0];
  for (int64_t j = 1; j <= rounded; ++j) {
    const float product = s[j * stride] * w[j];
    acc += product;
  }
  for (int64_t j = rounded + 1; j <= rest; ++j) acc = std::fma(s[j * stride], w[j], acc);
  return acc;
}

}  // namespace

void resize_bilinear_antialias(const float* src, int channels, int h, int w, float* dst, int out_h, int out_w) {
  LFM_CHECK(channels >= 1 && h >= 1 && w >= 1 && out_h >= 1 && out_w >= 1, "image: resize of ", channels, "x", h,
            "x", w, " to ", out_h, "x", out_w, ": every size must be at least 1");
  const Taps tw = compute_taps(w, out_w), th = compute_taps(h, out_h);
  // Width pass: [C][h][w] → [C][h][out_w].
  std::vector<float> tmp(size_t(channels) * h * out_w);
  for (int64_t row = 0; row < int64_t(channels) * h; ++row) {
    const float* s = src + row * w;
    float* d = tmp.data() + row * out_w;
    for (int64_t x = 0; x < out_w; ++x) d[x] = apply(tw, x, s, 1);
  }
  // Height pass: [C][h][out_w] → [C][out_h][out_w].
  for (int64_t c = 0; c < channels; ++c) {
    const float* s = tmp.data() + c * h * out_w;
    float* d = dst + c * out_h * out_w;
    for (int64_t y = 0; y < out_h; ++y)
      for (int64_t x = 0; x < out_w; ++x) d[y * out_w + x] = apply(th, y, s + x, out_w);
  }
}

}  // namespace lfm::image
