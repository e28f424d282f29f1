// RMSNorm of one row by one thread block, in one fixed arithmetic whatever the block's size, so
// that the norm kernels (256 threads a row) and the matmul that adds its outputs into the residual
// and normalises it in its last block (128 threads) give the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"

namespace lfm::cuda {

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
#pragma unroll
  for (int v = 0; v < V; ++v) {
    ss[v] = 0;
    for (int64_t i = threadIdx.x + v * Threads; i < dim; i += 256) {
      const double e = value(i);
      ss[v] += e * e;
    }
  }
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

// The scale an RMSNorm multiplies a row by, from its sum of squares.
__device__ __forceinline__ float rms_scale(double sum_squares, int64_t dim, float eps) {
  return static_cast<float>(1.0 / sqrt(sum_squares / static_cast<double>(dim) + eps));
}

}  // namespace lfm::cuda
