// Reading and writing the state pools' stored values (F32, F16 or BF16) from kernels, and where a
// KV head's block starts (kernels/state_pools.h gives the layout).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace lfm::cuda {

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

// Value offset of KV head g's part of a block: keys there are [head_dim][block_tokens] (dim-major),
// values [block_tokens][head_dim].
__device__ __forceinline__ int64_t head_block(const DevKv& kv, int32_t block, int64_t g) {
  return (static_cast<int64_t>(block) * kv.kv_heads + g) * kv.block_tokens * kv.head_dim;
}

}  // namespace lfm::cuda
