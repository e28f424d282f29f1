// The speech encoder ops of the reference backend (Backend::activation, glu, conv2d,
// rel_pos_attention): what a FastConformer needs beyond the vision tower's ops. Plain loops in a
// fixed order; each output computed alone from its own inputs, spread over the thread pool.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/reference_backend.h"
#include "kernels/reference_ops.h"

namespace lfm {
namespace ref {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void conv2d_row(const float* x, int64_t in_row0, int64_t in_rows, int64_t o, const Conv2d& c, const float* w,
                const float* bias, float* out_row) {
  const int64_t C = c.channels, W = c.width, cin = c.in_channels(), Wo = c.out_width(), K = c.kernel;
  for (int64_t p = 0; p < Wo; ++p) {
    float* y = out_row + p * C;
    for (int64_t ch = 0; ch < C; ++ch) {
      float acc = bias ? bias[ch] : 0.0f;
      for (int64_t a = 0; a < K; ++a) {
        const int64_t r = o * c.stride - c.pad + a;
        if (r < 0 || r >= in_rows) continue;
        for (int64_t b = 0; b < K; ++b) {
          const int64_t col = p * c.stride - c.pad + b;
          if (col < 0 || col >= W) continue;
          acc += w[(ch * K + a) * K + b] * x[((in_row0 + r) * W + col) * cin + (c.depthwise ? ch : 0)];
        }
      }
      y[ch] = acc;
    }
  }
}

void rel_pos_attention_row(const float* q, const float* k, const float* v, const float* pos, const float* bias_u,
                           const float* bias_v, int64_t begin, int64_t end, int64_t r, int64_t h,
                           const RelPosAttention& a, float* scores, float* out) {
  const int64_t hd = a.head_dim, stride = a.n_heads * hd, i = r - begin;
  const float* qr = q + r * stride + h * hd;
  const float* u = bias_u + h * hd;
  const float* vb = bias_v + h * hd;
  float mx = -INFINITY;
  for (int64_t j = begin; j < end; ++j) {
    const float* kr = k + j * stride + h * hd;
    const float* pr = pos + (a.max_relative - (i - (j - begin))) * stride + h * hd;
    float ac = 0, bd = 0;
    for (int64_t d = 0; d < hd; ++d) {
      ac += (qr[d] + u[d]) * kr[d];
      bd += (qr[d] + vb[d]) * pr[d];
    }
    const float s = (ac + bd) * a.scale;
    scores[j - begin] = s;
    mx = std::max(mx, s);
  }
  float sum = 0;
  for (int64_t j = 0; j < end - begin; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  float* o = out + r * stride + h * hd;
  std::fill_n(o, hd, 0.0f);
  for (int64_t j = begin; j < end; ++j) {
    const float p = scores[j - begin] / sum;
    const float* vr = v + j * stride + h * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] += p * vr[d];
  }
}

}  // namespace ref

void ReferenceBackend::activation(const float* x, int64_t n, Activation f, float* out) {
  pool_.parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
    if (f == Activation::kRelu)
      for (int64_t i = begin; i < end; ++i) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
    else
      for (int64_t i = begin; i < end; ++i) out[i] = x[i] / (1.0f + std::exp(-x[i]));
  });
}

void ReferenceBackend::glu(const float* x, int64_t rows, int64_t cols, float* out) {
  pool_.parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = x[r * 2 * cols + c] * ref::sigmoid(x[r * 2 * cols + cols + c]);
  });
}

void ReferenceBackend::conv2d(const float* x, const Conv2d& c, const float* w, const float* bias, float* out) {
  const int64_t rows = check_conv2d(c, "kernels");
  // Output row → (its image's first input row, the image's rows, the row inside the image).
  std::vector<int64_t> image(static_cast<size_t>(rows) * 3);
  int64_t at = 0;
  for (size_t s = 0; s + 1 < c.seg.size(); ++s) {
    const int64_t h = c.seg[s + 1] - c.seg[s];
    for (int64_t o = 0; o < c.out_rows(h); ++o, ++at) {
      image[at * 3] = c.seg[s];
      image[at * 3 + 1] = h;
      image[at * 3 + 2] = o;
    }
  }
  const int64_t row_size = c.out_width() * c.channels;
  pool_.parallel_for(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      ref::conv2d_row(x, image[r * 3], image[r * 3 + 1], image[r * 3 + 2], c, w, bias, out + r * row_size);
  });
}

void ReferenceBackend::rel_pos_attention(const float* q, const float* k, const float* v, const float* pos,
                                         const float* bias_u, const float* bias_v, const RelPosAttention& a,
                                         float* out) {
  const int64_t longest = check_rel_pos_attention(a, "kernels");
  const int64_t rows = a.seg.back();
  pool_.parallel_for(rows * a.n_heads, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(longest));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / a.n_heads, h = task % a.n_heads;
      const size_t s = static_cast<size_t>(std::upper_bound(a.seg.begin(), a.seg.end(), r) - a.seg.begin()) - 1;
      ref::rel_pos_attention_row(q, k, v, pos, bias_u, bias_v, a.seg[s], a.seg[s + 1], r, h, a, scores.data(), out);
    }
  });
}

}  // namespace lfm
