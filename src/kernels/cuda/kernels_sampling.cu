// Sampling where the logits are (Backend::edit_logits, Backend::top_candidates): a request's
// sparse logit changes applied in place, then each sampled row summarised as its best candidates
// and the softmax mass of the rest, so that a row comes down as n candidates, not vocab floats.
#include <climits>
#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"

namespace lfm::cuda {

namespace {

// One thread per edit; each (row, id) is edited once, so the threads never meet.
__global__ void edit_logits_kernel(float* __restrict__ logits, int64_t vocab, const LogitEdit* __restrict__ edits,
                                   int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const LogitEdit e = edits[i];
  if (e.id == kPaddingEdit) return;
  float* p = logits + static_cast<int64_t>(e.row) * vocab + e.id;
  float w = *p;
  w += e.add;
  if (e.penalty != 1.0f) w = w > 0 ? w / e.penalty : w * e.penalty;
  w -= e.sub;
  *p = w;
}

constexpr int kTopThreads = 512;
constexpr int kLseThreads = 256;
constexpr int kTopSlots = 256;  // Backend::kMaxCandidates: the bitonic sort's size

// An unsigned key in the floats' order (a larger float, a larger key), -0 as +0; 0 marks an id
// that is not allowed (only a negative NaN shares it).
__device__ uint32_t order_key(float v) {
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// One block per listed row. (1) Radix select, 8 bits a pass from the top, finds the n-th largest
// key `thr` and how many of the keys equal to it are taken (`want`, the lowest ids). (2) The keys
// above thr take slots in any order; the ties take theirs in id order, a chunk of ids at a time.
// (3) A bitonic sort orders the slots by (key down, id up): the result does not depend on which
// thread took which slot. (4) The tail: exp(w/T - best/T) over the allowed ids not taken, summed
// per thread in id order, then by block_reduce's fixed tree.
__global__ void __launch_bounds__(kTopThreads)
    top_candidates_kernel(const float* __restrict__ logits, int64_t vocab, const CandidateRow* __restrict__ rows,
                          const uint8_t* __restrict__ allowed, int n, Candidate* __restrict__ best,
                          float* __restrict__ tail) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_keys[kTopSlots];
  __shared__ int32_t s_ids[kTopSlots];
  __shared__ int s_warp[kTopThreads / 32];
  __shared__ uint32_t s_thr, s_want, s_all, s_total;
  __shared__ int s_greater, s_taken, s_last_tie;
  __shared__ double s_sum[kTopThreads / 32];
  const CandidateRow cr = rows[blockIdx.x];
  const float* x = logits + static_cast<int64_t>(cr.row) * vocab;
  auto key_at = [&](int64_t i) -> uint32_t { return (!allowed || allowed[i]) ? order_key(x[i]) : 0u; };

  // (1) select
  uint32_t prefix = 0, mask = 0, want = static_cast<uint32_t>(n);
  if (threadIdx.x == 0) s_all = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int j = threadIdx.x; j < 256; j += kTopThreads) hist[j] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < vocab; i += kTopThreads) {
      const uint32_t k = key_at(i);
      if (k != 0 && (k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (shift == 24) {
        uint32_t total = 0;
        for (int d = 0; d < 256; ++d) total += hist[d];
        s_total = total;
        if (total <= want) s_all = 1;  // every allowed id is a candidate
      }
      uint32_t above = 0;
      int d = 255;
      for (; d > 0 && above + hist[d] < want; --d) above += hist[d];
      s_thr = prefix | (static_cast<uint32_t>(d) << shift);
      s_want = want - above;
    }
    __syncthreads();
    if (s_all) break;
    prefix = s_thr;
    want = s_want;
    mask |= 255u << shift;
    __syncthreads();  // s_thr / s_want are rewritten by the next pass
  }
  const bool all = s_all != 0;
  const uint32_t thr = all ? 1u : prefix;                   // taken: keys above thr, and `want` ties
  const int ties = all ? 0 : static_cast<int>(want);
  const int m = all ? static_cast<int>(s_total) : n;        // candidates found

  // (2) collect
  if (threadIdx.x == 0) s_greater = 0, s_taken = 0, s_last_tie = -1;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < vocab; i += kTopThreads) {
    const uint32_t k = key_at(i);
    if (k != 0 && (all || k > thr)) {
      const int slot = atomicAdd(&s_greater, 1);
      s_keys[slot] = k;
      s_ids[slot] = static_cast<int32_t>(i);
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t base = 0; ties > 0 && base < vocab; base += kTopThreads) {
    __syncthreads();
    if (s_taken >= ties) break;  // every thread reads the same value between the barriers
    const int64_t i = base + threadIdx.x;
    const bool tie = i < vocab && key_at(i) == thr;
    const uint32_t ballot = __ballot_sync(0xffffffffu, tie);
    if (lane == 0) s_warp[warp] = __popc(ballot);
    __syncthreads();
    int rank = s_taken + __popc(ballot & ((1u << lane) - 1u));
    int chunk = 0;
    for (int w = 0; w < kTopThreads / 32; ++w) {
      if (w < warp) rank += s_warp[w];
      chunk += s_warp[w];
    }
    if (tie && rank < ties) {
      s_keys[n - ties + rank] = thr;
      s_ids[n - ties + rank] = static_cast<int32_t>(i);
      if (rank == ties - 1) s_last_tie = static_cast<int>(i);
    }
    __syncthreads();
    if (threadIdx.x == 0) s_taken += chunk;
  }
  __syncthreads();

  // (3) sort
  for (int j = threadIdx.x; j < kTopSlots; j += kTopThreads)
    if (j >= m) s_keys[j] = 0, s_ids[j] = INT_MAX;
  __syncthreads();
  for (int k = 2; k <= kTopSlots; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int i = threadIdx.x, l = i ^ j;
      if (i < kTopSlots && l > i) {
        const bool l_first = s_keys[l] > s_keys[i] || (s_keys[l] == s_keys[i] && s_ids[l] < s_ids[i]);
        const bool i_first = s_keys[i] > s_keys[l] || (s_keys[i] == s_keys[l] && s_ids[i] < s_ids[l]);
        if ((i & k) == 0 ? l_first : i_first) {
          const uint32_t tk = s_keys[i];
          const int32_t ti = s_ids[i];
          s_keys[i] = s_keys[l], s_ids[i] = s_ids[l];
          s_keys[l] = tk, s_ids[l] = ti;
        }
      }
      __syncthreads();
    }
  Candidate* out = best + static_cast<int64_t>(blockIdx.x) * n;
  for (int r = threadIdx.x; r < n; r += kTopThreads) {
    if (r < m) {
      const float v = x[s_ids[r]];
      out[r] = Candidate{v == 0.0f ? 0.0f : v, s_ids[r]};
    } else {
      out[r] = Candidate{-INFINITY, -1};
    }
  }

  // (4) tail
  double sum = 0;
  const float t = cr.temperature;
  if (t > 0 && !all && m > 0) {
    const float v0 = x[s_ids[0]];
    const float top = (v0 == 0.0f ? 0.0f : v0) / t;
    const int last_tie = s_last_tie;
    for (int64_t i = threadIdx.x; i < vocab; i += kTopThreads) {
      const uint32_t k = key_at(i);
      if (k == 0 || k > thr || (k == thr && i <= last_tie)) continue;
      const float v = x[i];
      sum += static_cast<double>(expf((v == 0.0f ? 0.0f : v) / t - top));
    }
  }
  sum = block_reduce<kTopThreads>(sum, s_sum, SumOp());
  if (threadIdx.x == 0) tail[blockIdx.x] = static_cast<float>(sum);
}

void check_launch() { LFM_CUDA_CHECK(cudaGetLastError()); }

}  // namespace

void edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  LFM_LAUNCH(static_cast<unsigned>((n + 255) / 256), 256, 0, s, edit_logits_kernel)(logits, vocab, edits, n);
  check_launch();
}

// One block per listed row: the row's max, then Σ exp(double(w − max)), each thread's ids in
// order and the threads' sums in block_reduce's fixed tree.
__global__ void __launch_bounds__(kLseThreads) logsumexp_rows_kernel(const float* __restrict__ logits, int64_t vocab,
                                                                   const int32_t* __restrict__ rows, double* __restrict__ out) {
  __shared__ float max_shared[kLseThreads / 32];
  __shared__ double sum_shared[kLseThreads / 32];
  const float* x = logits + static_cast<int64_t>(rows[blockIdx.x]) * vocab;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kLseThreads) m = fmaxf(m, x[i]);
  m = block_reduce<kLseThreads>(m, max_shared, MaxOp{});
  double sum = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kLseThreads) sum += exp(static_cast<double>(x[i] - m));
  sum = block_reduce<kLseThreads>(sum, sum_shared, SumOp{});
  if (threadIdx.x == 0) out[blockIdx.x] = m + log(sum);
}

void logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out, cudaStream_t s) {
  if (count == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(count), kLseThreads, 0, s, logsumexp_rows_kernel)(logits, vocab, rows, out);
  check_launch();
}

void top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                    const uint8_t* allowed, int64_t n, Candidate* best, float* tail, cudaStream_t s) {
  LFM_CHECK(n >= 1 && n <= kTopSlots, "cuda: top_candidates takes 1 to ", kTopSlots, " candidates, got ", n);
  if (count == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(count), kTopThreads, 0, s, top_candidates_kernel)(logits, vocab, rows, allowed,
                                                                            static_cast<int>(n), best, tail);
  check_launch();
}

}  // namespace lfm::cuda
