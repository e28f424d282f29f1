// RMSNorm of one row by one thread block or one warp, in one fixed arithmetic whatever the block's
// size, so that the norm kernels (256 threads a row) and the matmul that adds its outputs into the
// residual and normalises it in its last block (128 threads a row, or a warp a row) give the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"

namespace lfm::cuda {

// Thread j of 256 summing value(i)² over i ≡ j (mod 256) in order, for the V threads j = first +
// v · step (v = 0 .. V) that one real thread stands in for.
template <int V, typename Value>
__device__ __forceinline__ void sums_as_256(Value value, int64_t dim, int first, int step, double* ss) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    ss[v] = 0;
    for (int64_t i = first + v * step; i < dim; i += 256) {
      const double e = value(i);
      ss[v] += e * e;
    }
  }
}

// Σ value(i)² over i in [0, dim), in double, as 256 threads sum it: thread j takes i ≡ j (mod 256)
// in order, each warp's 32 sums meet in block_reduce's butterfly, then the 8 warps' sums add in
// order. A block of Threads (128 or 256) threads gets the same bits, each thread standing in for
// threads j, j + Threads, ... of the 256. value(i) may have side effects (add_rms_norm stores the
// sum it squares); each i is visited once. `partial` holds 8 doubles.
template <int Threads, typename Value>
__device__ __forceinline__ double sum_squares_as_256(Value value, int64_t dim, double* partial) {
  static_assert(Threads >= 32 && Threads <= 256 && 256 % Threads == 0, "a whole number of blocks of 256");
  constexpr int V = 256 / Threads;  // the 256 threads' sums each thread keeps
  double ss[V];
  sums_as_256<V>(value, dim, static_cast<int>(threadIdx.x), Threads, ss);
  warp_reduce_each<V>(ss, SumOp());
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int v = 0; v < V; ++v) partial[(threadIdx.x >> 5) + v * (Threads / 32)] = ss[v];
  }
  __syncthreads();
  double r = partial[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) r += partial[w];
  __syncthreads();  // partial may be reused at once
  return r;
}

// The same sum from one warp (every lane gets it): lane l stands in for lane l of each of the 256
// threads' 8 warps (threads l + 32 v), one warp after the other: its sum, that warp's butterfly,
// added in order. One double at a time, so the kernel that ends with it keeps its registers.
template <typename Value>
__device__ __forceinline__ double warp_sum_squares_as_256(Value value, int64_t dim, int lane) {
  double r = 0;
#pragma unroll 1
  for (int v = 0; v < 8; ++v) {
    double ss;
    sums_as_256<1>(value, dim, lane + 32 * v, 0, &ss);
    ss = warp_reduce(ss, SumOp());
    r = v == 0 ? ss : r + ss;
  }
  return r;
}

// The scale an RMSNorm multiplies a row by, from its sum of squares.
__device__ __forceinline__ float rms_scale(double sum_squares, int64_t dim, float eps) {
  return static_cast<float>(1.0 / sqrt(sum_squares / static_cast<double>(dim) + eps));
}

}  // namespace lfm::cuda
