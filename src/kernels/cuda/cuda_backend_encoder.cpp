// The CUDA backend's ops for the audio and vision encoders (class in cuda_backend_impl.h):
// attention and depthwise convs within segments, relative-position attention, conv2d, layer norm,
// GELU, activations and GLU. Those with per-segment or per-row tables build them on the host and
// upload them with the call; each queues its launch on the backend's stream.
#include "kernels/cuda/cuda_backend_impl.h"

#include <algorithm>
#include <vector>

namespace lfm::cuda {

void CudaBackend::layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                             float* out) {
  auto timer = time_op("layer_norm");
  enqueue("layer_norm", [this](const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                               float* out) { cuda::layer_norm(x, w, b, rows, dim, eps, out, stream_); },
          x, w, b, rows, dim, eps, out);
}

void CudaBackend::gelu(const float* x, int64_t n, bool tanh_approximation, float* out) {
  auto timer = time_op("gelu");
  enqueue("gelu", [this](const float* x, int64_t n, bool t, float* out) { cuda::gelu(x, n, t, out, stream_); }, x, n,
          tanh_approximation, out);
}

void CudaBackend::segment_attention(const float* q, const float* k, const float* v, const SegmentAttention& a,
                                    float* out) {
  auto timer = time_op("segment_attention");
  check_segment_attention(a, "cuda");
  LFM_CHECK(a.head_dim <= 256, "cuda: segment_attention supports head_dim up to 256, not ", a.head_dim);
  // Each row's key range, uploaded with the call (a few KiB for a batch of tiles or texts).
  const int64_t rows = a.seg.back();
  std::vector<int64_t>& bounds = segment_host_;  // kept: an upload with nothing queued reads it in place
  bounds.assign(static_cast<size_t>(2 * rows), 0);
  for (size_t s = 0; s + 1 < a.seg.size(); ++s) {
    const int64_t key_end = a.key_end.empty() ? a.seg[s + 1] : a.key_end[s];
    for (int64_t r = a.seg[s]; r < a.seg[s + 1]; ++r) {
      bounds[static_cast<size_t>(r)] = a.seg[s];
      bounds[static_cast<size_t>(rows + r)] = a.causal ? std::min(key_end, r + 1) : key_end;
    }
  }
  ensure_capacity(*this, segment_buf_, bounds.size() * sizeof(int64_t));
  auto* dev = static_cast<int64_t*>(segment_buf_.data());
  upload(dev, bounds.data(), bounds.size() * sizeof(int64_t));
  enqueue("segment_attention", [this](const float* q, const float* k, const float* v, const int64_t* begin,
                                      const int64_t* end, int64_t rows, int64_t h, int64_t g, int64_t hd, float scale,
                                      float* out) {
    cuda::segment_attention(q, k, v, begin, end, rows, h, g, hd, scale, out, stream_);
  }, q, k, v, static_cast<const int64_t*>(dev), static_cast<const int64_t*>(dev + rows), rows, a.n_heads,
      a.n_kv_heads, a.head_dim, a.scale, out);
}

void CudaBackend::segment_conv(const float* u, std::span<const int64_t> seg, int64_t dim, int64_t kernel, int64_t left,
                               const float* w, const float* bias, float* out) {
  auto timer = time_op("segment_conv");
  LFM_CHECK(seg.size() >= 2 && seg.front() == 0, "cuda: segment_conv needs segment bounds from 0");
  LFM_CHECK(kernel > 0 && left >= 0 && left < kernel, "cuda: segment_conv with kernel ", kernel, " and ", left,
            " taps to the left");
  const int64_t rows = seg.back();
  std::vector<int64_t>& bounds = conv_segment_host_;  // as segment_attention's
  bounds.assign(static_cast<size_t>(2 * rows), 0);
  for (size_t s = 0; s + 1 < seg.size(); ++s) {
    LFM_CHECK(seg[s + 1] > seg[s], "cuda: segment_conv segment ", s, " is empty or reversed");
    for (int64_t r = seg[s]; r < seg[s + 1]; ++r) {
      bounds[static_cast<size_t>(r)] = seg[s];
      bounds[static_cast<size_t>(rows + r)] = seg[s + 1];
    }
  }
  ensure_capacity(*this, conv_segment_buf_, bounds.size() * sizeof(int64_t));
  auto* dev = static_cast<int64_t*>(conv_segment_buf_.data());
  upload(dev, bounds.data(), bounds.size() * sizeof(int64_t));
  enqueue("segment_conv", [this](const float* u, const int64_t* begin, const int64_t* end, int64_t rows, int64_t dim,
                                 int64_t kernel, int64_t left, const float* w, const float* bias, float* out) {
    cuda::segment_conv(u, begin, end, rows, dim, kernel, left, w, bias, out, stream_);
  }, u, static_cast<const int64_t*>(dev), static_cast<const int64_t*>(dev + rows), rows, dim, kernel, left, w, bias,
      out);
}

void CudaBackend::activation(const float* x, int64_t n, Activation f, float* out) {
  auto timer = time_op("activation");
  enqueue("activation", [this](const float* x, int64_t n, int kind, float* out) {
    cuda::activation(x, n, kind, out, stream_);
  }, x, n, f == Activation::kRelu ? 0 : 1, out);
}

void CudaBackend::glu(const float* x, int64_t rows, int64_t cols, float* out) {
  auto timer = time_op("glu");
  enqueue("glu", [this](const float* x, int64_t rows, int64_t cols, float* out) {
    cuda::glu(x, rows, cols, out, stream_);
  }, x, rows, cols, out);
}

void CudaBackend::conv2d(const float* x, const Conv2d& c, const float* w, const float* bias, float* out) {
  auto timer = time_op("conv2d");
  const int64_t rows = check_conv2d(c, "cuda");
  // Each output row's image, uploaded with the call (24 bytes a row).
  std::vector<int64_t>& image = conv2d_host_;
  image.clear();
  for (size_t s = 0; s + 1 < c.seg.size(); ++s) {
    const int64_t h = c.seg[s + 1] - c.seg[s];
    for (int64_t o = 0; o < c.out_rows(h); ++o) image.insert(image.end(), {c.seg[s], h, o});
  }
  ensure_capacity(*this, conv2d_buf_, image.size() * sizeof(int64_t));
  auto* dev = static_cast<int64_t*>(conv2d_buf_.data());
  upload(dev, image.data(), image.size() * sizeof(int64_t));
  enqueue("conv2d", [this](const float* x, const int64_t* image, int64_t rows, int64_t width, int64_t out_width,
                           int64_t channels, bool depthwise, int64_t kernel, int64_t stride, int64_t pad,
                           const float* w, const float* bias, float* out) {
    cuda::conv2d(x, image, rows, width, out_width, channels, depthwise, kernel, stride, pad, w, bias, out, stream_);
  }, x, static_cast<const int64_t*>(dev), rows, c.width, c.out_width(), c.channels, c.depthwise, c.kernel, c.stride,
      c.pad, w, bias, out);
}

void CudaBackend::rel_pos_attention(const float* q, const float* k, const float* v, const float* pos,
                                    const float* bias_u, const float* bias_v, const RelPosAttention& a, float* out) {
  auto timer = time_op("rel_pos_attention");
  check_rel_pos_attention(a, "cuda");
  LFM_CHECK(a.head_dim <= 256, "cuda: rel_pos_attention supports head_dim up to 256, not ", a.head_dim);
  const int64_t rows = a.seg.back();
  std::vector<int64_t>& bounds = rel_pos_host_;  // as segment_attention's
  bounds.assign(static_cast<size_t>(2 * rows), 0);
  for (size_t s = 0; s + 1 < a.seg.size(); ++s)
    for (int64_t r = a.seg[s]; r < a.seg[s + 1]; ++r) {
      bounds[static_cast<size_t>(r)] = a.seg[s];
      bounds[static_cast<size_t>(rows + r)] = a.seg[s + 1];
    }
  ensure_capacity(*this, rel_pos_buf_, bounds.size() * sizeof(int64_t));
  auto* dev = static_cast<int64_t*>(rel_pos_buf_.data());
  upload(dev, bounds.data(), bounds.size() * sizeof(int64_t));
  enqueue("rel_pos_attention", [this](const float* q, const float* k, const float* v, const float* pos,
                                      const float* bu, const float* bv, const int64_t* begin, const int64_t* end,
                                      int64_t rows, int64_t h, int64_t hd, int64_t p0, float scale, float* out) {
    cuda::rel_pos_attention(q, k, v, pos, bu, bv, begin, end, rows, h, hd, p0, scale, out, stream_);
  }, q, k, v, pos, bias_u, bias_v, static_cast<const int64_t*>(dev), static_cast<const int64_t*>(dev + rows), rows,
      a.n_heads, a.head_dim, a.max_relative, a.scale, out);
}

}  // namespace lfm::cuda
