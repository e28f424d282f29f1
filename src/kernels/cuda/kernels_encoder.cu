// Encoder kernels (the vision tower, a text encoder, the speech encoder): LayerNorm, GELU,
// attention inside image tiles or texts, the segment conv, and the FastConformer's activations,
// GLU, 2-D convs and relative-position attention. Each output element has one fixed order of
// arithmetic, as in every kernel here.
#include <cfloat>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"

namespace lfm::cuda {

namespace {

void check_launch() { LFM_CUDA_CHECK(cudaGetLastError()); }

// One block per row: the mean, then the biased variance around it, both in double.
__global__ void layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ b, int64_t dim, float eps, float* out) {
  __shared__ double partial[8];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < dim; i += 256) sum += xr[i];
  const double mean = block_reduce<256>(sum, partial, SumOp()) / static_cast<double>(dim);
  double ss = 0;
  for (int64_t i = threadIdx.x; i < dim; i += 256) {
    const double c = xr[i] - mean;
    ss += c * c;
  }
  ss = block_reduce<256>(ss, partial, SumOp());
  const double inv = 1.0 / sqrt(ss / static_cast<double>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += 256)
    o[i] = static_cast<float>((xr[i] - mean) * inv) * w[i] + (b ? b[i] : 0.0f);
}

__global__ void gelu_kernel(const float* x, int64_t n, bool tanh_approximation, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  out[i] = tanh_approximation ? 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))
                              : static_cast<float>(0.5 * v * (1.0 + erf(static_cast<double>(v) * 0.7071067811865476)));
}

// One warp per (row, head): an online softmax over the segment's keys in order (each lane owns
// head_dim / 32 output values; the score is a warp reduction in a fixed butterfly order).
__global__ void segment_attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                         const float* __restrict__ v, const int64_t* __restrict__ row_begin,
                                         const int64_t* __restrict__ row_end, int64_t rows, int64_t n_heads,
                                         int64_t n_kv_heads, int64_t head_dim, float scale, float* out) {
  const int64_t task = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (task >= rows * n_heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t r = task / n_heads, h = task % n_heads, stride = n_heads * head_dim;
  const int64_t kv_stride = n_kv_heads * head_dim, kvh = h / (n_heads / n_kv_heads);
  const float* qr = q + r * stride + h * head_dim;
  constexpr int kMaxPerLane = 8;  // head_dim ≤ 256
  float acc[kMaxPerLane] = {};
  float mx = -FLT_MAX, denom = 0;
  for (int64_t j = row_begin[r]; j < row_end[r]; ++j) {
    const float* kr = k + j * kv_stride + kvh * head_dim;
    float s = 0;
    for (int64_t d = lane; d < head_dim; d += 32) s += qr[d] * kr[d];
    s = warp_reduce(s, SumOp{}) * scale;
    const float new_mx = fmaxf(mx, s);
    const float correction = expf(mx - new_mx), p = expf(s - new_mx);
    denom = denom * correction + p;
    const float* vr = v + j * kv_stride + kvh * head_dim;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < head_dim) acc[e] = acc[e] * correction + p * vr[d];
    }
    mx = new_mx;
  }
  float* o = out + r * stride + h * head_dim;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < head_dim) o[d] = acc[e] / denom;
  }
}

// One thread per (row, channel): taps j ascending, rows outside the row's segment read as 0.
__global__ void segment_conv_kernel(const float* __restrict__ u, const int64_t* __restrict__ row_begin,
                                    const int64_t* __restrict__ row_end, int64_t rows, int64_t dim, int64_t kernel,
                                    int64_t left, const float* __restrict__ w, const float* __restrict__ bias,
                                    float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * dim) return;
  const int64_t r = i / dim, c = i % dim;
  float acc = bias ? bias[c] : 0.0f;
  for (int64_t j = 0; j < kernel; ++j) {
    const int64_t src = r - left + j;
    if (src >= row_begin[r] && src < row_end[r]) acc += w[c * kernel + j] * u[src * dim + c];
  }
  out[i] = acc;
}

__global__ void activation_kernel(const float* x, int64_t n, int kind, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  out[i] = kind == 0 ? (v > 0.0f ? v : 0.0f) : v / (1.0f + expf(-v));
}

__global__ void glu_kernel(const float* __restrict__ x, int64_t rows, int64_t cols, float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = x[r * 2 * cols + c] * (1.0f / (1.0f + expf(-x[r * 2 * cols + cols + c])));
}

// One thread per output value (row, column, channel); taps (a, b) ascending, outside the image 0.
// image[3·r .. 3·r+2] = the output row's image's first input row, its rows, the row inside it.
__global__ void conv2d_kernel(const float* __restrict__ x, const int64_t* __restrict__ image, int64_t rows,
                              int64_t width, int64_t out_width, int64_t channels, bool depthwise, int64_t kernel,
                              int64_t stride, int64_t pad, const float* __restrict__ w, const float* __restrict__ bias,
                              float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * out_width * channels) return;
  const int64_t r = i / (out_width * channels), p = (i / channels) % out_width, ch = i % channels;
  const int64_t row0 = image[3 * r], in_rows = image[3 * r + 1], o = image[3 * r + 2];
  const int64_t cin = depthwise ? channels : 1, ci = depthwise ? ch : 0;
  float acc = bias ? bias[ch] : 0.0f;
  for (int64_t a = 0; a < kernel; ++a) {
    const int64_t src = o * stride - pad + a;
    if (src < 0 || src >= in_rows) continue;
    for (int64_t b = 0; b < kernel; ++b) {
      const int64_t col = p * stride - pad + b;
      if (col < 0 || col >= width) continue;
      acc += w[(ch * kernel + a) * kernel + b] * x[((row0 + src) * width + col) * cin + ci];
    }
  }
  out[i] = acc;
}

// One warp per (row, head), as segment_attention_kernel: an online softmax over the segment's
// keys in order; each score is two warp reductions, (q + u)·k and (q + v)·pos[P0 − (i − j)].
__global__ void rel_pos_attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                         const float* __restrict__ v, const float* __restrict__ pos,
                                         const float* __restrict__ bias_u, const float* __restrict__ bias_v,
                                         const int64_t* __restrict__ row_begin, const int64_t* __restrict__ row_end,
                                         int64_t rows, int64_t n_heads, int64_t head_dim, int64_t max_relative,
                                         float scale, float* out) {
  const int64_t task = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (task >= rows * n_heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t r = task / n_heads, h = task % n_heads, stride = n_heads * head_dim;
  const int64_t begin = row_begin[r], i = r - begin;
  const float* qr = q + r * stride + h * head_dim;
  constexpr int kMaxPerLane = 8;  // head_dim ≤ 256
  float qu[kMaxPerLane], qv[kMaxPerLane];
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    qu[e] = d < head_dim ? qr[d] + bias_u[h * head_dim + d] : 0.0f;
    qv[e] = d < head_dim ? qr[d] + bias_v[h * head_dim + d] : 0.0f;
  }
  float acc[kMaxPerLane] = {};
  float mx = -FLT_MAX, denom = 0;
  for (int64_t j = begin; j < row_end[r]; ++j) {
    const float* kr = k + j * stride + h * head_dim;
    const float* pr = pos + (max_relative - (i - (j - begin))) * stride + h * head_dim;
    float ac = 0, bd = 0;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < head_dim) {
        ac += qu[e] * kr[d];
        bd += qv[e] * pr[d];
      }
    }
    const float s = (warp_reduce(ac, SumOp{}) + warp_reduce(bd, SumOp{})) * scale;
    const float new_mx = fmaxf(mx, s);
    const float correction = expf(mx - new_mx), p = expf(s - new_mx);
    denom = denom * correction + p;
    const float* vr = v + j * stride + h * head_dim;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < head_dim) acc[e] = acc[e] * correction + p * vr[d];
    }
    mx = new_mx;
  }
  float* o = out + r * stride + h * head_dim;
#pragma unroll
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t d = lane + 32 * e;
    if (d < head_dim) o[d] = acc[e] / denom;
  }
}

}  // namespace

void activation(const float* x, int64_t n, int kind, float* out, cudaStream_t s) {
  if (n == 0) return;
  LFM_LAUNCH(static_cast<unsigned>((n + 255) / 256), 256, 0, s, activation_kernel)(x, n, kind, out);
  check_launch();
}

void glu(const float* x, int64_t rows, int64_t cols, float* out, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  LFM_LAUNCH(static_cast<unsigned>((n + 255) / 256), 256, 0, s, glu_kernel)(x, rows, cols, out);
  check_launch();
}

void conv2d(const float* x, const int64_t* image, int64_t rows, int64_t width, int64_t out_width, int64_t channels,
            bool depthwise, int64_t kernel, int64_t stride, int64_t pad, const float* w, const float* bias, float* out,
            cudaStream_t s) {
  const int64_t n = rows * out_width * channels;
  if (n == 0) return;
  LFM_LAUNCH(static_cast<unsigned>((n + 255) / 256), 256, 0, s, conv2d_kernel)(
      x, image, rows, width, out_width, channels, depthwise, kernel, stride, pad, w, bias, out);
  check_launch();
}

void rel_pos_attention(const float* q, const float* k, const float* v, const float* pos, const float* bias_u,
                       const float* bias_v, const int64_t* row_begin, const int64_t* row_end, int64_t rows,
                       int64_t n_heads, int64_t head_dim, int64_t max_relative, float scale, float* out,
                       cudaStream_t s) {
  if (rows == 0) return;
  const int64_t tasks = rows * n_heads;
  LFM_LAUNCH(static_cast<unsigned>((tasks + 7) / 8), 256, 0, s, rel_pos_attention_kernel)(
      q, k, v, pos, bias_u, bias_v, row_begin, row_end, rows, n_heads, head_dim, max_relative, scale, out);
  check_launch();
}

void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps, float* out,
                cudaStream_t s) {
  if (rows == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(rows), 256, 0, s, layer_norm_kernel)(x, w, b, dim, eps, out);
  check_launch();
}

void gelu(const float* x, int64_t n, bool tanh_approximation, float* out, cudaStream_t s) {
  if (n == 0) return;
  LFM_LAUNCH(static_cast<unsigned>((n + 255) / 256), 256, 0, s, gelu_kernel)(x, n, tanh_approximation, out);
  check_launch();
}

void segment_attention(const float* q, const float* k, const float* v, const int64_t* row_begin,
                       const int64_t* row_end, int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                       float scale, float* out, cudaStream_t s) {
  if (rows == 0) return;
  const int64_t tasks = rows * n_heads;
  LFM_LAUNCH(static_cast<unsigned>((tasks + 7) / 8), 256, 0, s, segment_attention_kernel)(
      q, k, v, row_begin, row_end, rows, n_heads, n_kv_heads, head_dim, scale, out);
  check_launch();
}

void segment_conv(const float* u, const int64_t* row_begin, const int64_t* row_end, int64_t rows, int64_t dim,
                  int64_t kernel, int64_t left, const float* w, const float* bias, float* out, cudaStream_t s) {
  if (rows == 0) return;
  const int64_t n = rows * dim;
  LFM_LAUNCH(static_cast<unsigned>((n + 255) / 256), 256, 0, s, segment_conv_kernel)(u, row_begin, row_end, rows, dim,
                                                                                    kernel, left, w, bias, out);
  check_launch();
}

}  // namespace lfm::cuda
