// Matmul kernels: y[n, rows] = x[n, cols] · Wᵀ, W [rows, cols] as the backend keeps it (plain
// types as stored, quantized ones in the split-block layout of kernels/split_blocks.h).
//
// The vector kernel (decode and small batches): a block of 4 warps takes a few rows, each warp a
// quarter of their 256-column chunks, each lane 8 columns of a chunk, loading its 8 weights of
// each row (8 or 16 aligned bytes) and each token's 8 activations once for all the block's rows;
// quantized types multiply int8 activations with dp4a.
// The scalar kernel takes what vector loads cannot read. A row's output is each lane's in-order
// sum, the lanes' butterfly and then the warps' sums in order, so an output's value depends
// neither on n nor on the other tokens.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/block_decode.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/conv_state.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_norm.cuh"

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
  // matmul_add_rms_norm (Mode::kAddNorm): each output is added into h[t, row] instead of written
  // to y; the last block to finish takes out[t] = rms_norm(h[t]) · w (w null: no norm). done: a
  // device word that is 0 before the launch and after it.
  struct AddNorm {
    float* h = nullptr;
    const float* w = nullptr;
    float eps = 0;
    float* out = nullptr;
    unsigned* done = nullptr;
  } add;
  // matmul_gated_short_conv (Mode::kShortConv): the conv the block's channels run after their
  // projection rows are written (a decode step: every run one row).
  struct ShortConv {
    DevConv conv{};
    DevStep step{};
    int64_t kernel = 0;
    const float* taps = nullptr;
    const float* bias = nullptr;
    float* out = nullptr;
  } conv;
  bool pdl = false;    // launched with programmatic dependent launch: ask L2 for the weights before the wait
  // Points w, x, y, n and rows at this block's matmul; false when it has no rows. ONE_COLUMN
  // (gated, short conv): the one block column reads shared.w[0 ..].
  template <bool ONE_COLUMN>
  __device__ __forceinline__ bool select(const uint8_t* __restrict__& w, const float* __restrict__& x, int64_t& n,
                                         float* __restrict__& y, int64_t cols, int64_t& rows) const {
    const int g = ONE_COLUMN ? 0 : static_cast<int>(blockIdx.y);
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

// The largest |x| of the 32-value block a lane's 8 activations belong to (its 4 lanes: l ^ 1, l ^ 2).
// Called by all 32 lanes.
__device__ __forceinline__ float block_amax(const float* x) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) m = fmaxf(m, fabsf(x[i]));
  m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
  return fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
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

// A load that skips L1: memory other blocks of the kernel write (L1 is not coherent across SMs).
__device__ __forceinline__ float load_l2(const float* p) {
  LFM_TRACE_LOAD(p, 4);
  return __ldcg(p);
}

// The kAddNorm kernel's end: once every block has added its outputs into h, the last block to
// arrive normalises the n rows of h with add_rms_norm_kernel's arithmetic (row_norm.cuh): one row
// with all 128 threads, several with a warp each; then it resets the counter for the next launch.
__device__ void add_norm_in_last_block(const Groups::AddNorm& a, int64_t dim, int64_t n) {
  __shared__ unsigned arrived;
  __shared__ double partial[8];
  __threadfence();  // this block's sums in h, visible before its arrival counts
  __syncthreads();
  if (threadIdx.x == 0) arrived = atomicAdd(a.done, 1u);
  __syncthreads();
  if (arrived != gridDim.x * gridDim.y - 1) return;
  __threadfence();
  if (a.w && n == 1) {
    if (threadIdx.x == 0) LFM_TRACE_SERIAL_PASSES(2);  // the squares, then the outputs
    const float scale =
        rms_scale(sum_squares_as_256<32 * kWarpsPerBlock>([&](int64_t i) { return load_l2(a.h + i); }, dim, partial),
                  dim, a.eps);
    for (int64_t i = threadIdx.x; i < dim; i += 32 * kWarpsPerBlock) {
      LFM_TRACE_STORE(a.out + i, 4);
      a.out[i] = a.w[i] * (load_l2(a.h + i) * scale);
    }
  } else if (a.w) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) LFM_TRACE_SERIAL_PASSES(static_cast<int>(2 * ((n + kWarpsPerBlock - 1) / kWarpsPerBlock)));
    for (int64_t t = warp; t < n; t += kWarpsPerBlock) {
      const float* hr = a.h + t * dim;
      float* o = a.out + t * dim;
      const float scale =
          rms_scale(warp_sum_squares_as_256([&](int64_t i) { return load_l2(hr + i); }, dim, lane), dim, a.eps);
      for (int64_t i = lane; i < dim; i += 32) {
        LFM_TRACE_STORE(o + i, 4);
        o[i] = a.w[i] * (load_l2(hr + i) * scale);
      }
    }
  }
  if (threadIdx.x == 0) *a.done = 0;
}

// silu(g) · u, as swiglu computes it.
__device__ __forceinline__ float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// What the vector kernel does with a row's sums. kStore: y = x · Wᵀ. kSwiglu (groups.gated): the
// rows of shared.w[0] and [1], y = silu(first) · second. kAddNorm (matmul_add_rms_norm): added
// into groups.add.h, then the norm (add_norm_in_last_block). kShortConv (matmul_gated_short_conv):
// rows c, d + c and 2d + c of shared.w[0] (B, C and x of channel c) stored into y [n, 3d], then the
// block's channels run their conv (groups.conv).
enum class Mode { kStore, kSwiglu, kAddNorm, kShortConv };
__host__ __device__ constexpr int matrices_read(Mode m) { return m == Mode::kSwiglu ? 2 : m == Mode::kShortConv ? 3 : 1; }

// Where row 0 of matrix m of a vector-kernel block starts (w: the launch's matrix, or after select).
template <Mode MODE>
__device__ __forceinline__ const uint8_t* matrix_of(const uint8_t* w, const Groups& groups, int m, int64_t rows,
                                                    size_t row_bytes) {
  if constexpr (MODE == Mode::kSwiglu) return static_cast<const uint8_t*>(groups.shared.w[m]);
  else if constexpr (MODE == Mode::kShortConv) return w + static_cast<size_t>(m) * rows * row_bytes;
  else return w;
}

// The kShortConv kernel's end: its projection rows written, one thread per (token, channel) of
// the block runs the gated conv of that token's run (one row), as short_conv_decode_kernel does.
__device__ void short_conv_of_block(const Groups::ShortConv& sc, const float* proj, int64_t row0, int nr, int64_t n) {
  __syncthreads();  // the block's projection rows in y, visible to its threads
  const ConvIn in{nullptr, proj};
  for (int64_t i = threadIdx.x; i < nr * n; i += 32 * kWarpsPerBlock) {
    const int64_t t = i / nr, c = row0 + i % nr;
    const int32_t ri = sc.step.row_run[t];
    if (ri < 0) continue;
    const DevRun r = sc.step.runs[ri];
    conv_out_row(in, sc.conv, r, t, c, sc.kernel, sc.taps, sc.bias, sc.out);
    conv_state_run(in, sc.conv, sc.step, r, c, sc.kernel);
  }
}

// The vector kernel. A block of 4 warps takes R rows (of each matrix it reads) and all their
// columns: a row is cut into chunks of 256 columns, chunk c going to warp c % 4, lane l decoding
// columns 256c + 8l .. +7. Each token's 8 activations are loaded once per chunk and used for the
// R rows, so activations are read R times less than weights would have them; every load is 8 or
// 16 aligned bytes. A row's output is, per token, each lane's in-order sum over its chunks, the
// lanes' butterfly, then the 4 warps' sums added in warp order: the same bits whatever n, NT
// (1 for a single token: fewer registers), R or MODE. Quantized types take the integer path: each
// token's 8 activations quantized to int8 with their 32-value block's scale (the same codes in
// every block and launch), a lane's term fma(float(Σ codes · codes), d_w · d_x, acc) (dot8_codes).
// cols a multiple of 8 (32 for quantized types); x 16-byte aligned.
template <DType T, int NT, int R, Mode MODE>
__global__ void __launch_bounds__(128) matmul_vec_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows,
                                                         int64_t cols, const float* __restrict__ x, int64_t n,
                                                         float* __restrict__ y, Groups groups) {
  constexpr int M = matrices_read(MODE);
  constexpr bool one_column = MODE == Mode::kSwiglu || MODE == Mode::kShortConv;
  __shared__ float partial[kWarpsPerBlock][M * R][NT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  // Launched with pdl (LFM_CUDA_PDL=1) this block may start before the kernel ahead of it ends:
  // the weights no kernel writes are asked for first, everything else after the wait (expert
  // matmuls read their row counts from memory an earlier kernel wrote, so they only wait).
  if (groups.pdl && !groups.first) {
    if constexpr (one_column) {
#pragma unroll
      for (int m = 0; m < M; ++m)
        prefetch_rows<R>(matrix_of<MODE>(w, groups, m, rows, row_bytes), row_bytes,
                         MODE == Mode::kSwiglu ? groups.shared.rows[m] : rows, row0);
    } else {
      const bool shared = groups.shared.count > 0;
      const int g = static_cast<int>(blockIdx.y);
      prefetch_rows<R>(shared ? pick(groups.shared.w, g) : w, row_bytes, shared ? pick(groups.shared.rows, g) : rows,
                       row0);
    }
  }
  LFM_GRID_DEPENDENCY_WAIT();
  // Uniform over the block. Never taken by kAddNorm or kShortConv (one matrix, the grid exactly
  // over its rows or channels): kAddNorm's blocks must all arrive at its end.
  if constexpr (MODE != Mode::kShortConv)
    if (!groups.template select<one_column>(w, x, n, y, cols, rows) || row0 >= rows) return;
  const int nr = static_cast<int>(rows - row0 < R ? rows - row0 : R);
  const uint8_t* wr[M * R];  // row r of matrix m at wr[m * R + r] (rows past the end: row0's)
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const uint8_t* base = matrix_of<MODE>(w, groups, m, rows, row_bytes);
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
      if constexpr (int8_dot_v<T>) {
        // Every lane of the warp takes part (the block's amax is shared by shuffles); a lane past
        // the row's end, whose 4-lane block is past it too (cols a multiple of 32), adds nothing.
        const bool live = e < cols;
        Codes8 cw[M * R];
#pragma unroll
        for (int i = 0; i < M * R; ++i) {
          cw[i] = Codes8{make_uint2(0, 0), 0.0f, 0.0f};
          if (live && i % R < nr) cw[i] = codes8<T>(wr[i], cols, e);
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= nt) break;
          float xv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          if (live) load_x8(x0 + t * cols + e, xv);
          const ActCodes8 qx = quantize8(xv, block_amax(xv));
#pragma unroll
          for (int i = 0; i < M * R; ++i)
            if (live && i % R < nr) acc[i * NT + t] = dot8_codes<T>(acc[i * NT + t], cw[i], qx);
        }
        continue;
      }
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
        const int64_t at = (t0 + t) * rows + row0 + r;
        if constexpr (MODE == Mode::kAddNorm) {
          LFM_TRACE_STORE(&groups.add.h[at], 4);
          groups.add.h[at] = load_l2(&groups.add.h[at]) + v[0];  // add_rms_norm's h + x
        } else if constexpr (MODE == Mode::kShortConv) {
#pragma unroll
          for (int m = 0; m < M; ++m) {
            float* p = &y[(t0 + t) * M * rows + m * rows + row0 + r];  // [n, 3d]: B | C | x
            LFM_TRACE_STORE(p, 4);
            *p = v[m];
          }
        } else {
          LFM_TRACE_STORE(&y[at], 4);
          y[at] = MODE == Mode::kSwiglu ? silu_times(v[0], v[M - 1]) : v[0];
        }
      }
    }
    __syncthreads();
  }
  if constexpr (MODE == Mode::kAddNorm) add_norm_in_last_block(groups.add, rows, n);
  if constexpr (MODE == Mode::kShortConv) short_conv_of_block(groups.conv, y, row0, nr, n);
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

// Rows a vector-kernel block takes (of each matrix it reads): fewer when its registers hold more
// (8 or 16 tokens, two or three matrices).
constexpr int vec_rows(bool one_token, int matrices) {
  return one_token ? (matrices == 1 ? 4 : 2) : (matrices == 1 ? 2 : 1);
}

template <DType T, int NT, Mode MODE>
void launch_vec(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
                const Groups& groups, unsigned grid_y, cudaStream_t s) {
  constexpr int R = vec_rows(NT == 1, matrices_read(MODE));
  const dim3 grid(grid_for(rows, R), grid_y), block(32 * kWarpsPerBlock);
  Groups g = groups;
  g.pdl = pdl_requested();
  LFM_LAUNCH_PDL(g.pdl, grid, block, 0, s, matmul_vec_kernel<T, NT, R, MODE>)(w, row_bytes, rows, cols, x, n, y, g);
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
    if (one_token) launch_vec<T, 1, Mode::kSwiglu>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else if (sixteen) launch_vec<T, 2 * kTokenGroup, Mode::kSwiglu>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else launch_vec<T, kTokenGroup, Mode::kSwiglu>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
  } else {
    if (one_token) launch_vec<T, 1, Mode::kStore>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else if (sixteen) launch_vec<T, 2 * kTokenGroup, Mode::kStore>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
    else launch_vec<T, kTokenGroup, Mode::kStore>(w, row_bytes, rows, cols, x, n, y, groups, grid_y, s);
  }
}

// f(std::integral_constant<DType, T>{}) for the matmul kernels' weight types.
template <typename F>
void with_matmul_type(DType type, const char* op, F&& f) {
  switch (type) {
    case DType::F32: return f(std::integral_constant<DType, DType::F32>{});
    case DType::F16: return f(std::integral_constant<DType, DType::F16>{});
    case DType::BF16: return f(std::integral_constant<DType, DType::BF16>{});
    case DType::Q8_0: return f(std::integral_constant<DType, DType::Q8_0>{});
    case DType::Q4_0: return f(std::integral_constant<DType, DType::Q4_0>{});
    case DType::Q4_K: return f(std::integral_constant<DType, DType::Q4_K>{});
    case DType::Q5_K: return f(std::integral_constant<DType, DType::Q5_K>{});
    case DType::Q6_K: return f(std::integral_constant<DType, DType::Q6_K>{});
    default: fail("cuda: ", op, " has no kernel for ", dtype_name(type), " weights");
  }
}

void launch_matmul(DType type, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
                   bool vec, bool one_token, const Groups& groups, unsigned grid_y, cudaStream_t s) {
  with_matmul_type(type, "matmul", [&](auto t) {
    launch_typed<decltype(t)::value>(w, rows, cols, x, n, y, vec, one_token, groups, grid_y, s);
  });
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

void matmul_add_rms_norm(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* h,
                         const float* norm_w, float eps, float* out, unsigned* done, cudaStream_t s) {
  if (rows == 0) return;
  LFM_CHECK(matmul_vector_ok(type, w, cols, x) && done && (!norm_w || (out && out != h)),
            "cuda: matmul_add_rms_norm needs a matrix and input the vector kernel reads, a counter, and an output "
            "apart from the sum");
  LFM_CHECK(n >= 1 && n <= kMaxFusedNormRows, "cuda: matmul_add_rms_norm takes 1 to ", kMaxFusedNormRows,
            " tokens, got ", n);
  Groups groups;
  groups.add = Groups::AddNorm{h, norm_w, eps, out, done};
  with_matmul_type(type, "matmul_add_rms_norm", [&](auto t) {
    constexpr DType T = decltype(t)::value;
    const auto* wb = static_cast<const uint8_t*>(w);
    if (n == 1) launch_vec<T, 1, Mode::kAddNorm>(wb, device_row_bytes(type, cols), rows, cols, x, 1, nullptr, groups, 1, s);
    else launch_vec<T, kTokenGroup, Mode::kAddNorm>(wb, device_row_bytes(type, cols), rows, cols, x, n, nullptr, groups, 1, s);
  });
  LFM_CUDA_CHECK(cudaGetLastError());
}

void matmul_gated_short_conv(DType type, const void* w, int64_t dim, int64_t cols, const float* x, float* proj,
                             const DevConv& conv, const DevStep& step, int64_t kernel, const float* taps,
                             const float* bias, float* out, cudaStream_t s) {
  if (dim == 0 || step.n_rows == 0) return;
  const int64_t n = step.n_rows;
  LFM_CHECK(matmul_vector_ok(type, w, cols, x) && step.max_run_rows == 1 && conv.dim == dim && kernel >= 1 &&
                kernel - 1 <= kMaxConvHistory,
            "cuda: matmul_gated_short_conv takes decode steps (one token a sequence: ", step.max_run_rows,
            " rows in a run), a state of ", dim, " channels (", conv.dim, "), kernels of 1 to ", kMaxConvHistory + 1,
            " taps (", kernel, ") and what the vector kernel reads");
  Groups groups;
  groups.conv = Groups::ShortConv{conv, step, kernel, taps, bias, out};
  with_matmul_type(type, "matmul_gated_short_conv", [&](auto t) {
    constexpr DType T = decltype(t)::value;
    const auto* wb = static_cast<const uint8_t*>(w);
    const size_t rb = device_row_bytes(type, cols);
    if (n == 1) launch_vec<T, 1, Mode::kShortConv>(wb, rb, dim, cols, x, 1, proj, groups, 1, s);
    else if (n <= kTokenGroup) launch_vec<T, kTokenGroup, Mode::kShortConv>(wb, rb, dim, cols, x, n, proj, groups, 1, s);
    else launch_vec<T, 2 * kTokenGroup, Mode::kShortConv>(wb, rb, dim, cols, x, n, proj, groups, 1, s);
  });
  LFM_CUDA_CHECK(cudaGetLastError());
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
