// The encoder ops of the reference backend (Backend::layer_norm, gelu, segment_attention,
// segment_conv): what a vision tower or a text encoder needs beyond the decoder's ops. Plain loops in a fixed order; attention is spread
// over the thread pool by (row, head), each result computed alone.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/reference_backend.h"
#include "kernels/reference_ops.h"

namespace lfm {
namespace ref {

void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    // Two passes in double: the mean, then the biased variance around it (torch's result to
    // float32 rounding, whatever its own summation order).
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const double mean = sum / static_cast<double>(dim);
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) {
      const double c = xr[i] - mean;
      ss += c * c;
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const float normed = static_cast<float>((xr[i] - mean) * inv);
      o[i] = normed * w[i] + (b ? b[i] : 0.0f);
    }
  }
}

float gelu(float x, bool tanh_approximation) {
  if (tanh_approximation) {
    // torch: 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
  }
  return static_cast<float>(0.5 * x * (1.0 + std::erf(static_cast<double>(x) * 0.7071067811865476)));
}

// One (row, head) of Backend::segment_attention: keys [begin, end) of kv head h / group.
void segment_attention_row(const float* q, const float* k, const float* v, int64_t begin, int64_t end, int64_t r,
                           int64_t h, const SegmentAttention& a, float* scores, float* out) {
  const int64_t hd = a.head_dim, q_stride = a.n_heads * hd, kv_stride = a.n_kv_heads * hd;
  const int64_t kvh = h / (a.n_heads / a.n_kv_heads);
  const float* qr = q + r * q_stride + h * hd;
  float mx = -INFINITY;
  for (int64_t j = begin; j < end; ++j) {
    const float s = dot(qr, k + j * kv_stride + kvh * hd, hd) * a.scale;
    scores[j - begin] = s;
    mx = std::max(mx, s);
  }
  float sum = 0;
  for (int64_t j = 0; j < end - begin; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  float* o = out + r * q_stride + h * hd;
  std::fill_n(o, hd, 0.0f);
  for (int64_t j = begin; j < end; ++j) {
    const float p = scores[j - begin] / sum;
    const float* vr = v + j * kv_stride + kvh * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] += p * vr[d];
  }
}

}  // namespace ref

void ReferenceBackend::layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                                  float* out) {
  pool_.parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    ref::layer_norm(x + begin * dim, w, b, end - begin, dim, eps, out + begin * dim);
  });
}

void ReferenceBackend::gelu(const float* x, int64_t n, bool tanh_approximation, float* out) {
  pool_.parallel_for(n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = ref::gelu(x[i], tanh_approximation);
  });
}

void ReferenceBackend::segment_attention(const float* q, const float* k, const float* v, const SegmentAttention& a,
                                         float* out) {
  const int64_t longest = check_segment_attention(a, "kernels");
  const int64_t rows = a.seg.back();
  pool_.parallel_for(rows * a.n_heads, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(longest));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / a.n_heads, h = task % a.n_heads;
      const size_t s = static_cast<size_t>(std::upper_bound(a.seg.begin(), a.seg.end(), r) - a.seg.begin()) - 1;
      int64_t key_end = a.key_end.empty() ? a.seg[s + 1] : a.key_end[s];
      if (a.causal) key_end = std::min(key_end, r + 1);
      ref::segment_attention_row(q, k, v, a.seg[s], key_end, r, h, a, scores.data(), out);
    }
  });
}

void ReferenceBackend::segment_conv(const float* u, std::span<const int64_t> seg, int64_t dim, int64_t kernel,
                                    int64_t left, const float* w, const float* bias, float* out) {
  LFM_CHECK(seg.size() >= 2 && seg.front() == 0, "kernels: segment_conv needs segment bounds from 0");
  LFM_CHECK(kernel > 0 && left >= 0 && left < kernel, "kernels: segment_conv with kernel ", kernel, " and ", left,
            " taps to the left");
  for (size_t i = 1; i < seg.size(); ++i)
    LFM_CHECK(seg[i] > seg[i - 1], "kernels: segment_conv segment ", i - 1, " is empty or reversed");
  const int64_t rows = seg.back();
  pool_.parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    size_t s = static_cast<size_t>(std::upper_bound(seg.begin(), seg.end(), begin) - seg.begin()) - 1;
    for (int64_t r = begin; r < end; ++r) {
      while (r >= seg[s + 1]) ++s;
      float* o = out + r * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] = bias ? bias[c] : 0.0f;
      for (int64_t j = 0; j < kernel; ++j) {
        const int64_t src = r - left + j;
        if (src < seg[s] || src >= seg[s + 1]) continue;
        const float* ur = u + src * dim;
        for (int64_t c = 0; c < dim; ++c) o[c] += w[c * kernel + j] * ur[c];
      }
    }
  });
}

}  // namespace lfm
