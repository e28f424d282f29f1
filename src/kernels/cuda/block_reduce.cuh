// Reductions over a warp and over one thread block in a fixed order (butterfly within each warp,
// then the warps' results in order), so every thread gets the same value whatever the data's
// neighbours.
#pragma once

namespace lfm::cuda {

struct SumOp {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Op over a full warp's 32 values, combined in a butterfly: every lane does the same operations
// in the same order, so every lane gets the same bits. The CUDA emulator (tests/cuda_emu) does
// exactly these operations in one warp exchange instead of five.
template <typename V, typename Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
#ifdef LFM_CUDA_EMULATED
  return lfm_emu_warp_reduce(v, op);
#else
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#endif
}

// warp_reduce of each of N values (v[0 .. N)), in turn. The emulator exchanges all N at once.
template <int N, typename V, typename Op>
__device__ __forceinline__ void warp_reduce_each(V* v, Op op) {
#ifdef LFM_CUDA_EMULATED
  lfm_emu_warp_reduce_each<N>(v, op);
#else
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = warp_reduce(v[i], op);
#endif
}

// `shared` holds Threads / 32 values; the block must have exactly Threads threads.
template <int Threads, typename V, typename Op>
__device__ V block_reduce(V v, V* shared, Op op) {
  v = warp_reduce(v, op);
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
  __syncthreads();
  V r = shared[0];
#pragma unroll
  for (int w = 1; w < Threads / 32; ++w) r = op(r, shared[w]);
  __syncthreads();  // shared may be reused at once
  return r;
}

}  // namespace lfm::cuda
