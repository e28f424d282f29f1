// State kernels over the paged pools (kernels/state_pools.h): K/V writes, causal paged attention,
// the short conv with its rolling state and checkpoints. A row finds its run through the step's
// row → run table; positions map to blocks through the run's block table.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace lfm::cuda {

namespace {

__device__ __forceinline__ float load_state(DType type, const void* base, int64_t i) {
  switch (type) {
    case DType::F16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_state(DType type, void* base, int64_t i, float v) {
  switch (type) {
    case DType::F16: static_cast<__half*>(base)[i] = __float2half_rn(v); break;
    case DType::BF16: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(base)[i] = v;
  }
}

// What storing then loading does to a value.
__device__ __forceinline__ float round_state(DType type, float v) {
  switch (type) {
    case DType::F16: return __half2float(__float2half_rn(v));
    case DType::BF16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return v;
  }
}

// Element offsets (in values) of key dim d / value dim d of KV head g at position p.
__device__ __forceinline__ int64_t head_block(const DevKv& kv, int32_t block, int64_t g) {
  return (static_cast<int64_t>(block) * kv.kv_heads + g) * kv.block_tokens * kv.head_dim;
}

__global__ void kv_write_kernel(DevKv kv, DevStep step, const float* k, const float* v) {
  const int64_t width = kv.kv_heads * kv.head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= step.n_rows * width) return;
  const int64_t row = i / width, e = i % width, g = e / kv.head_dim, d = e % kv.head_dim;
  const int32_t ri = step.row_run[row];
  if (ri < 0) return;
  const DevRun r = step.runs[ri];
  const int64_t pos = r.pos0 + (row - r.row0);
  const int32_t block = step.blocks[r.blocks_at + pos / kv.block_tokens];
  const int64_t t = pos % kv.block_tokens, base = head_block(kv, block, g);
  store_state(kv.type, kv.k, base + d * kv.block_tokens + t, k[i]);  // keys dim-major
  store_state(kv.type, kv.v, base + t * kv.head_dim + d, v[i]);      // values one row per position
}

constexpr int kAttnThreads = 128;  // also the positions per tile
constexpr int kMaxHeadDim = 256;   // two output dims per thread

// One block per (row, query head): tiles of 128 positions in order, an online softmax across
// tiles; thread j scores position j of a tile, thread d accumulates output dims d and d + 128.
__global__ void attention_kernel(const float* q, DevKv kv, DevStep step, int64_t n_heads, float scale, float* out) {
  __shared__ float qs[kMaxHeadDim];
  __shared__ float p[kAttnThreads];
  __shared__ float red[kAttnThreads / 32];
  const int64_t row = blockIdx.x, h = blockIdx.y, hd = kv.head_dim;
  const int32_t ri = step.row_run[row];
  if (ri < 0) return;
  const DevRun r = step.runs[ri];
  const int64_t g = h / (n_heads / kv.kv_heads);
  const int64_t n_keys = r.pos0 + (row - r.row0) + 1;
  const float* qi = q + (row * n_heads + h) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += kAttnThreads) qs[d] = qi[d];
  __syncthreads();
  float m = -FLT_MAX, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
  const int64_t d0 = threadIdx.x, d1 = threadIdx.x + kAttnThreads;
  for (int64_t tile = 0; tile < n_keys; tile += kAttnThreads) {
    const int64_t j = tile + threadIdx.x;
    float s = -FLT_MAX;
    if (j < n_keys) {
      const int32_t block = step.blocks[r.blocks_at + j / kv.block_tokens];
      const int64_t base = head_block(kv, block, g) + j % kv.block_tokens;
      float dot = 0.0f;
      for (int64_t d = 0; d < hd; ++d) dot += qs[d] * load_state(kv.type, kv.k, base + d * kv.block_tokens);
      s = dot * scale;
    }
    const float m_new = fmaxf(m, block_reduce<kAttnThreads>(s, red, MaxOp()));
    const float pj = j < n_keys ? expf(s - m_new) : 0.0f;
    p[threadIdx.x] = pj;
    const float correction = expf(m - m_new);
    l = l * correction + block_reduce<kAttnThreads>(pj, red, SumOp());  // synchronises: p is complete
    acc0 *= correction;
    acc1 *= correction;
    const int64_t n_tile = n_keys - tile < kAttnThreads ? n_keys - tile : kAttnThreads;
    for (int64_t jj = 0; jj < n_tile; ++jj) {
      const int64_t pos = tile + jj;
      const int32_t block = step.blocks[r.blocks_at + pos / kv.block_tokens];
      const int64_t base = head_block(kv, block, g) + (pos % kv.block_tokens) * hd;
      if (d0 < hd) acc0 += p[jj] * load_state(kv.type, kv.v, base + d0);
      if (d1 < hd) acc1 += p[jj] * load_state(kv.type, kv.v, base + d1);
    }
    m = m_new;
    __syncthreads();  // p is rewritten by the next tile
  }
  float* o = out + (row * n_heads + h) * hd;
  if (d0 < hd) o[d0] = acc0 / l;
  if (d1 < hd) o[d1] = acc1 / l;
}

constexpr int kMaxConvHistory = 15;

// One thread per (run, channel): the run's rows in order through a window of the last K-1
// inputs, as the reference does (bias, then taps oldest first, then the new input).
__global__ void short_conv_kernel(const float* u, DevConv conv, DevStep step, int64_t kernel, const float* w,
                                  const float* bias, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(step.n_runs) * conv.dim) return;
  const int64_t c = i % conv.dim, dim = conv.dim, hist = kernel - 1;
  const DevRun r = step.runs[i / conv.dim];
  const int64_t slot = static_cast<int64_t>(r.conv_slot) * conv.rows * dim;
  float win[kMaxConvHistory];
  for (int64_t k = 0; k < hist; ++k) win[k] = load_state(conv.type, conv.state, slot + k * dim + c);
  int32_t ck = 0;
  for (int64_t t = 0; t < r.n_rows; ++t) {
    const int64_t row = r.row0 + t;
    const float x = round_state(conv.type, u[row * dim + c]);
    float z = bias ? bias[c] : 0.0f;
    for (int64_t k = 0; k < hist; ++k) z = __fadd_rn(z, __fmul_rn(w[c * kernel + k], win[k]));
    z = __fadd_rn(z, __fmul_rn(w[c * kernel + hist], x));
    out[row * dim + c] = z;
    if (hist > 0) {
      for (int64_t k = 0; k + 1 < hist; ++k) win[k] = win[k + 1];
      win[hist - 1] = x;
    }
    for (; ck < r.n_ckpt && step.ckpts[r.ckpt_at + ck].pos == r.pos0 + t; ++ck) {
      const int64_t snap = static_cast<int64_t>(step.ckpts[r.ckpt_at + ck].snapshot) * conv.rows * dim;
      for (int64_t k = 0; k < hist; ++k) store_state(conv.type, conv.snapshots, snap + k * dim + c, win[k]);
    }
  }
  for (int64_t k = 0; k < hist; ++k) store_state(conv.type, conv.state, slot + k * dim + c, win[k]);
}

unsigned blocks_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

void kv_write(const DevKv& kv, const DevStep& step, const float* k, const float* v, cudaStream_t s) {
  const int64_t n = step.n_rows * kv.kv_heads * kv.head_dim;
  if (n == 0) return;
  kv_write_kernel<<<blocks_for(n, 256), 256, 0, s>>>(kv, step, k, v);
  LFM_CUDA_CHECK(cudaGetLastError());
}

void attention(const float* q, const DevKv& kv, const DevStep& step, int64_t n_heads, float scale, float* out,
               int64_t max_keys, cudaStream_t s) {
  (void)max_keys;
  LFM_CHECK(kv.head_dim <= kMaxHeadDim, "cuda: attention supports head_dim up to ", kMaxHeadDim, ", got ",
            kv.head_dim);
  if (step.n_rows == 0) return;
  attention_kernel<<<dim3(static_cast<unsigned>(step.n_rows), static_cast<unsigned>(n_heads)), kAttnThreads, 0, s>>>(
      q, kv, step, n_heads, scale, out);
  LFM_CUDA_CHECK(cudaGetLastError());
}

void short_conv(const float* u, const DevConv& conv, const DevStep& step, int64_t kernel, const float* w,
                const float* bias, float* out, cudaStream_t s) {
  LFM_CHECK(kernel >= 1 && kernel - 1 <= kMaxConvHistory, "cuda: short conv supports kernels of 1 to ",
            kMaxConvHistory + 1, " taps, got ", kernel);
  const int64_t n = static_cast<int64_t>(step.n_runs) * conv.dim;
  if (n == 0) return;
  short_conv_kernel<<<blocks_for(n, 128), 128, 0, s>>>(u, conv, step, kernel, w, bias, out);
  LFM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lfm::cuda
