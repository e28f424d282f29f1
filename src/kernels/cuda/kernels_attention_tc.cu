// Causal paged attention on the tensor cores, for prefill steps (kernels_attention.cu chooses;
// decode rows keep the CUDA-core kernel there). The same kind of blocks (one tile of rows × one
// KV head × one split of kAttnSplitKeys keys), the same chunks of kAttnChunk keys
// staged in shared memory, the same online softmax per query vector and the same partials for
// rows of several splits, merged by the same kernel: only the two products change.
//
// A block takes 64 / G rows of a wide tile (G query heads per KV head): 64 query vectors. A warp
// takes 16 of them (row, head of the group) — the mma's M — and per chunk computes S = Q·Kᵀ
// [16 × 64 keys] and then P·V [16 × head dims] with wmma's tf32 m16n16k8.
// float32 accuracy from tf32 products: each float operand x is split into big = tf32(x) and
// small = tf32(x − big), and a·b runs as big·big + big·small + small·big (small·small, below
// 2⁻²² of the product, left out): the "3xTF32" of CUTLASS. F16/BF16 K and V are exact in tf32
// (their small parts are zero), so those products take two terms.
//
// S goes through the warp's shared buffer for the softmax (a fragment's element order is the
// hardware's own, so per-row work reads rows from shared memory): lane pair (2i, 2i+1) owns
// vector i, each half of its 64 keys, and half of its output dims in registers (rescaled by the
// chunk's correction, then the chunk's P·V added). A row's arithmetic still depends only on its
// own keys and positions, not on the tile or the batch.
#include <mma.h>

#include <cmath>

#include "kernels/cuda/attention_staging.cuh"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.cuh"

namespace lfm::cuda {

namespace {

using namespace nvcuda;

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kVecs = 16;                   // query vectors per warp: the mma's M
constexpr int kBlockVecs = kVecs * kWarps;
constexpr int kKeys = kAttnChunk;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

template <typename F>
__device__ __forceinline__ void split_tf32(F& big, F& small) {
#pragma unroll
  for (int i = 0; i < big.num_elements; ++i) {
    const float x = big.x[i], b = wmma::__float_to_tf32(x);
    big.x[i] = b;
    small.x[i] = wmma::__float_to_tf32(x - b);
  }
}

// a [16 × 8] (row-major in shared memory) as its tf32 big and small parts.
__device__ __forceinline__ void load_a(FragA& big, FragA& small, const float* a, unsigned lda) {
  wmma::load_matrix_sync(big, a, lda);
  split_tf32(big, small);
}

// acc += a · b [8 × 16] (row-major in shared memory), a given as its parts: big·small (skipped
// when kExactB: b's values are exact in tf32, F16/BF16 state), small·big, big·big, in that order.
template <bool kExactB>
__device__ __forceinline__ void mma_f32(FragC& acc, const FragA& a_big, const FragA& a_small, const float* b,
                                        unsigned ldb) {
  FragB b_big, b_small;
  wmma::load_matrix_sync(b_big, b, ldb);
  if constexpr (kExactB) {
#pragma unroll
    for (int i = 0; i < b_big.num_elements; ++i) b_big.x[i] = wmma::__float_to_tf32(b_big.x[i]);  // no change
  } else {
    split_tf32(b_big, b_small);
    wmma::mma_sync(acc, a_big, b_small, acc);
  }
  wmma::mma_sync(acc, a_small, b_big, acc);
  wmma::mma_sync(acc, a_big, b_big, acc);
}

// DT: head dims in 16-column tiles (head_dim ≤ 16·DT, zero-padded to HDP = 16·DT).
template <int DT, bool kExactKV>
__global__ void __launch_bounds__(kThreads)
    attention_tc_kernel(const float* __restrict__ q, DevKv kv, DevStep step, int n_heads, float scale,
                        float* __restrict__ out, float* __restrict__ partial, int max_splits, int64_t window) {
  constexpr int HDP = 16 * DT, LDW = HDP > kKeys ? HDP : kKeys;  // LDW: a warp buffer's row
  constexpr int kHalf = HDP / 2;                                  // output dims a lane keeps
  const int HD = static_cast<int>(kv.head_dim);
  LFM_DYNAMIC_SHARED(float, raw);
  // wmma tiles need 32-byte alignment; the launch asks for 32 bytes more than it uses.
  float* qs = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(raw) + 31) & ~uintptr_t{31});  // [64][HDP]
  float* ks = qs + kBlockVecs * HDP;  // [HDP][kKeys]
  float* vs = ks + HDP * kKeys;       // [kKeys][HDP]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* wbuf = vs + kKeys * HDP + warp * kVecs * LDW;  // this warp's [16][LDW]: S, P, then P·V
  // This block's rows: part `sub` of a wide tile, kBlockVecs / G rows (its 64 query vectors).
  const int sub_rows = kBlockVecs / (n_heads / static_cast<int>(kv.kv_heads));
  const int subs = (kAttnWideTileRows + sub_rows - 1) / sub_rows;
  DevTile t = step.wide_tiles[blockIdx.x / subs];
  const int sub = static_cast<int>(blockIdx.x % subs);
  t.row0 += static_cast<int64_t>(sub) * sub_rows;
  t.n_rows = min(sub_rows, t.n_rows - sub * sub_rows);
  if (t.n_rows <= 0) return;  // the wide tile (a run's last) ends before this part
  const AttnBlock b = attn_block(kv, step, t, n_heads, window);
  if (b.empty) return;
  const DevTile& tile = b.tile;
  const DevRun& r = b.run;
  const int g = b.g, G = b.G;
  const int64_t key0 = b.key0, first_keys = b.first_keys, tile_lo = b.tile_lo, key_end = b.key_end;
  const int nv = tile.n_rows * G;
  // Queries (zero past the tile's vectors and head_dim) and the padding of K and V (never staged).
  for (int i = threadIdx.x; i < kBlockVecs * HDP; i += kThreads) {
    const int v = i / HDP, d = i % HDP;
    qs[i] = v < nv && d < HD ? q[((tile.row0 + v / G) * n_heads + g * G + v % G) * HD + d] : 0.0f;
  }
  for (int i = HD * kKeys + threadIdx.x; i < HDP * kKeys; i += kThreads) ks[i] = 0.0f;
  for (int i = threadIdx.x; i < kKeys * (HDP - HD); i += kThreads) vs[(i / (HDP - HD)) * HDP + HD + i % (HDP - HD)] = 0.0f;

  // Lane pair (2i, 2i+1): vector v = 16·warp + i, keys (and output dims) half·32 (half·kHalf) on.
  const int vi = lane >> 1, half = lane & 1, v = warp * kVecs + vi;
  const bool active = v < nv;
  const int64_t row_keys = active ? first_keys + v / G : 0;  // the row's keys, all splits
  const int64_t n_keys = min(row_keys, key_end), lo = first_key(row_keys, window);
  float m = -INFINITY, l = 0.0f, o[kHalf];
#pragma unroll
  for (int d = 0; d < kHalf; ++d) o[d] = 0.0f;
  const bool warp_has_vectors = warp * kVecs < nv;  // warp-uniform

  __shared__ int64_t kbase[kKeys], vbase[kKeys];
  const int64_t chunk0 = tile_lo / kKeys * kKeys;
  for (int64_t c0 = chunk0 > key0 ? chunk0 : key0; c0 < key_end; c0 += kKeys) {
    __syncthreads();  // the previous chunk is consumed
    stage_kv_chunk(kv, step, r, g, c0, key_end, kThreads, ks, vs, HDP, kbase, vbase);
    __syncthreads();
    if (!warp_has_vectors) continue;
    const bool sees = active && c0 < n_keys && c0 + kKeys > lo;
    if (__ballot_sync(0xffffffffu, sees) == 0) continue;  // none of the warp's vectors has keys here

    // S = Q·Kᵀ: [16 vectors][64 keys] into the warp's buffer; each query tile loaded and split
    // once for the chunk's four key tiles.
    FragC sc[kKeys / 16];
#pragma unroll
    for (int nt = 0; nt < kKeys / 16; ++nt) wmma::fill_fragment(sc[nt], 0.0f);
#pragma unroll
    for (int kk = 0; kk < DT * 2; ++kk) {
      FragA a_big, a_small;
      load_a(a_big, a_small, qs + warp * kVecs * HDP + kk * 8, HDP);
#pragma unroll
      for (int nt = 0; nt < kKeys / 16; ++nt)
        mma_f32<kExactKV>(sc[nt], a_big, a_small, ks + kk * 8 * kKeys + nt * 16, kKeys);
    }
#pragma unroll
    for (int nt = 0; nt < kKeys / 16; ++nt) wmma::store_matrix_sync(wbuf + nt * 16, sc[nt], LDW, wmma::mem_row_major);
    __syncwarp();

    // Online softmax over the vector's live keys in the chunk; P replaces S (0 where masked).
    float* srow = wbuf + vi * LDW + half * 32;
    float cmax = -INFINITY;
#pragma unroll 8
    for (int j = 0; j < 32; ++j) {
      const int64_t pos = c0 + half * 32 + j;
      const float s = active && pos < n_keys && pos >= lo ? srow[j] * scale : -INFINITY;
      srow[j] = s;
      cmax = fmaxf(cmax, s);
    }
    cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, 1));
    const float m_new = fmaxf(m, cmax);
    float corr = 1.0f, psum = 0.0f;
    if (m_new == -INFINITY) {  // no key of this vector yet
#pragma unroll 8
      for (int j = 0; j < 32; ++j) srow[j] = 0.0f;
    } else {
      corr = expf(m - m_new);  // 0 on the vector's first keys (m = -inf)
#pragma unroll 8
      for (int j = 0; j < 32; ++j) {
        const float p = srow[j] == -INFINITY ? 0.0f : expf(srow[j] - m_new);
        srow[j] = p;
        psum += p;
      }
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    l = l * corr + psum;
    m = m_new;
    __syncwarp();

    // P·V: [16 vectors][HDP dims], each P tile loaded and split once for every dim tile; kept in
    // fragments until every P tile is read, then stored over P and added to the lanes' rescaled
    // outputs.
    FragC pv[DT];
#pragma unroll
    for (int nt = 0; nt < DT; ++nt) wmma::fill_fragment(pv[nt], 0.0f);
#pragma unroll
    for (int kk = 0; kk < kKeys / 8; ++kk) {
      FragA a_big, a_small;
      load_a(a_big, a_small, wbuf + kk * 8, LDW);
#pragma unroll
      for (int nt = 0; nt < DT; ++nt) mma_f32<kExactKV>(pv[nt], a_big, a_small, vs + kk * 8 * HDP + nt * 16, HDP);
    }
    __syncwarp();
#pragma unroll
    for (int nt = 0; nt < DT; ++nt) wmma::store_matrix_sync(wbuf + nt * 16, pv[nt], LDW, wmma::mem_row_major);
    __syncwarp();
    const float* orow = wbuf + vi * LDW + half * kHalf;
#pragma unroll
    for (int d = 0; d < kHalf; ++d) o[d] = o[d] * corr + orow[d];
    __syncwarp();  // read before the next chunk's S overwrites the buffer
  }

  if (!active) return;
  const int64_t first_split = lo / kAttnSplitKeys, last_split = (row_keys - 1) / kAttnSplitKeys;
  if (blockIdx.z < first_split || blockIdx.z > last_split) return;  // none of the row's keys here
  const int64_t row = tile.row0 + v / G, head = g * G + v % G;
  const int d0 = half * kHalf;
  if (first_split == last_split) {
    float* dst = out + (row * n_heads + head) * HD;
#pragma unroll
    for (int d = 0; d < kHalf; ++d)
      if (d0 + d < HD) dst[d0 + d] = o[d] / l;
  } else {
    float* pp = partial + ((row * n_heads + head) * max_splits + blockIdx.z) * (HD + 2);
    if (half == 0) pp[0] = m, pp[1] = l;
#pragma unroll
    for (int d = 0; d < kHalf; ++d)
      if (d0 + d < HD) pp[2 + d0 + d] = o[d];
  }
}

template <int DT, bool kExactKV>
void launch(const float* q, const DevKv& kv, const DevStep& step, int n_heads, float scale, float* out,
            float* partial, int splits, int64_t window, cudaStream_t s) {
  constexpr int HDP = 16 * DT, LDW = HDP > kKeys ? HDP : kKeys;
  const size_t smem = sizeof(float) * (kBlockVecs * HDP + 2 * HDP * kKeys + kWarps * kVecs * LDW) + 32;
  static bool raised = false;  // once per kernel instance (the limit is per function)
  if (!raised && smem > 48 * 1024)
    LFM_CUDA_CHECK(cudaFuncSetAttribute(attention_tc_kernel<DT, kExactKV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  raised = true;
  // Each wide tile in parts of kBlockVecs / G rows: every block has 64 query vectors (a run's last
  // part fewer), every warp 16.
  const int sub_rows = kBlockVecs / (n_heads / static_cast<int>(kv.kv_heads));
  const int64_t subs = (kAttnWideTileRows + sub_rows - 1) / sub_rows;
  const dim3 grid(static_cast<unsigned>(step.n_wide_tiles * subs), static_cast<unsigned>(kv.kv_heads),
                  static_cast<unsigned>(splits));
  LFM_LAUNCH(grid, kThreads, smem, s, attention_tc_kernel<DT, kExactKV>)(q, kv, step, n_heads, scale, out, partial,
                                                                        splits, window);
  LFM_CUDA_CHECK(cudaGetLastError());
}

template <int DT>
void launch_dt(const float* q, const DevKv& kv, const DevStep& step, int n_heads, float scale, float* out,
               float* partial, int splits, int64_t window, cudaStream_t s) {
  if (kv.type == DType::F32) return launch<DT, false>(q, kv, step, n_heads, scale, out, partial, splits, window, s);
  launch<DT, true>(q, kv, step, n_heads, scale, out, partial, splits, window, s);
}

}  // namespace

bool attention_tc_fits(const DevKv& kv, int64_t n_heads) {
  return kv.head_dim >= 1 && kv.head_dim <= 128 && n_heads % kv.kv_heads == 0 && n_heads / kv.kv_heads <= kBlockVecs;
}

void attention_tc_splits(const float* q, const DevKv& kv, const DevStep& step, int n_heads, float scale, float* out,
                         float* partial, int splits, int64_t window, cudaStream_t s) {
  if (kv.head_dim <= 32) return launch_dt<2>(q, kv, step, n_heads, scale, out, partial, splits, window, s);
  if (kv.head_dim <= 64) return launch_dt<4>(q, kv, step, n_heads, scale, out, partial, splits, window, s);
  launch_dt<8>(q, kv, step, n_heads, scale, out, partial, splits, window, s);
}

}  // namespace lfm::cuda
