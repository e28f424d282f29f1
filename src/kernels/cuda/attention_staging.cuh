// What both paged-attention kernels (kernels_attention.cu on the CUDA cores, kernels_attention_tc.cu
// on the tensor cores) share: the first key a row sees, and staging one chunk of a split's keys
// and values from the paged pool into shared memory.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/state_access.cuh"

namespace lfm::cuda {

constexpr int kAttnChunk = 64;  // key positions staged at once

// The first key a row whose keys end at `end` sees: end − window with a sliding window, else 0.
__host__ __device__ __forceinline__ int64_t first_key(int64_t end, int64_t window) {
  return window > 0 && end > window ? end - window : 0;
}

// What a block of either kernel covers: `tile` (its rows of one run), KV head blockIdx.y (its G
// query heads), split blockIdx.z (keys key0 .. key0 + kAttnSplitKeys), and the keys of that split
// it reads.
struct AttnBlock {
  DevTile tile;
  DevRun run;
  int g, G;
  int64_t key0;
  int64_t first_keys;  // keys of the tile's first row (its position + 1)
  int64_t tile_lo;     // the first row's first key (its window's start)
  int64_t key_end;     // the split's keys end here for this tile (its last row's keys, at most)
  bool empty;          // no row of the tile has a key in this split
};
__device__ __forceinline__ AttnBlock attn_block(const DevKv& kv, const DevStep& step, const DevTile& tile, int n_heads,
                                                int64_t window) {
  AttnBlock b;
  b.tile = tile;
  b.run = step.runs[b.tile.run];
  b.g = static_cast<int>(blockIdx.y);
  b.G = n_heads / static_cast<int>(kv.kv_heads);
  b.key0 = static_cast<int64_t>(blockIdx.z) * kAttnSplitKeys;
  b.first_keys = b.run.pos0 + (b.tile.row0 - b.run.row0) + 1;
  const int64_t tile_keys = b.first_keys + b.tile.n_rows - 1;  // keys of its last row
  b.tile_lo = first_key(b.first_keys, window);
  b.empty = b.key0 >= tile_keys || b.key0 + kAttnSplitKeys <= b.tile_lo;
  b.key_end = min(b.key0 + kAttnSplitKeys, tile_keys);
  return b;
}

// Stages positions c0 .. c0 + kAttnChunk of KV head g of run r (those past key_end as zeros: a
// weight of 0 must not meet NaN garbage) into ks [HD][kAttnChunk] (dim-major) and vs
// [kAttnChunk][ldv] (dims HD .. ldv untouched). kbase/vbase: kAttnChunk shared slots each, where
// a position keeps its key (dim 0) and value row. Called by all `threads` threads of the block
// between barriers (it has its own inside); the caller syncs before reading ks/vs.
__device__ __forceinline__ void stage_kv_chunk(const DevKv& kv, const DevStep& step, const DevRun& r, int g,
                                               int64_t c0, int64_t key_end, int threads, float* ks, float* vs,
                                               int ldv, int64_t* kbase, int64_t* vbase) {
  const int HD = static_cast<int>(kv.head_dim);
  if (threadIdx.x < kAttnChunk) {  // one block-table lookup and division a position, not one an element
    const int64_t pos = c0 + threadIdx.x;
    int64_t kb = -1, vb = -1;
    if (pos < key_end) {
      const int64_t bt = kv.block_tokens;
      const int64_t base = head_block(kv, step.blocks[r.blocks_at + pos / bt], g), t = pos % bt;
      kb = base + t;
      vb = base + t * HD;
    }
    kbase[threadIdx.x] = kb;
    vbase[threadIdx.x] = vb;
  }
  __syncthreads();
  // 8 positions of a dim (or 8 dims of a position) in one 16-byte load: runs of 8 positions never
  // cross a KV block when block_tokens is a multiple of 8 (chunks start at multiples of 64).
  if (kv.block_tokens % 8 == 0 && HD % 8 == 0) {
    for (int i = threadIdx.x; i < HD * (kAttnChunk / 8); i += threads) {
      const int d = i / (kAttnChunk / 8), j = (i % (kAttnChunk / 8)) * 8;
      float k8[8];
      if (kbase[j + 7] >= 0) {
        load_state8(kv.type, kv.k, kbase[j] + d * kv.block_tokens, k8);
      } else {  // the keys end inside these 8
#pragma unroll
        for (int e = 0; e < 8; ++e)
          k8[e] = kbase[j + e] >= 0 ? load_state(kv.type, kv.k, kbase[j + e] + d * kv.block_tokens) : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) ks[d * kAttnChunk + j + e] = k8[e];
    }
    const int hd8 = HD / 8;
    for (int i = threadIdx.x; i < kAttnChunk * hd8; i += threads) {
      const int j = i / hd8, d = (i % hd8) * 8;
      float v8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (vbase[j] >= 0) load_state8(kv.type, kv.v, vbase[j] + d, v8);
#pragma unroll
      for (int e = 0; e < 8; ++e) vs[j * ldv + d + e] = v8[e];
    }
  } else {
    for (int i = threadIdx.x; i < HD * kAttnChunk; i += threads) {
      const int d = i / kAttnChunk, j = i % kAttnChunk;
      ks[i] = kbase[j] >= 0 ? load_state(kv.type, kv.k, kbase[j] + d * kv.block_tokens) : 0.0f;
    }
    for (int i = threadIdx.x; i < kAttnChunk * HD; i += threads) {
      const int j = i / HD, d = i % HD;
      vs[j * ldv + d] = vbase[j] >= 0 ? load_state(kv.type, kv.v, vbase[j] + d) : 0.0f;
    }
  }
}

}  // namespace lfm::cuda
