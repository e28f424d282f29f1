// torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=True) on float32,
// reproduced operation for operation from ATen's CPU kernel (torch 1.13, the reference stack):
// separable, the width pass first into a float32 [channels][h][out_w] buffer, then the height pass;
// per output index i along an axis of in→out samples (scale = float(in) / out):
//   support = scale ≥ 1 ? scale : 1,  center = scale·(i + 0.5),  invscale = scale ≥ 1 ? 1/scale : 1
//   taps j ∈ [xmin, xmin + xsize): xmin = max(int(center − support + 0.5), 0),
//                                  xsize = min(int(center + support + 0.5), in) − xmin
//   w_j = tri((j − center + 0.5)·invscale) with tri(x) = max(0, 1 − |x|), then w_j /= Σw (float)
//   out = Σ src[j]·w_j, accumulated in float from the first tap, products rounded except in the
//   last (taps − 1) mod 4 terms, fused (FMA) — how the AVX2 build of ATen that made the reference
//   evaluates it (resize.cpp says why); torch's non-AVX2 kernel differs from it by one float ulp.
// Results equal torch's bit for bit (tests/image_resize_test.cpp); works for any channel count,
// up- and downscaling, sides of 1. Used for image tiles and the vision tower's position embeddings.
#pragma once

namespace lfm::image {

// src: [channels][h][w] float32, dst: [channels][out_h][out_w]; all sizes ≥ 1 (lfm::Error if not).
void resize_bilinear_antialias(const float* src, int channels, int h, int w, float* dst, int out_h, int out_w);

}  // namespace lfm::image
