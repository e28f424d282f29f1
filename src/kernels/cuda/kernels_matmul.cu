// Matmul kernels: y[n, rows] = x[n, cols] · Wᵀ, W [rows, cols] as the backend keeps it (plain
// types as stored, quantized ones in the split-block layout of kernels/split_blocks.h).
//
// The vector kernel (decode and small batches): a block of 4 warps takes a few rows, each warp a
// quarter of their 256-column chunks, each lane 8 columns of a chunk, loading its 8 weights of
// each row (8 or 16 aligned bytes) and each token's 8 activations once for all the block's rows.
// The scalar kernel takes what vector loads cannot read. A row's output is each lane's in-order
// sum, the lanes' butterfly and then the warps' sums in order, so an output's value depends
// neither on n nor on the other tokens.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/block_decode.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"

namespace lfm::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kTokenGroup = 8;

// a[g] for a kernel parameter's array: indexing it with a run-time g makes every thread copy
// the parameters to local memory first (a 128-byte stack frame); selects keep them in the
// constant bank.
template <typename T>
__device__ __forceinline__ T pick(const T (&a)[kMaxSharedMatmuls], int g) {
  T v = a[0];
#pragma unroll
  for (int i = 1; i < kMaxSharedMatmuls; ++i)
    if (g == i) v = a[i];
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
  bool pdl = false;    // launched with programmatic dependent launch: ask L2 for the weights before the wait
  // Points w, x, y, n and rows at this block's matmul; false when it has no rows. GATED: the
  // one block column reads shared.w[0] and [1].
  template <bool GATED>
  __device__ __forceinline__ bool select(const uint8_t* __restrict__& w, const float* __restrict__& x, int64_t& n,
                                         float* __restrict__& y, int64_t cols, int64_t& rows) const {
    const int g = GATED ? 0 : static_cast<int>(blockIdx.y);
    if (shared.count > 0) {
      w = static_cast<const uint8_t*>(pick(shared.w, g));
      y = pick(shared.y, g);
      rows = pick(shared.rows, g);
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

// acc + w[0..8) · x[0..8), in order.
__device__ __forceinline__ float dot8(float acc, const float* w, const float* x) {
#pragma unroll
  for (int i = 0; i < 8; ++i) acc += w[i] * x[i];
  return acc;
}

// x[0..8) from 16-byte aligned memory.
__device__ __forceinline__ void load_x8(const float* __restrict__ p, float* x) {
  LFM_TRACE_LOAD(p, 32);
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}

// Asks L2 for rows [row0, row0 + R) of w (contiguous, row_bytes each) from one thread, where
// the span's address and size allow the bulk prefetch.
template <int R>
__device__ __forceinline__ void prefetch_rows(const void* w, size_t row_bytes, int64_t rows, int64_t row0) {
  if (threadIdx.x != 0 || row0 >= rows) return;
  const size_t bytes = static_cast<size_t>(rows - row0 < R ? rows - row0 : R) * row_bytes;
  const uint8_t* p = static_cast<const uint8_t*>(w) + static_cast<size_t>(row0) * row_bytes;
  if ((reinterpret_cast<uintptr_t>(p) | bytes) % 16 == 0 && bytes < (size_t{1} << 31)) LFM_PREFETCH_L2(p, bytes);
}

// silu(g) · u, as swiglu computes it.
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// The vector kernel. A block of 4 warps takes R rows (of both matrices when gated) and all their
// columns: a row is cut into chunks of 256 columns, chunk c going to warp c % 4, lane l decoding
// columns 256c + 8l .. +7. Each token's 8 activations are loaded once per chunk and used for the
// R rows, so activations are read R times less than weights would have them; every load is 8 or
// 16 aligned bytes. A row's output is, per token, each lane's in-order sum over its chunks, the
// lanes' butterfly, then the 4 warps' sums added in warp order: the same bits whatever n, NT
// (1 for a single token: fewer registers) or R. cols a multiple of 8 (32 for quantized types);
// x 16-byte aligned. Gated (groups.gated): the rows of shared.w[1] too, out = silu(first) · second.
template <DType T, int NT, int R, bool GATED>
__global__ void __launch_bounds__(128) matmul_vec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows,
                                                         int64_t cols, const float* __restrict__ x, int64_t n,
                                                         float* __restrict__ y, Groups groups) {
  constexpr int M = GATED ? 2 : 1;  // matrices read
  __shared__ float partial[kWarpsPerBlock][M * R][NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  // Launched with pdl (LFM_CUDA_PDL=1) this block may start before the kernel ahead of it ends:
  // the weights no kernel writes are asked for first, everything else after the wait (expert
  // matmuls read their row counts from memory an earlier kernel wrote, so they only wait).
  if (groups.pdl && !groups.first) {
    const bool shared = groups.shared.count > 0;
    const int g = GATED ? 0 : static_cast<int>(blockIdx.y);
    prefetch_rows<R>(shared ? pick(groups.shared.w, g) : w, row_bytes, shared ? pick(groups.shared.rows, g) : rows,
                     row0);
    if constexpr (GATED) prefetch_rows<R>(groups.shared.w[1], row_bytes, groups.shared.rows[1], row0);
  }
  LFM_GRID_DEPENDENCY_WAIT();
  if (!groups.template select<GATED>(w, x, n, y, cols, rows) || row0 >= rows) return;  // uniform over the block
  const int nr = static_cast<int>(rows - row0 < R ? rows - row0 : R);
  const uint8_t* wr[M * R];  // row r of matrix m at wr[m * R + r] (rows past the end: row0's)
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const uint8_t* base = m == 0 ? w : static_cast<const uint8_t*>(groups.shared.w[1]);
#pragma unroll
    for (int r = 0; r < R; ++r) wr[m * R + r] = base + static_cast<size_t>(row0 + (r < nr ? r : 0)) * row_bytes;
  }
  for (int64_t t0 = 0; t0 < n; t0 += NT) {
    const int nt = static_cast<int>(n - t0 < NT ? n - t0 : NT);
    const float* x0 = x + t0 * cols;
    float acc[M * R * NT];  // [M · R][NT]
#pragma unroll
    for (int i = 0; i < M * R * NT; ++i) acc[i] = 0.0f;
#pragma unroll 2
    for (int64_t c = warp; c * 256 < cols; c += kWarpsPerBlock) {
      const int64_t e = c * 256 + lane * 8;
      if (e >= cols) continue;
      float wv[M * R][8];
#pragma unroll
      for (int i = 0; i < M * R; ++i)
        if (i % R < nr) decode8<T>(wr[i], cols, e, wv[i]);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t >= nt) break;
        float xv[8];
        load_x8(x0 + t * cols + e, xv);
#pragma unroll
        for (int i = 0; i < M * R; ++i)
          if (i % R < nr) acc[i * NT + t] = dot8(acc[i * NT + t], wv[i], xv);
      }
    }
    warp_reduce_each<M * R * NT>(acc, SumOp{});
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < M * R; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t) partial[warp][i][t] = acc[i * NT + t];
    }
    __syncthreads();
    if (threadIdx.x < R * NT) {
      const int r = static_cast<int>(threadIdx.x) / NT, t = static_cast<int>(threadIdx.x) % NT;
      if (r < nr && t < nt) {
        float v[M];
#pragma unroll
        for (int m = 0; m < M; ++m) {
          v[m] = partial[0][m * R + r][t];
#pragma unroll
          for (int k = 1; k < kWarpsPerBlock; ++k) v[m] += partial[k][m * R + r][t];
        }
        LFM_TRACE_STORE(&y[(t0 + t) * rows + row0 + r], 4);
        y[(t0 + t) * rows + row0 + r] = GATED ? silu_times(v[0], v[M - 1]) : v[0];
      }
    }
    __syncthreads();
  }
}

// The kernel for what the vector one cannot read: x not 16-byte aligned, or a plain type's cols
// not a multiple of 8. One warp per row, tokens in groups of 8; a token's sum does not depend on n.
template <DType T>
__global__ void matmul_scalar_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                              const float* __restrict__ x, int64_t n, float* __restrict__ y, Groups groups) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (!groups.template select<false>(w, x, n, y, cols, rows) || row >= rows) return;
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
      for (int64_t e = 8 * lane; e < cols; e += 256) {
        float wv[8];
        decode8<T>(wr, cols, e, wv);
#pragma unroll
        for (int t = 0; t < kTokenGroup; ++t)
          if (t < nt) acc[t] = dot8(acc[t], wv, x + (t0 + t) * cols + e);
      }
    }
    warp_reduce_each<kTokenGroup>(acc, SumOp{});
#pragma unroll
    for (int t = 0; t < kTokenGroup; ++t)
      if (lane == 0 && t < nt) y[(t0 + t) * rows + row] = acc[t];
  }
}

// One thread per 8 elements of a quantized matrix (block column blockIdx.x is its row), stored
// as one 16-byte write.
template <DType T>
__global__ void dequantize_bf16_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t cols,
                                       __nv_bfloat16* __restrict__ out) {
  const int64_t r = blockIdx.x, e = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 8;
  if (e >= cols) return;
  float wv[8];
  decode8<T>(w + static_cast<size_t>(r) * row_bytes, cols, e, wv);
  uint32_t packed[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(wv[2 * k], wv[2 * k + 1]);  // .x the lower address
    memcpy(&packed[k], &pair, 4);
  }
  *reinterpret_cast<uint4*>(out + r * cols + e) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
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

// Whether the vector kernel is launched with programmatic dependent launch (set_pdl_launches).
std::atomic<bool> g_pdl{false};
bool pdl_requested() { return g_pdl.load(std::memory_order_relaxed); }

// Rows a vector-kernel block takes: fewer when its registers hold more (8 or 16 tokens, two matrices).
constexpr int vec_rows(bool one_token, bool gated) { return one_token ? (gated ? 2 : 4) : (gated ? 1 : 2); }

template <DType T, int NT, bool GATED>
void launch_vec(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
                const Groups& groups, unsigned grid_y, cudaStream_t s) {
  constexpr int R = vec_rows(NT == 1, GATED);
  const dim3 grid(grid_for(rows, R), grid_y), block(32 * kWarpsPerBlock);
  Groups g = groups;
  g.pdl = pdl_requested();
  LFM_LAUNCH_PDL(g.pdl, grid, block, 0, s, matmul_vec_kernel<T, NT, R, GATED>)(w, row_bytes, rows, cols, x, n, y, g);
}

// Launches the kernel for `type`: the vector one (one, 8 or 16 tokens at a time, gated or not)
// or the scalar one, over `rows` rows (the most of any group's) and grid_y groups. n: the tokens
// (0 when each group reads its own count on the device: 8 at a time then). Each weight is decoded
// once per pass of tokens, so a speculative verification of 9-16 tokens takes one pass, not two.
template <DType T>
void launch_typed(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, bool vec,
                  bool one_token, const Groups& groups, unsigned grid_y, cudaStream_t s) {
  const bool sixteen = !one_token && n > kTokenGroup;
  const size_t row_bytes = device_row_bytes(T, cols);
  if (!vec) {
    LFM_CHECK(!groups.gated, "cuda: the gated matmul needs what the vector kernel reads");
    const dim3 grid(grid_for(rows, kWarpsPerBlock), grid_y), block(32 * kWarpsPerBlock);
    LFM_LAUNCH(grid, block, 0, s, matmul_scalar_kernel<T>)(w, row_bytes, rows, cols, x, n, y, groups);
  } else if (groups.gated) {
    if (one_token) launch_vec<T, 1, true>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else if (sixteen) launch_vec<T, 2 * kTokenGroup, true>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else launch_vec<T, kTokenGroup, true>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
  } else {
    if (one_token) launch_vec<T, 1, false>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else if (sixteen) launch_vec<T, 2 * kTokenGroup, false>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else launch_vec<T, kTokenGroup, false>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
  }
}

void launch_matmul(DType type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
                   bool vec, bool one_token, const Groups& groups, unsigned grid_y, cudaStream_t s) {
  switch (type) {
    case DType::F32: launch_typed<DType::F32>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    case DType::F16: launch_typed<DType::F16>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    case DType::BF16: launch_typed<DType::BF16>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    case DType::Q8_0: launch_typed<DType::Q8_0>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    case DType::Q4_0: launch_typed<DType::Q4_0>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    case DType::Q4_K: launch_typed<DType::Q4_K>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    case DType::Q5_K: launch_typed<DType::Q5_K>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    case DType::Q6_K: launch_typed<DType::Q6_K>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s); break;
    default: fail("cuda: matmul has no kernel for ", dtype_name(type), " weights");
  }
  LFM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// LFM_CUDA_GEMV=scalar sends what the vector kernel would take to the scalar kernel (one warp a
// row, as before the vector kernel's blocks of rows): a check that isolates the vector kernel.
bool scalar_matmuls_forced() {
  static const bool forced = [] {
    const char* env = std::getenv("LFM_CUDA_GEMV");
    return env && std::strcmp(env, "scalar") == 0;
  }();
  return forced;
}

// Vector loads need 16-byte aligned rows of W and x and a whole number of 8-column units
// (quantized rows are whole blocks, their device rows 16-byte multiples: kernels/split_blocks.h).
bool matmul_vector_ok(DType type, const void* w, int64_t cols, const float* x) {
  return !scalar_matmuls_forced() && cols % 8 == 0 && device_row_bytes(type, cols) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void set_pdl_launches(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

void matmul(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
            cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  launch_matmul(type, static_cast<const uint8_t*>(w), rows, cols, x, n, y, matmul_vector_ok(type, w, cols, x), n == 1,
                Groups{}, 1, s);
}

void matmul_shared(DType type, const SharedMatmul& m, int64_t cols, const float* x, int64_t n, bool vec, cudaStream_t s) {
  if (n == 0 || m.count == 0) return;
  LFM_CHECK(m.count <= kMaxSharedMatmuls, "cuda: matmul_shared takes up to ", kMaxSharedMatmuls, " matrices, got ",
            m.count);
  int64_t max_rows = 0;
  for (int g = 0; g < m.count; ++g) max_rows = std::max(max_rows, m.rows[g]);
  Groups groups;
  groups.shared = m;
  launch_matmul(type, nullptr, max_rows, cols, x, n, nullptr, vec, n == 1, groups, static_cast<unsigned>(m.count), s);
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
  launch_matmul(type, nullptr, rows, cols, x, n, nullptr, true, n == 1, groups, 1, s);
}

void grouped_matmul(DType type, const void* const* w_list, int64_t n_experts, int64_t rows, int64_t cols,
                    const float* x, const int32_t* first, float* y, bool vec, cudaStream_t s) {
  if (rows == 0 || n_experts == 0) return;
  // n is read per expert; the 8-accumulator kernel serves any count with the same arithmetic.
  Groups groups;
  groups.w_list = w_list;
  groups.first = first;
  launch_matmul(type, nullptr, rows, cols, x, 0, y, vec, false, groups, static_cast<unsigned>(n_experts), s);
}

void dequantize_to_bf16(DType type, const void* w, int64_t rows, int64_t cols, uint16_t* out, cudaStream_t s) {
  const size_t row_bytes = device_row_bytes(type, cols);
  const auto* wb = static_cast<const uint8_t*>(w);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  if (rows == 0 || cols == 0) return;
  const int64_t count = rows * cols;
  // Rows in x (up to 2^31 - 1), each row's 8-element units in y: no division in the kernel.
  LFM_CHECK(cols % 8 == 0 && rows < (int64_t{1} << 31), "cuda: cannot decode a ", rows, " x ", cols, " matrix to bf16");
  const dim3 units(static_cast<unsigned>(rows), grid_for(cols / 8, 128));
  switch (type) {
    case DType::F32: LFM_LAUNCH(grid_for(count, 256), 256, 0, s, plain_to_bf16_kernel<DType::F32>)(wb, count, o); break;
    case DType::F16: LFM_LAUNCH(grid_for(count, 256), 256, 0, s, plain_to_bf16_kernel<DType::F16>)(wb, count, o); break;
    case DType::BF16: LFM_LAUNCH(grid_for(count, 256), 256, 0, s, plain_to_bf16_kernel<DType::BF16>)(wb, count, o); break;
    case DType::Q8_0: LFM_LAUNCH(units, 128, 0, s, dequantize_bf16_kernel<DType::Q8_0>)(wb, row_bytes, cols, o); break;
    case DType::Q4_0: LFM_LAUNCH(units, 128, 0, s, dequantize_bf16_kernel<DType::Q4_0>)(wb, row_bytes, cols, o); break;
    case DType::Q4_K: LFM_LAUNCH(units, 128, 0, s, dequantize_bf16_kernel<DType::Q4_K>)(wb, row_bytes, cols, o); break;
    case DType::Q5_K: LFM_LAUNCH(units, 128, 0, s, dequantize_bf16_kernel<DType::Q5_K>)(wb, row_bytes, cols, o); break;
    case DType::Q6_K: LFM_LAUNCH(units, 128, 0, s, dequantize_bf16_kernel<DType::Q6_K>)(wb, row_bytes, cols, o); break;
    default: fail("cuda: no bf16 decoder for ", dtype_name(type), " weights");
  }
  LFM_CUDA_CHECK(cudaGetLastError());
}

void to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  if (n == 0) return;
  LFM_LAUNCH(grid_for(n, 256), 256, 0, s, to_bf16_kernel)(x, n, reinterpret_cast<__nv_bfloat16*>(out));
  LFM_CUDA_CHECK(cudaGetLastError());
}

void to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t s) {
  if (n == 0) return;
  LFM_LAUNCH(grid_for(n, 256), 256, 0, s, to_f16_kernel)(x, n, reinterpret_cast<__half*>(out));
  LFM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lfm::cuda
