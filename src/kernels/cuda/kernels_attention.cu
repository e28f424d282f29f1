// Causal paged attention (flash-decoding style) for prefill and decode rows alike.
//
// A block takes one tile (up to kAttnTileRows consecutive rows of one sequence), one KV head (so
// its G query heads share every K/V load) and one split of kAttnSplitKeys key positions. It
// stages the split's keys and values in shared memory kChunk positions at a time; each warp
// carries the online softmax of its query vectors (row, head) over groups of 32 keys, one key per
// lane for the scores and two output dims per lane for the values. A row whose keys fit one split
// writes its output; longer rows write (max, sum, acc) partials that a second kernel merges in
// split order. A row's arithmetic depends only on its own range of keys: never on the tile, the
// batch or the step. A sliding window (window > 0) starts a row's keys at max(0, end − window):
// the groups of 32 before it are skipped, the lanes before it masked, and only the splits that
// hold some of its keys are written and merged (older keys stay in the cache, unread).
#include <cmath>

#include "kernels/cuda/attention_staging.cuh"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/state_access.cuh"

namespace lfm::cuda {

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kChunk = kAttnChunk;
constexpr int kMaxGroup = 8;  // query heads per KV head
constexpr int kMaxVecPerWarp = kAttnTileRows * kMaxGroup / kWarps;

__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, MaxOp{}); }
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp{}); }

// D: output dims per lane (lane, lane + 32, ...), so head_dim ≤ 32·D.
template <int D>
__global__ void __launch_bounds__(kThreads)
    attention_split_kernel(const float* __restrict__ q, DevKv kv, DevStep step, int n_heads, float scale,
                           float* __restrict__ out, float* __restrict__ partial, int max_splits, int64_t window) {
  const int HD = static_cast<int>(kv.head_dim);
  LFM_DYNAMIC_SHARED(float, smem);
  float* ks = smem;              // [HD][kChunk]
  float* vs = ks + HD * kChunk;  // [kChunk][HD]
  float* qs = vs + kChunk * HD;  // [tile rows · G][HD]
  const AttnBlock b = attn_block(kv, step, step.tiles[blockIdx.x], n_heads, window);
  if (b.empty) return;
  const DevTile& tile = b.tile;
  const DevRun& r = b.run;
  const int g = b.g, G = b.G;
  const int64_t key0 = b.key0, first_keys = b.first_keys, tile_lo = b.tile_lo, key_end = b.key_end;
  const int nv = tile.n_rows * G;
  for (int i = threadIdx.x; i < nv * HD; i += kThreads) {
    const int v = i / HD, d = i % HD;
    qs[i] = q[((tile.row0 + v / G) * n_heads + g * G + v % G) * HD + d];
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float m[kMaxVecPerWarp], l[kMaxVecPerWarp], acc[kMaxVecPerWarp][D];
#pragma unroll
  for (int i = 0; i < kMaxVecPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int dd = 0; dd < D; ++dd) acc[i][dd] = 0.0f;
  }
  __shared__ int64_t kbase[kChunk], vbase[kChunk];
  // Chunks start at multiples of kChunk (key0 is one), from the one holding the tile's first key.
  const int64_t chunk0 = tile_lo / kChunk * kChunk;
  for (int64_t c0 = chunk0 > key0 ? chunk0 : key0; c0 < key_end; c0 += kChunk) {
    __syncthreads();  // the previous chunk is consumed
    stage_kv_chunk(kv, step, r, g, c0, key_end, kThreads, ks, vs, HD, kbase, vbase);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kMaxVecPerWarp; ++i) {
      const int v = warp + kWarps * i;  // warp-uniform, as is everything a shuffle depends on
      if (v >= nv) break;
      // The row's keys in this split: its own (causal) up to the split's end, from its window's
      // first key on.
      const int64_t n_keys = min(first_keys + v / G, key_end);
      const int64_t lo = first_key(first_keys + v / G, window);
      const float* qv = qs + v * HD;
#pragma unroll
      for (int sub = 0; sub < kChunk / 32; ++sub) {
        const int64_t base = c0 + sub * 32;
        if (base >= n_keys) break;
        if (base + 32 <= lo) continue;  // every lane before the window (a live lane remains otherwise)
        const bool live = base + lane < n_keys && base + lane >= lo;
        float s = -INFINITY;
        if (live) {
          float dot = 0.0f;
#pragma unroll 16
          for (int d = 0; d < HD; ++d) dot += qv[d] * ks[d * kChunk + sub * 32 + lane];
          s = dot * scale;
        }
        const float m_new = fmaxf(m[i], warp_max(s));
        const float p = live ? expf(s - m_new) : 0.0f;
        const float corr = expf(m[i] - m_new);  // 0 on the first group (m = -inf)
        l[i] = l[i] * corr + warp_sum(p);
#pragma unroll
        for (int dd = 0; dd < D; ++dd) acc[i][dd] *= corr;
        const float* vrow = vs + sub * 32 * HD + lane;
#pragma unroll 8
        for (int jj = 0; jj < 32; ++jj) {
          const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
          for (int dd = 0; dd < D; ++dd)
            if (lane + 32 * dd < HD) acc[i][dd] += pj * vrow[jj * HD + 32 * dd];
        }
        m[i] = m_new;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kMaxVecPerWarp; ++i) {
    const int v = warp + kWarps * i;
    if (v >= nv) break;
    const int64_t n_keys = first_keys + v / G;
    const int64_t lo = first_key(n_keys, window);
    const int64_t first_split = lo / kAttnSplitKeys, last_split = (n_keys - 1) / kAttnSplitKeys;
    if (blockIdx.z < first_split || blockIdx.z > last_split) continue;  // none of the row's keys here
    const int64_t row = tile.row0 + v / G, head = g * G + v % G;
    if (first_split == last_split) {
      float* o = out + (row * n_heads + head) * HD + lane;
#pragma unroll
      for (int dd = 0; dd < D; ++dd)
        if (lane + 32 * dd < HD) o[32 * dd] = acc[i][dd] / l[i];
    } else {
      float* pp = partial + ((row * n_heads + head) * max_splits + blockIdx.z) * (HD + 2);
      if (lane == 0) pp[0] = m[i], pp[1] = l[i];
#pragma unroll
      for (int dd = 0; dd < D; ++dd)
        if (lane + 32 * dd < HD) pp[2 + lane + 32 * dd] = acc[i][dd];
    }
  }
}

// Rows of more than one split: their partials merged in split order.
__global__ void attention_merge_kernel(DevStep step, int n_heads, int HD, const float* __restrict__ partial,
                                       int max_splits, float* __restrict__ out, int64_t window) {
  const int64_t row = blockIdx.x, head = blockIdx.y;
  const int32_t ri = step.row_run[row];
  if (ri < 0) return;
  const DevRun r = step.runs[ri];
  const int64_t n_keys = r.pos0 + (row - r.row0) + 1;
  const int64_t lo = first_key(n_keys, window);
  const int64_t first_split = lo / kAttnSplitKeys, last_split = (n_keys - 1) / kAttnSplitKeys;
  if (first_split == last_split) return;  // written by the split kernel
  const int64_t splits = last_split - first_split + 1;
  const float* pp = partial + ((row * n_heads + head) * max_splits + first_split) * (HD + 2);
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float m = pp[0], l = pp[1], a = pp[2 + d];
    for (int64_t s = 1; s < splits; ++s) {
      const float* ps = pp + s * (HD + 2);
      const float m_new = fmaxf(m, ps[0]);
      const float c_old = expf(m - m_new), c_new = expf(ps[0] - m_new);
      l = l * c_old + ps[1] * c_new;
      a = a * c_old + ps[2 + d] * c_new;
      m = m_new;
    }
    out[(row * n_heads + head) * HD + d] = a / l;
  }
}

template <int D>
void launch_splits(const float* q, const DevKv& kv, const DevStep& step, int n_heads, float scale, float* out,
                   float* partial, int splits, int64_t window, cudaStream_t s) {
  const int G = n_heads / static_cast<int>(kv.kv_heads), HD = static_cast<int>(kv.head_dim);
  const size_t smem = sizeof(float) * (2 * HD * kChunk + kAttnTileRows * G * HD);
  if (smem > 48 * 1024) {
    static bool raised = false;  // once per kernel instance (the limit is per function)
    if (!raised)
      LFM_CUDA_CHECK(cudaFuncSetAttribute(attention_split_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(sizeof(float) * 32 * D * (2 * kChunk + kAttnTileRows * kMaxGroup))));
    raised = true;
  }
  const dim3 grid(static_cast<unsigned>(step.n_tiles), static_cast<unsigned>(kv.kv_heads), static_cast<unsigned>(splits));
  LFM_LAUNCH(grid, kThreads, smem, s, attention_split_kernel<D>)(q, kv, step, n_heads, scale, out, partial, splits,
                                                                window);
  LFM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void attention(const float* q, const DevKv& kv, const DevStep& step, int64_t n_heads, float scale, float* out,
               int64_t max_keys, float* partial, int64_t window, bool tensor_cores, cudaStream_t s) {
  LFM_CHECK(n_heads % kv.kv_heads == 0 && n_heads / kv.kv_heads <= kMaxGroup, "cuda: attention supports up to ",
            kMaxGroup, " query heads per KV head, got ", n_heads, " over ", kv.kv_heads);
  LFM_CHECK(kv.head_dim >= 1 && kv.head_dim <= 128, "cuda: attention supports head_dim up to 128, got ", kv.head_dim);
  if (step.n_rows == 0 || step.n_tiles == 0) return;
  const int h = static_cast<int>(n_heads), HD = static_cast<int>(kv.head_dim);
  const int splits = static_cast<int>((max_keys + kAttnSplitKeys - 1) / kAttnSplitKeys);
  if (tensor_cores && attention_tc_fits(kv, n_heads)) {
    attention_tc_splits(q, kv, step, h, scale, out, partial, splits, window, s);
  } else {
    switch ((HD + 31) / 32) {
      case 1: launch_splits<1>(q, kv, step, h, scale, out, partial, splits, window, s); break;
      case 2: launch_splits<2>(q, kv, step, h, scale, out, partial, splits, window, s); break;
      case 3: launch_splits<3>(q, kv, step, h, scale, out, partial, splits, window, s); break;
      default: launch_splits<4>(q, kv, step, h, scale, out, partial, splits, window, s); break;
    }
  }
  if (splits > 1) {  // rows of several splits: their partials merged in split order
    LFM_LAUNCH(dim3(static_cast<unsigned>(step.n_rows), static_cast<unsigned>(n_heads)), 32 * ((HD + 31) / 32), 0, s,
               attention_merge_kernel)(step, h, HD, partial, splits, out, window);
    LFM_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace lfm::cuda
