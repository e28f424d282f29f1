// Elementwise and row kernels: RMSNorm, RoPE, SwiGLU, products, sums, gathers, embedding lookups,
// MoE routing and combination. Each output is computed in one fixed order (reductions by a fixed
// tree), whatever the number of rows.
#include <cfloat>

#include "kernels/cuda/block_decode.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/state_access.cuh"

namespace lfm::cuda {

namespace {

unsigned blocks_for(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t dim, float eps,
                                float* out) {
  __shared__ double partial[8];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  const float scale = rms_scale(sum_squares_as_256<256>([&](int64_t i) { return xr[i]; }, dim, partial), dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += 256) o[i] = w[i] * (xr[i] * scale);
}

// h += x, then rms_norm_kernel's arithmetic on the sums (each thread reads back what it wrote).
// matmul_add_rms_norm's last block takes the same norm with 128 threads.
__global__ void add_rms_norm_kernel(float* __restrict__ h, const float* __restrict__ x, const float* __restrict__ w,
                                    int64_t dim, float eps, float* __restrict__ out) {
  __shared__ double partial[8];
  float* hr = h + static_cast<int64_t>(blockIdx.x) * dim;
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
  const auto add = [&](int64_t i) {
    const float v = hr[i] + xr[i];
    hr[i] = v;
    return v;
  };
  const float scale = rms_scale(sum_squares_as_256<256>(add, dim, partial), dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += 256) o[i] = w[i] * (hr[i] * scale);
}

// One block per (token, head) of q then k: rms_norm_kernel's arithmetic over the head, then
// rope_kernel's on the normed values. With a cache to store into (store.kv.k set): each key head's
// roped values go to the cache too, and blocks for the value heads follow, storing as kv_write does.
constexpr int kMaxNormRopeDim = 256;
struct KvStore {
  DevKv kv{};
  DevStep step{};
  const float* v = nullptr;  // [T, kv_heads, head_dim]
};
__global__ void qk_norm_rope_kernel(float* q, float* k, const float* __restrict__ qw, const float* __restrict__ kw,
                                    int64_t n_heads, int64_t kv_heads, int64_t head_dim, float eps,
                                    const int64_t* __restrict__ positions, const float* __restrict__ inv_freq,
                                    KvStore store) {
  __shared__ double partial[8];
  __shared__ float normed[kMaxNormRopeDim];
  const bool to_cache = store.kv.k != nullptr;
  const int64_t heads = n_heads + (to_cache ? 2 : 1) * kv_heads, t = blockIdx.x / heads, h = blockIdx.x % heads;
  int64_t base = 0, slot = 0;  // the head's cache slot (a row that stores nothing: none)
  const bool stores = to_cache && h >= n_heads && kv_slot(store.kv, store.step, t, (h - n_heads) % kv_heads, base, slot);
  if (h >= n_heads + kv_heads) {  // a value head
    if (!stores) return;
    const float* vr = store.v + (t * kv_heads + (h - n_heads - kv_heads)) * head_dim;
    for (int64_t i = threadIdx.x; i < head_dim; i += 256) store_state(store.kv.type, store.kv.v, base + slot * head_dim + i, vr[i]);
    return;
  }
  float* x = h < n_heads ? q + (t * n_heads + h) * head_dim : k + (t * kv_heads + (h - n_heads)) * head_dim;
  const float* w = h < n_heads ? qw : kw;
  const float scale = rms_scale(sum_squares_as_256<256>([&](int64_t i) { return x[i]; }, head_dim, partial), head_dim, eps);
  for (int64_t i = threadIdx.x; i < head_dim; i += 256) normed[i] = w[i] * (x[i] * scale);
  __syncthreads();
  const int64_t half = head_dim / 2;
  for (int64_t j = threadIdx.x; j < half; j += 256) {
    const float angle = static_cast<float>(positions[t]) * inv_freq[j];
    const float cs = static_cast<float>(cos(static_cast<double>(angle)));
    const float sn = static_cast<float>(sin(static_cast<double>(angle)));
    const float a = normed[j], b = normed[j + half];
    const float lo = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn)), hi = __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
    x[j] = lo;
    x[j + half] = hi;
    if (stores) {  // keys dim-major
      store_state(store.kv.type, store.kv.k, base + j * store.kv.block_tokens + slot, lo);
      store_state(store.kv.type, store.kv.k, base + (j + half) * store.kv.block_tokens + slot, hi);
    }
  }
}

__global__ void rope_kernel(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                            const int64_t* __restrict__ positions, const float* __restrict__ inv_freq) {
  const int64_t half = head_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tokens * n_heads * half) return;
  const int64_t j = i % half, th = i / half, t = th / n_heads;
  // float32 angle like transformers (position · inv_freq in fp32), cos/sin of that value.
  const float angle = static_cast<float>(positions[t]) * inv_freq[j];
  const float cs = static_cast<float>(cos(static_cast<double>(angle)));
  const float sn = static_cast<float>(sin(static_cast<double>(angle)));
  float* v = x + th * head_dim;
  const float a = v[j], b = v[j + half];
  v[j] = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
  v[j + half] = __fadd_rn(__fmul_rn(b, cs), __fmul_rn(a, sn));
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void mul_rows_kernel(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols,
                                float* out, int64_t ldo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[r * ldo + c] = a[r * lda + c] * b[r * ldb + c];
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) y[i] += bias[i % cols];
}

__global__ void softmax_kernel(float* x, int64_t n) {
  __shared__ float fpart[8];
  __shared__ double dpart[8];
  float mx = -FLT_MAX;
  for (int64_t i = threadIdx.x; i < n; i += 256) mx = fmaxf(mx, x[i]);
  mx = block_reduce<256>(mx, fpart, MaxOp());
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += 256) {
    x[i] = expf(x[i] - mx);
    sum += x[i];
  }
  sum = block_reduce<256>(sum, dpart, SumOp());
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = threadIdx.x; i < n; i += 256) x[i] *= inv;
}

__global__ void gather_rows_kernel(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[i] = x[static_cast<int64_t>(index[r]) * cols + c];
}

template <DType T>
__global__ void embedding_kernel(const uint8_t* table, size_t row_bytes, int64_t cols, const int32_t* ids, int64_t n,
                                 float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (is_plain_v<T>) {
    if (i >= n * cols) return;
    const int64_t t = i / cols, c = i % cols;
    out[i] = plain_at<T>(table + static_cast<size_t>(ids[t]) * row_bytes, c);
  } else {
    const int64_t units = cols / 8;  // 8 elements a thread (a quantized table is in the split-block layout)
    if (i >= n * units) return;
    const int64_t t = i / units, e = (i % units) * 8;
    float wv[8];
    decode8<T>(table + static_cast<size_t>(ids[t]) * row_bytes, cols, e, wv);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[t * cols + e + k] = wv[k];
  }
}

constexpr int kMaxExperts = 256, kMaxChosen = 16;

// One thread per token: sigmoid scores, the k best by score + bias (ties keep the lower expert,
// as a stable sort does), weights from the unbiased scores summed in selection order, then listed
// in ascending expert order.
__global__ void moe_route_kernel(const float* logits, int64_t rows, int64_t n_experts, int64_t k,
                                 const float* selection_bias, bool normalize, float scale, int32_t* experts,
                                 float* weights) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows) return;
  float score[kMaxExperts];
  bool taken[kMaxExperts];
  for (int64_t e = 0; e < n_experts; ++e) {
    score[e] = 1.0f / (1.0f + expf(-logits[t * n_experts + e]));
    taken[e] = false;
  }
  int32_t pick[kMaxChosen];
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float best_sel = 0.0f;
    for (int64_t e = 0; e < n_experts; ++e) {
      if (taken[e]) continue;
      const float sel = score[e] + (selection_bias ? selection_bias[e] : 0.0f);
      if (best < 0 || sel > best_sel) {
        best = static_cast<int32_t>(e);
        best_sel = sel;
      }
    }
    taken[best] = true;
    pick[j] = best;
    sum += score[best];
  }
  // Ascending expert order (insertion sort of k ≤ 16).
  for (int64_t a = 1; a < k; ++a)
    for (int64_t b = a; b > 0 && pick[b - 1] > pick[b]; --b) {
      const int32_t tmp = pick[b];
      pick[b] = pick[b - 1];
      pick[b - 1] = tmp;
    }
  for (int64_t j = 0; j < k; ++j) {
    float wt = score[pick[j]];
    if (normalize) wt /= (sum + 1e-6f);
    experts[t * k + j] = pick[j];
    weights[t * k + j] = wt * scale;
  }
}

// Σ_j weights[j] · x[src[j], c] over a token's k choices, in order from zero (src, weights: the
// token's [k]).
__device__ __forceinline__ float combine_choices(const float* x, const int32_t* src, const float* weights, int64_t k,
                                                 int64_t cols, int64_t c) {
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j) acc = __fadd_rn(acc, __fmul_rn(weights[j], x[static_cast<int64_t>(src[j]) * cols + c]));
  return acc;
}

__global__ void moe_combine_kernel(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k,
                                   int64_t cols, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t t = i / cols;
  out[i] = combine_choices(x, src + t * k, weights + t * k, k, cols, i % cols);
}

// One block per token: h += moe_combine_kernel's sum, then (w given) add_rms_norm_kernel's norm.
__global__ void moe_combine_add_rms_norm_kernel(const float* x, const int32_t* src, const float* weights, int64_t k,
                                                int64_t cols, float* __restrict__ h, const float* __restrict__ w,
                                                float eps, float* __restrict__ out) {
  __shared__ double partial[8];
  const int64_t t = blockIdx.x;
  const int32_t* st = src + t * k;
  const float* wt = weights + t * k;
  float* hr = h + t * cols;
  const auto add = [&](int64_t i) {
    const float v = hr[i] + combine_choices(x, st, wt, k, cols, i);
    hr[i] = v;
    return v;
  };
  if (!w) {
    for (int64_t i = threadIdx.x; i < cols; i += 256) add(i);
    return;
  }
  const float scale = rms_scale(sum_squares_as_256<256>(add, cols, partial), cols, eps);
  float* o = out + t * cols;
  for (int64_t i = threadIdx.x; i < cols; i += 256) o[i] = w[i] * (hr[i] * scale);
}

// One block: thread e counts expert e's choices, one thread turns the counts into first rows,
// then thread e lists its choices in token order (the host's grouping, deterministic). Choices
// outside [0, E) are left out (moe_route makes none).
constexpr int kGroupThreads = 256;
__global__ void moe_group_kernel(const int32_t* __restrict__ experts, int64_t n, int64_t k, int64_t n_experts,
                                 int32_t* __restrict__ first, int32_t* __restrict__ index, int32_t* __restrict__ src) {
  LFM_DYNAMIC_SHARED(int32_t, count);  // [n_experts + 1]
  for (int64_t e = threadIdx.x; e < n_experts; e += kGroupThreads) {
    int32_t c = 0;
    for (int64_t i = 0; i < n; ++i) c += experts[i] == e ? 1 : 0;
    count[e + 1] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    count[0] = 0;
    for (int64_t e = 0; e < n_experts; ++e) count[e + 1] += count[e];
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e <= n_experts; e += kGroupThreads) first[e] = count[e];
  for (int64_t e = threadIdx.x; e < n_experts; e += kGroupThreads) {
    int32_t r = count[e];
    for (int64_t i = 0; i < n; ++i)
      if (experts[i] == e) {
        index[r] = static_cast<int32_t>(i / k);
        src[i] = r++;
      }
  }
}

// One block per row: each thread keeps the best (value, index) of its stride, then a fixed tree;
// a strictly larger value wins, equal values keep the lower index (greedy sampling's rule).
constexpr int kArgmaxThreads = 256;
__global__ void argmax_rows_kernel(const float* __restrict__ logits, int64_t vocab, const uint8_t* __restrict__ allowed,
                                   int32_t* __restrict__ ids) {
  __shared__ float best_v[kArgmaxThreads];
  __shared__ int64_t best_i[kArgmaxThreads];
  const float* x = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float bv = 0.0f;
  int64_t bi = -1;
  for (int64_t i = threadIdx.x; i < vocab; i += kArgmaxThreads)
    if ((!allowed || allowed[i]) && (bi < 0 || x[i] > bv)) bv = x[i], bi = i;
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int half = kArgmaxThreads / 2; half > 0; half >>= 1) {
    if (static_cast<int>(threadIdx.x) < half) {
      const float ov = best_v[threadIdx.x + half];
      const int64_t oi = best_i[threadIdx.x + half];
      const int64_t mi = best_i[threadIdx.x];
      if (oi >= 0 && (mi < 0 || ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < mi)))
        best_v[threadIdx.x] = ov, best_i[threadIdx.x] = oi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = static_cast<int32_t>(best_i[0]);  // -1: nothing allowed
}

void check_launch() { LFM_CUDA_CHECK(cudaGetLastError()); }

}  // namespace

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out, cudaStream_t s) {
  if (rows == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(rows), 256, 0, s, rms_norm_kernel)(x, w, dim, eps, out);
  check_launch();
}

void add_rms_norm(float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out,
                  cudaStream_t s) {
  if (rows == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(rows), 256, 0, s, add_rms_norm_kernel)(h, x, w, dim, eps, out);
  check_launch();
}

void qk_norm_rope(float* q, float* k, const float* qw, const float* kw, int64_t n_tokens, int64_t n_heads,
                  int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions, const float* inv_freq,
                  cudaStream_t s) {
  LFM_CHECK(head_dim % 2 == 0 && head_dim <= kMaxNormRopeDim, "cuda: qk_norm_rope supports even head_dim up to ",
            kMaxNormRopeDim, ", got ", head_dim);
  const int64_t blocks = n_tokens * (n_heads + kv_heads);
  if (blocks == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(blocks), 256, 0, s, qk_norm_rope_kernel)(q, k, qw, kw, n_heads, kv_heads, head_dim, eps,
                                                                    positions, inv_freq, KvStore{});
  check_launch();
}

void qk_norm_rope_kv_write(float* q, float* k, const float* v, const float* qw, const float* kw, int64_t n_tokens,
                           int64_t n_heads, int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions,
                           const float* inv_freq, const DevKv& kv, const DevStep& step, cudaStream_t s) {
  LFM_CHECK(head_dim % 2 == 0 && head_dim <= kMaxNormRopeDim, "cuda: qk_norm_rope supports even head_dim up to ",
            kMaxNormRopeDim, ", got ", head_dim);
  LFM_CHECK(kv.k && kv.kv_heads == kv_heads && kv.head_dim == head_dim && step.n_rows == n_tokens,
            "cuda: qk_norm_rope_kv_write's cache (", kv.kv_heads, " heads of ", kv.head_dim, ") or step (", step.n_rows,
            " rows) does not fit ", n_tokens, " tokens of ", kv_heads, " heads of ", head_dim);
  const int64_t blocks = n_tokens * (n_heads + 2 * kv_heads);
  if (blocks == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(blocks), 256, 0, s, qk_norm_rope_kernel)(q, k, qw, kw, n_heads, kv_heads, head_dim, eps,
                                                                    positions, inv_freq, KvStore{kv, step, v});
  check_launch();
}

void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
               const float* inv_freq, cudaStream_t s) {
  const int64_t n = n_tokens * n_heads * (head_dim / 2);
  if (n == 0) return;
  LFM_LAUNCH(blocks_for(n, 256), 256, 0, s, rope_kernel)(x, n_tokens, n_heads, head_dim, positions, inv_freq);
  check_launch();
}

void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  LFM_LAUNCH(blocks_for(n, 256), 256, 0, s, swiglu_kernel)(gate, up, n, out);
  check_launch();
}

void mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols, float* out,
              int64_t ldo, cudaStream_t s) {
  if (rows * cols == 0) return;
  LFM_LAUNCH(blocks_for(rows * cols, 256), 256, 0, s, mul_rows_kernel)(a, lda, b, ldb, rows, cols, out, ldo);
  check_launch();
}

void add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  LFM_LAUNCH(blocks_for(n, 256), 256, 0, s, add_kernel)(y, x, n);
  check_launch();
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  LFM_LAUNCH(blocks_for(rows * cols, 256), 256, 0, s, add_bias_kernel)(y, bias, rows, cols);
  check_launch();
}

void softmax(float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  LFM_LAUNCH(1, 256, 0, s, softmax_kernel)(x, n);
  check_launch();
}

void gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out, cudaStream_t s) {
  if (n * cols == 0) return;
  LFM_LAUNCH(blocks_for(n * cols, 256), 256, 0, s, gather_rows_kernel)(x, cols, index, n, out);
  check_launch();
}

void embedding(DType type, const void* table, int64_t cols, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  const size_t row_bytes = device_row_bytes(type, cols);
  const auto* tb = static_cast<const uint8_t*>(table);
  const unsigned plain = blocks_for(n * cols, 256), groups = blocks_for(n * (cols / 8), 128);
  switch (type) {
    case DType::F32: LFM_LAUNCH(plain, 256, 0, s, embedding_kernel<DType::F32>)(tb, row_bytes, cols, ids, n, out); break;
    case DType::F16: LFM_LAUNCH(plain, 256, 0, s, embedding_kernel<DType::F16>)(tb, row_bytes, cols, ids, n, out); break;
    case DType::BF16: LFM_LAUNCH(plain, 256, 0, s, embedding_kernel<DType::BF16>)(tb, row_bytes, cols, ids, n, out); break;
    case DType::Q8_0: LFM_LAUNCH(groups, 128, 0, s, embedding_kernel<DType::Q8_0>)(tb, row_bytes, cols, ids, n, out); break;
    case DType::Q4_0: LFM_LAUNCH(groups, 128, 0, s, embedding_kernel<DType::Q4_0>)(tb, row_bytes, cols, ids, n, out); break;
    case DType::Q4_K: LFM_LAUNCH(groups, 128, 0, s, embedding_kernel<DType::Q4_K>)(tb, row_bytes, cols, ids, n, out); break;
    case DType::Q5_K: LFM_LAUNCH(groups, 128, 0, s, embedding_kernel<DType::Q5_K>)(tb, row_bytes, cols, ids, n, out); break;
    case DType::Q6_K: LFM_LAUNCH(groups, 128, 0, s, embedding_kernel<DType::Q6_K>)(tb, row_bytes, cols, ids, n, out); break;
    default: fail("cuda: no embedding kernel for ", dtype_name(type), " tables");
  }
  check_launch();
}

void moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k, const float* selection_bias,
               bool normalize, float scale, int32_t* experts, float* weights, cudaStream_t s) {
  LFM_CHECK(n_experts <= kMaxExperts && k >= 1 && k <= kMaxChosen && k <= n_experts, "cuda: moe_route supports up to ",
            kMaxExperts, " experts and ", kMaxChosen, " chosen, got ", k, " of ", n_experts);
  if (rows == 0) return;
  LFM_LAUNCH(blocks_for(rows, 64), 64, 0, s, moe_route_kernel)(logits, rows, n_experts, k, selection_bias, normalize, scale,
                                                       experts, weights);
  check_launch();
}

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids,
                 cudaStream_t s) {
  if (rows == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(rows), kArgmaxThreads, 0, s, argmax_rows_kernel)(logits, vocab, allowed, ids);
  check_launch();
}

void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k, int64_t cols,
                 float* out, cudaStream_t s) {
  if (rows * cols == 0) return;
  LFM_LAUNCH(blocks_for(rows * cols, 256), 256, 0, s, moe_combine_kernel)(x, src, weights, rows, k, cols, out);
  check_launch();
}

void moe_combine_add_rms_norm(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k,
                              int64_t cols, float* h, const float* norm_w, float eps, float* out, cudaStream_t s) {
  if (rows == 0) return;
  LFM_LAUNCH(static_cast<unsigned>(rows), 256, 0, s, moe_combine_add_rms_norm_kernel)(x, src, weights, k, cols, h,
                                                                                     norm_w, eps, out);
  check_launch();
}

void moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first, int32_t* index,
               int32_t* src, cudaStream_t s) {
  LFM_CHECK(n_experts >= 1 && n_experts <= kMaxExperts, "cuda: moe_group supports up to ", kMaxExperts,
            " experts, got ", n_experts);
  LFM_LAUNCH(1, kGroupThreads, sizeof(int32_t) * static_cast<size_t>(n_experts + 1), s, moe_group_kernel)(
      experts, rows * k, k, n_experts, first, index, src);
  check_launch();
}

}  // namespace lfm::cuda
