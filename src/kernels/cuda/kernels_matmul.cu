// Matmul kernels: y[n, rows] = x[n, cols] · Wᵀ, W [rows, cols] as stored.
//
// One warp per output row, every weight byte read once per group of 8 tokens. Plain types: each
// lane loads 8 consecutive elements (16 bytes of bf16/f16) at a time, the warp 512 contiguous
// bytes. Q8_0 and Q4_0: 8 lanes share a block, 4 blocks (136 or 72 contiguous bytes) per warp
// step. K-quants: a lane decodes one group of 32. Rows that do not allow aligned vector loads take
// the scalar kernel. Each lane sums its own elements in a fixed order and the 32 lanes meet in one
// butterfly, so an output's value depends neither on n nor on the other tokens.
#include <algorithm>

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

// Several matmuls in one launch, block column blockIdx.y choosing one. Grouped (grouped_matmul):
// expert e's rows of x and y are [first[e], first[e + 1]) and its matrix w_list[e]. Shared input
// (matmul_shared): matrix g is shared.w[g], with its own output and row count; gated
// (matmul_swiglu): one block column, the kernel reading both matrices. A plain matmul has none.
struct Groups {
  const void* const* w_list = nullptr;
  const int32_t* first = nullptr;
  SharedMatmul shared;
  bool gated = false;  // shared.w[0], shared.w[1] as gate and up; silu(gate) · up into shared.y[0]
  // Points w, x, y, n and rows at this block's matmul; false when it has no rows.
  __device__ __forceinline__ bool select(const uint8_t* __restrict__& w, const float* __restrict__& x, int64_t& n,
                                         float* __restrict__& y, int64_t cols, int64_t& rows) const {
    const int g = static_cast<int>(blockIdx.y);
    if (shared.count > 0) {
      w = static_cast<const uint8_t*>(shared.w[g]);
      y = shared.y[g];
      rows = shared.rows[g];
      return true;
    }
    if (!first) return true;
    const int64_t r0 = first[g];
    n = first[g + 1] - r0;
    if (n <= 0) return false;
    w = static_cast<const uint8_t*>(w_list[g]);
    x += r0 * cols;
    y += r0 * rows;
    return true;
  }
};

// Elements 8c .. 8c+7 of a row of a plain type (the row 16-byte aligned).
template <DType T>
__device__ __forceinline__ void load8(const uint8_t* row, int64_t c, float* w) {
  if constexpr (T == DType::F32) {
    const float4 a = reinterpret_cast<const float4*>(row)[2 * c], b = reinterpret_cast<const float4*>(row)[2 * c + 1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else {
    const uint4 v = reinterpret_cast<const uint4*>(row)[c];
    const uint32_t p[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == DType::BF16) {
        w[2 * i] = __uint_as_float(p[i] << 16);
        w[2 * i + 1] = __uint_as_float(p[i] & 0xFFFF0000u);
      } else {
        const __half2 h = *reinterpret_cast<const __half2*>(&p[i]);
        const float2 f = __half22float2(h);
        w[2 * i] = f.x, w[2 * i + 1] = f.y;
      }
    }
  }
}

// acc += w[0..n) · x[0..n), in order, x 16-byte aligned (n a multiple of 4).
template <int N>
__device__ __forceinline__ float dot_in_order(float acc, const float* w, const float* __restrict__ x) {
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    acc += w[i] * v.x;
    acc += w[i + 1] * v.y;
    acc += w[i + 2] * v.z;
    acc += w[i + 3] * v.w;
  }
  return acc;
}

// acc[t] = row wr · token t of x0 (t < nt), this lane's share: the vector kernels' arithmetic.
template <DType T, int NT>
__device__ __forceinline__ void vec_row(const uint8_t* __restrict__ wr, int64_t cols, const float* __restrict__ x0,
                                        int nt, int lane, float (&acc)[NT]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  if constexpr (is_plain_v<T>) {
#pragma unroll 8
    for (int64_t c = lane; c < cols / 8; c += 32) {
      float wv[8];
      load8<T>(wr, c, wv);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < nt) acc[t] = dot_in_order<8>(acc[t], wv, x0 + t * cols + c * 8);
    }
  } else if constexpr (T == DType::Q8_0 || T == DType::Q4_0) {
    // Lane = block (lane / 8) of the warp's 4, part (lane % 8) of it: Q8_0 elements 4p .. 4p+3;
    // Q4_0 bytes 2p, 2p+1, i.e. elements 2p, 2p+1 (low nibbles) and 2p+16, 2p+17 (high).
    const int part = lane & 7;
    constexpr int kBlockBytes = T == DType::Q8_0 ? 34 : 18;
#pragma unroll 4
    for (int64_t b = lane >> 3; b < cols / 32; b += 4) {
      const uint8_t* blk = wr + b * kBlockBytes;
      const float d = half_at(blk);
      float wv[4];
      if constexpr (T == DType::Q8_0) {
        const uint16_t* qp = reinterpret_cast<const uint16_t*>(blk + 2 + 4 * part);
        const uint32_t q = static_cast<uint32_t>(qp[0]) | (static_cast<uint32_t>(qp[1]) << 16);
#pragma unroll
        for (int i = 0; i < 4; ++i) wv[i] = d * static_cast<float>(static_cast<int8_t>((q >> (8 * i)) & 0xFF));
      } else {
        const uint16_t q = *reinterpret_cast<const uint16_t*>(blk + 2 + 2 * part);
        wv[0] = d * static_cast<float>(static_cast<int>(q & 0xF) - 8);
        wv[1] = d * static_cast<float>(static_cast<int>((q >> 8) & 0xF) - 8);
        wv[2] = d * static_cast<float>(static_cast<int>((q >> 4) & 0xF) - 8);
        wv[3] = d * static_cast<float>(static_cast<int>(q >> 12) - 8);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= nt) break;
        const float* xb = x0 + t * cols + b * 32;
        if constexpr (T == DType::Q8_0) {
          acc[t] = dot_in_order<4>(acc[t], wv, xb + 4 * part);
        } else {
          const float2 lo = *reinterpret_cast<const float2*>(xb + 2 * part);
          const float2 hi = *reinterpret_cast<const float2*>(xb + 16 + 2 * part);
          acc[t] += wv[0] * lo.x;
          acc[t] += wv[1] * lo.y;
          acc[t] += wv[2] * hi.x;
          acc[t] += wv[3] * hi.y;
        }
      }
    }
  } else {
    float wv[32];
    for (int64_t g = lane; g < cols / 32; g += 32) {
      decode_group<T>(wr, g, wv);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= nt) break;
        acc[t] += dot_in_order<32>(0.0f, wv, x0 + t * cols + g * 32);
      }
    }
  }
}

// silu(g) · u, as swiglu computes it.
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// The vector kernel: cols a multiple of 32 (8 for plain types), W's rows and x 16-byte aligned.
// NT accumulators: 1 for a single token (fewer registers, more warps in flight), else 8; a token's
// arithmetic is the same either way. Gated (groups.gated): the warp also takes the row of the
// second matrix and writes silu(first) · second.
template <DType T, int NT>
__global__ void __launch_bounds__(128) matmul_vec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                                  const float* __restrict__ x, int64_t n, float* __restrict__ y, Groups groups) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (!groups.select(w, x, n, y, cols, rows) || row >= rows) return;
  const uint8_t* wr = w + static_cast<size_t>(row) * row_bytes;
  const uint8_t* wu = groups.gated ? static_cast<const uint8_t*>(groups.shared.w[1]) + static_cast<size_t>(row) * row_bytes : nullptr;
  for (int64_t t0 = 0; t0 < n; t0 += NT) {
    const int nt = static_cast<int>(n - t0 < NT ? n - t0 : NT);
    const float* x0 = x + t0 * cols;
    float acc[NT];
    vec_row<T, NT>(wr, cols, x0, nt, lane, acc);
    if (wu) {
      float up[NT];
      vec_row<T, NT>(wu, cols, x0, nt, lane, up);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float g = warp_sum(acc[t]), u = warp_sum(up[t]);
        if (lane == 0 && t < nt) y[(t0 + t) * rows + row] = silu_times(g, u);
      }
      continue;
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = warp_sum(acc[t]);
      if (lane == 0 && t < nt) y[(t0 + t) * rows + row] = s;
    }
  }
}

template <DType T>
__global__ void matmul_scalar_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                              const float* __restrict__ x, int64_t n, float* __restrict__ y, Groups groups) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (!groups.select(w, x, n, y, cols, rows) || row >= rows) return;
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

namespace {

size_t weight_row_bytes(DType type, int64_t cols) {
  return static_cast<size_t>(cols / block_elems(type)) * static_cast<size_t>(block_bytes(type));
}

// Launches the kernel for `type`: the vector one (1 or 8 accumulators) or the scalar one.
void launch_matmul(DType type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
                   bool vec, bool one_token, Groups groups, dim3 grid, cudaStream_t s) {
  const size_t row_bytes = weight_row_bytes(type, cols);
  const dim3 block(32 * kWarpsPerBlock);
#define LFM_MATMUL_CASE(T)                                                                          \
  case T:                                                                                          \
    if (vec && one_token)                                                                          \
      matmul_vec_kernel<T, 1><<<grid, block, 0, s>>>(w, row_bytes, rows, cols, x, n, y, groups);   \
    else if (vec)                                                                                  \
      matmul_vec_kernel<T, kTokenGroup><<<grid, block, 0, s>>>(w, row_bytes, rows, cols, x, n, y, groups); \
    else                                                                                           \
      matmul_scalar_kernel<T><<<grid, block, 0, s>>>(w, row_bytes, rows, cols, x, n, y, groups);   \
    break;
  switch (type) {
    LFM_MATMUL_CASE(DType::F32)
    LFM_MATMUL_CASE(DType::F16)
    LFM_MATMUL_CASE(DType::BF16)
    LFM_MATMUL_CASE(DType::Q8_0)
    LFM_MATMUL_CASE(DType::Q4_0)
    LFM_MATMUL_CASE(DType::Q4_K)
    LFM_MATMUL_CASE(DType::Q5_K)
    LFM_MATMUL_CASE(DType::Q6_K)
    default: fail("cuda: matmul has no kernel for ", dtype_name(type), " weights");
  }
#undef LFM_MATMUL_CASE
  LFM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// Vector loads need 16-byte aligned rows of W and x: whole groups of 32 (8 for plain types).
bool matmul_vector_ok(DType type, const void* w, int64_t cols, const float* x) {
  const bool plain = type == DType::F32 || type == DType::F16 || type == DType::BF16;
  return cols % (plain ? 8 : 32) == 0 && weight_row_bytes(type, cols) % (plain ? 16 : 2) == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void matmul(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
            cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  launch_matmul(type, static_cast<const uint8_t*>(w), rows, cols, x, n, y, matmul_vector_ok(type, w, cols, x), n == 1,
                Groups{}, dim3(grid_for(rows, kWarpsPerBlock)), s);
}

void matmul_shared(DType type, const SharedMatmul& m, int64_t cols, const float* x, int64_t n, bool vec, cudaStream_t s) {
  if (n == 0 || m.count == 0) return;
  LFM_CHECK(m.count <= kMaxSharedMatmuls, "cuda: matmul_shared takes up to ", kMaxSharedMatmuls, " matrices, got ",
            m.count);
  int64_t max_rows = 0;
  for (int g = 0; g < m.count; ++g) max_rows = std::max(max_rows, m.rows[g]);
  Groups groups;
  groups.shared = m;
  launch_matmul(type, nullptr, max_rows, cols, x, n, nullptr, vec, n == 1, groups,
                dim3(grid_for(max_rows, kWarpsPerBlock), static_cast<unsigned>(m.count)), s);
}

void matmul_swiglu(DType type, const void* w1, const void* w3, int64_t rows, int64_t cols, const float* x, int64_t n,
                   float* out, cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  LFM_CHECK(matmul_vector_ok(type, w1, cols, x) && matmul_vector_ok(type, w3, cols, x),
            "cuda: matmul_swiglu needs matrices and input the vector kernel can read");
  Groups groups;
  groups.shared.count = 2;
  groups.shared.w[0] = w1, groups.shared.w[1] = w3;
  groups.shared.y[0] = out;
  groups.shared.rows[0] = groups.shared.rows[1] = rows;
  groups.gated = true;
  launch_matmul(type, nullptr, rows, cols, x, n, nullptr, true, n == 1, groups, dim3(grid_for(rows, kWarpsPerBlock)), s);
}

void grouped_matmul(DType type, const void* const* w_list, int64_t n_experts, int64_t rows, int64_t cols,
                    const float* x, const int32_t* first, float* y, bool vec, cudaStream_t s) {
  if (rows == 0 || n_experts == 0) return;
  // n is read per expert; the 8-accumulator kernel serves any count with the same arithmetic.
  Groups groups;
  groups.w_list = w_list;
  groups.first = first;
  launch_matmul(type, nullptr, rows, cols, x, 0, y, vec, false, groups,
                dim3(grid_for(rows, kWarpsPerBlock), static_cast<unsigned>(n_experts)), s);
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
