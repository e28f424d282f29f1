// Matmul kernels: y[n, rows] = x[n, cols] · Wᵀ, W [rows, cols] as stored.
//
// One warp per output row. Plain types: lanes stride over the columns (coalesced reads of W and
// x). Quantized types: lanes take the row's groups of 32 elements in turn, decode one and use it
// for every token. Tokens go in groups of 8 accumulators; each accumulator is reduced by the same
// butterfly, so an output's value does not depend on n or on the other tokens.
#include "kernels/cuda/block_decode.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace lfm::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kTokenGroup = 8;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <DType T>
__global__ void matmul_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                              const float* __restrict__ x, int64_t n, float* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
  for (int64_t t0 = 0; t0 < n; t0 += kTokenGroup) {
    const int nt = static_cast<int>(n - t0 < kTokenGroup ? n - t0 : kTokenGroup);
    float acc[kTokenGroup];
#pragma unroll
    for (int t = 0; t < kTokenGroup; ++t) acc[t] = 0.0f;
    if constexpr (is_plain_v<T>) {
      for (int64_t c = lane; c < cols; c += 32) {
        const float wv = plain_at<T>(wr, c);
#pragma unroll
        for (int t = 0; t < kTokenGroup; ++t)
          if (t < nt) acc[t] += wv * x[(t0 + t) * cols + c];
      }
    } else {
      float wv[32];
      for (int64_t g = lane; g < cols / 32; g += 32) {
        decode_group<T>(wr, g, wv);
#pragma unroll
        for (int t = 0; t < kTokenGroup; ++t) {
          if (t >= nt) break;
          const float* xt = x + (t0 + t) * cols + g * 32;
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < 32; ++i) s += wv[i] * xt[i];
          acc[t] += s;
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTokenGroup; ++t) {
      const float s = warp_sum(acc[t]);
      if (lane == 0 && t < nt) y[(t0 + t) * rows + row] = s;
    }
  }
}

template <DType T>
__global__ void dequantize_bf16_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                                       __nv_bfloat16* __restrict__ out) {
  const int64_t groups = cols / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * groups) return;
  const int64_t r = i / groups, g = i % groups;
  float wv[32];
  decode_group<T>(w + static_cast<size_t>(r) * row_bytes, g, wv);
  __nv_bfloat16* o = out + r * cols + g * 32;
#pragma unroll
  for (int k = 0; k < 32; ++k) o[k] = __float2bfloat16_rn(wv[k]);
}

template <DType T>
__global__ void plain_to_bf16_kernel(const uint8_t* __restrict__ w, int64_t count, __nv_bfloat16* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = __float2bfloat16_rn(plain_at<T>(w, i));
}

__global__ void to_f16_kernel(const float* __restrict__ x, int64_t n, __half* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2half_rn(x[i]);
}

__global__ void to_bf16_kernel(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16_rn(x[i]);
}

unsigned grid_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

void matmul(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
            cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  const size_t row_bytes = static_cast<size_t>(cols / block_elems(type)) * static_cast<size_t>(block_bytes(type));
  const auto* wb = static_cast<const uint8_t*>(w);
  const dim3 grid(grid_for(rows, kWarpsPerBlock)), block(32 * kWarpsPerBlock);
  switch (type) {
    case DType::F32: matmul_kernel<DType::F32><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    case DType::F16: matmul_kernel<DType::F16><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    case DType::BF16: matmul_kernel<DType::BF16><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    case DType::Q8_0: matmul_kernel<DType::Q8_0><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    case DType::Q4_0: matmul_kernel<DType::Q4_0><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    case DType::Q4_K: matmul_kernel<DType::Q4_K><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    case DType::Q5_K: matmul_kernel<DType::Q5_K><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    case DType::Q6_K: matmul_kernel<DType::Q6_K><<<grid, block, 0, s>>>(wb, row_bytes, rows, cols, x, n, y); break;
    default: fail("cuda: matmul has no kernel for ", dtype_name(type), " weights");
  }
  LFM_CUDA_CHECK(cudaGetLastError());
}

void dequantize_to_bf16(DType type, const void* w, int64_t rows, int64_t cols, uint16_t* out, cudaStream_t s) {
  const size_t row_bytes = static_cast<size_t>(cols / block_elems(type)) * static_cast<size_t>(block_bytes(type));
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  const int64_t groups = rows * (cols / 32), count = rows * cols;
  switch (type) {
    case DType::F32: plain_to_bf16_kernel<DType::F32><<<grid_for(count, 256), 256, 0, s>>>(wb, count, o); break;
    case DType::F16: plain_to_bf16_kernel<DType::F16><<<grid_for(count, 256), 256, 0, s>>>(wb, count, o); break;
    case DType::BF16: plain_to_bf16_kernel<DType::BF16><<<grid_for(count, 256), 256, 0, s>>>(wb, count, o); break;
    case DType::Q8_0: dequantize_bf16_kernel<DType::Q8_0><<<grid_for(groups, 128), 128, 0, s>>>(wb, row_bytes, rows, cols, o); break;
    case DType::Q4_0: dequantize_bf16_kernel<DType::Q4_0><<<grid_for(groups, 128), 128, 0, s>>>(wb, row_bytes, rows, cols, o); break;
    case DType::Q4_K: dequantize_bf16_kernel<DType::Q4_K><<<grid_for(groups, 128), 128, 0, s>>>(wb, row_bytes, rows, cols, o); break;
    case DType::Q5_K: dequantize_bf16_kernel<DType::Q5_K><<<grid_for(groups, 128), 128, 0, s>>>(wb, row_bytes, rows, cols, o); break;
    case DType::Q6_K: dequantize_bf16_kernel<DType::Q6_K><<<grid_for(groups, 128), 128, 0, s>>>(wb, row_bytes, rows, cols, o); break;
    default: fail("cuda: no bf16 decoder for ", dtype_name(type), " weights");
  }
  LFM_CUDA_CHECK(cudaGetLastError());
}

void to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, reinterpret_cast<__nv_bfloat16*>(out));
  LFM_CUDA_CHECK(cudaGetLastError());
}

void to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  if (n == 0) return;
  to_f16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, reinterpret_cast<__half*>(out));
  LFM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lfm::cuda
