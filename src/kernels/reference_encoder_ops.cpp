// The encoder ops of the reference backend (Backend::layer_norm, gelu, segment_attention): what a
// vision tower needs beyond the decoder's ops. Plain loops in a fixed order; attention is spread
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

void segment_attention_row(const float* q, const float* k, const float* v, int64_t begin, int64_t end, int64_t r,
                           int64_t h, int64_t n_heads, int64_t head_dim, float scale, float* scores, float* out) {
  const int64_t stride = n_heads * head_dim;
  const float* qr = q + r * stride + h * head_dim;
  float mx = -INFINITY;
  for (int64_t j = begin; j < end; ++j) {
    const float s = dot(qr, k + j * stride + h * head_dim, head_dim) * scale;
    scores[j - begin] = s;
    mx = std::max(mx, s);
  }
  float sum = 0;
  for (int64_t j = 0; j < end - begin; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  float* o = out + r * stride + h * head_dim;
  std::fill_n(o, head_dim, 0.0f);
  for (int64_t j = begin; j < end; ++j) {
    const float p = scores[j - begin] / sum;
    const float* vr = v + j * stride + h * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) o[d] += p * vr[d];
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

void ReferenceBackend::segment_attention(const float* q, const float* k, const float* v, std::span<const int64_t> seg,
                                         int64_t n_heads, int64_t head_dim, float scale, float* out) {
  LFM_CHECK(seg.size() >= 2 && seg.front() == 0, "kernels: segment_attention needs segment bounds from 0");
  int64_t longest = 0;
  for (size_t i = 1; i < seg.size(); ++i) {
    LFM_CHECK(seg[i] > seg[i - 1], "kernels: segment_attention segment ", i - 1, " is empty or reversed");
    longest = std::max(longest, seg[i] - seg[i - 1]);
  }
  const int64_t rows = seg.back();
  pool_.parallel_for(rows * n_heads, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(longest));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / n_heads, h = task % n_heads;
      const size_t s = static_cast<size_t>(std::upper_bound(seg.begin(), seg.end(), r) - seg.begin()) - 1;
      ref::segment_attention_row(q, k, v, seg[s], seg[s + 1], r, h, n_heads, head_dim, scale, scores.data(), out);
    }
  });
}

}  // namespace lfm
