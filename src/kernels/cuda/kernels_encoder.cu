// Encoder kernels (the vision tower): LayerNorm, GELU and bidirectional attention inside image
// tiles. Each output element has one fixed order of arithmetic, as in every kernel here.
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

}  // namespace

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
