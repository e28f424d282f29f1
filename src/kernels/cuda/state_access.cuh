// Reading and writing the state pools' stored values (F32, F16 or BF16) from kernels, and where a
// KV head's block starts (kernels/state_pools.h gives the layout).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"

namespace lfm::cuda {

__device__ __forceinline__ float load_state(DType type, const void* base, int64_t i) {
  LFM_TRACE_LOAD(static_cast<const char*>(base) + i * (type == DType::F32 ? 4 : 2), type == DType::F32 ? 4 : 2);
  switch (type) {
    case DType::F16: return __half2float(static_cast<const __half*>(base)[i]);
    case DType::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// Values i .. i+7 (i a multiple of 8, the pool 16-byte aligned) in one or two 16-byte loads.
__device__ __forceinline__ void load_state8(DType type, const void* base, int64_t i, float* out) {
  LFM_TRACE_LOAD(static_cast<const char*>(base) + i * (type == DType::F32 ? 4 : 2), type == DType::F32 ? 32 : 16);
  if (type == DType::F16 || type == DType::BF16) {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + i);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (type == DType::BF16) {
        out[2 * k] = __uint_as_float(w[k] << 16);
        out[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
      } else {
        out[2 * k] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] & 0xFFFFu)));
        out[2 * k + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] >> 16)));
      }
    }
  } else {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(base) + i + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
}

__device__ __forceinline__ void store_state(DType type, void* base, int64_t i, float v) {
  LFM_TRACE_STORE(static_cast<char*>(base) + i * (type == DType::F32 ? 4 : 2), type == DType::F32 ? 4 : 2);
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

// Value offset of KV head g's part of a block: keys there are [head_dim][block_tokens] (dim-major),
// values [block_tokens][head_dim].
__device__ __forceinline__ int64_t head_block(const DevKv& kv, int32_t block, int64_t g) {
  return (static_cast<int64_t>(block) * kv.kv_heads + g) * kv.block_tokens * kv.head_dim;
}

// Where packed row `row`'s key and value of KV head g go: the head's part of the block holding the
// row's position (head_block) and the position's slot t in it; false for a row that stores nothing.
// Key dim d is at base + d · block_tokens + t, value dim d at base + t · head_dim + d.
__device__ __forceinline__ bool kv_slot(const DevKv& kv, const DevStep& step, int64_t row, int64_t g, int64_t& base,
                                        int64_t& t) {
  const int32_t ri = step.row_run[row];
  if (ri < 0) return false;
  const DevRun r = step.runs[ri];
  const int64_t pos = r.pos0 + (row - r.row0);
  t = pos % kv.block_tokens;
  base = head_block(kv, step.blocks[r.blocks_at + pos / kv.block_tokens], g);
  return true;
}

}  // namespace lfm::cuda
