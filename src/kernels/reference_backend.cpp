// Plain reference implementations of every kernel. Clear loops, float32 accumulation, the
// summation order fixed per output element. Parallel only where it is free of ordering effects
// (independent output rows or heads).
#include "kernels/reference_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/dequant.h"
#include "kernels/reference_ops.h"
#include "kernels/weight_pack.h"

namespace lfm {

namespace ref {

float dot(const float* a, const float* b, int64_t n) {
  // Eight partial sums: a fixed order, and friendly to auto-vectorisation.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) o[i] = w[i] * (xr[i] * scale);
  }
}

void rope_angles(int64_t position, const float* inv_freq, int64_t half, float* cs, float* sn) {
  for (int64_t j = 0; j < half; ++j) {
    // float32 angle like transformers (position · inv_freq in fp32), cos/sin of that value.
    const float angle = static_cast<float>(position) * inv_freq[j];
    cs[j] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sn[j] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
               const float* inv_freq) {
  const int64_t half = head_dim / 2;
  std::vector<float> cs(half), sn(half);
  for (int64_t t = 0; t < n_tokens; ++t) {
    rope_angles(positions[t], inv_freq, half, cs.data(), sn.data());
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * cs[j] - b * sn[j];
        v[j + half] = b * cs[j] + a * sn[j];
      }
    }
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

bool rounds_input_to_bf16(const TensorView& w) {
  LFM_CHECK(w.act_type == DType::F32 || (w.act_type == DType::BF16 && w.dtype == DType::BF16), "kernels: a ",
            dtype_name(w.dtype), " weight cannot multiply ", dtype_name(w.act_type), " activations");
  return w.act_type == DType::BF16;
}

void round_to_bf16(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

}  // namespace ref

void ReferenceBackend::matmul(const float* x, int64_t n, const TensorView& w, float* y) {
  LFM_CHECK(w.shape.size() == 2, "kernels: matmul weight must be 2-D, got ", shape_str(w.shape));
  const int64_t out = w.shape[0], in = w.shape[1];
  LFM_CHECK(dtype_decodable(w.dtype), "kernels: matmul has no path for weight type ", dtype_name(w.dtype));
  std::vector<float> rounded;
  if (ref::rounds_input_to_bf16(w)) {
    rounded.resize(static_cast<size_t>(n * in));
    ref::round_to_bf16(x, n * in, rounded.data());
    x = rounded.data();
  }
  // Rows of W are split across threads; each thread decodes a row once and uses it for
  // every token, so the weight is read once per call whatever n is.
  pool_.parallel_for(out, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t j = begin; j < end; ++j) {
      const float* wr;
      if (w.dtype == DType::F32) {
        wr = reinterpret_cast<const float*>(w.row(j));
      } else {
        dequantize_row(w.dtype, w.row(j), row.data(), in);
        wr = row.data();
      }
      for (int64_t i = 0; i < n; ++i) y[i * out + j] = ref::dot(x + i * in, wr, in);
    }
  });
}

void ReferenceBackend::embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t d = table.cols();
  for (int64_t i = 0; i < n; ++i) {
    LFM_CHECK(ids[i] >= 0 && ids[i] < table.rows(), "kernels: token id ", ids[i], " outside vocabulary of ",
              table.rows());
    dequantize_row(table.dtype, table.row(ids[i]), out + i * d, d);
  }
}

void ReferenceBackend::rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
  ref::rms_norm(x, w, rows, dim, eps, out);
}

void ReferenceBackend::rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                 const int64_t* positions, const float* inv_freq) {
  ref::rope_neox(x, n_tokens, n_heads, head_dim, positions, inv_freq);
}

void ReferenceBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}
void ReferenceBackend::mul(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}
void ReferenceBackend::add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}
void ReferenceBackend::softmax(float* x, int64_t n) { ref::softmax(x, n); }

void ReferenceBackend::mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols,
                                float* out, int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) mul(a + r * lda, b + r * ldb, cols, out + r * ldo);
}

void ReferenceBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) add(y + r * cols, bias, cols);
}

void ReferenceBackend::gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) std::copy_n(x + static_cast<int64_t>(index[i]) * cols, cols, out + i * cols);
}

void ReferenceBackend::moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k,
                                 const float* selection_bias, bool normalize, float scale, int32_t* experts,
                                 float* weights) {
  LFM_CHECK(k >= 1 && k <= n_experts, "kernels: moe_route picks ", k, " of ", n_experts, " experts");
  std::vector<float> score(n_experts), sel(n_experts);
  std::vector<int64_t> idx(n_experts);
  std::vector<std::pair<int64_t, float>> chosen;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t e = 0; e < n_experts; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[t * n_experts + e]));
      sel[e] = score[e] + (selection_bias ? selection_bias[e] : 0.0f);
    }
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return sel[x] > sel[y]; });
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += score[idx[j]];
    chosen.clear();
    for (int64_t j = 0; j < k; ++j) {
      float wt = score[idx[j]];
      if (normalize) wt /= (sum + 1e-6f);
      chosen.push_back({idx[j], wt * scale});
    }
    std::sort(chosen.begin(), chosen.end());
    for (int64_t j = 0; j < k; ++j) {
      experts[t * k + j] = static_cast<int32_t>(chosen[j].first);
      weights[t * k + j] = chosen[j].second;
    }
  }
}

void ReferenceBackend::moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k,
                                   int64_t cols, float* out) {
  for (int64_t t = 0; t < rows; ++t) {
    float* dst = out + t * cols;
    std::fill(dst, dst + cols, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float wt = weights[t * k + j];
      const float* row = x + static_cast<int64_t>(src[t * k + j]) * cols;
      for (int64_t i = 0; i < cols; ++i) dst[i] += wt * row[i];
    }
  }
}

void ReferenceBackend::moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first,
                                 int32_t* index, int32_t* src) {
  std::fill(first, first + n_experts + 1, 0);
  for (int64_t i = 0; i < rows * k; ++i) {
    LFM_CHECK(experts[i] >= 0 && experts[i] < n_experts, "kernels: moe_group got expert ", experts[i], " of ",
              n_experts);
    ++first[experts[i] + 1];
  }
  for (int64_t e = 0; e < n_experts; ++e) first[e + 1] += first[e];
  std::vector<int32_t> cursor(first, first + n_experts);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = cursor[experts[t * k + j]]++;
      index[r] = static_cast<int32_t>(t);
      src[t * k + j] = r;
    }
}

void ReferenceBackend::argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed,
                                   int32_t* ids) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * vocab;
    int64_t best = -1;
    for (int64_t i = 0; i < vocab; ++i)
      if ((!allowed || allowed[i]) && (best < 0 || x[i] > x[best])) best = i;
    LFM_CHECK(best >= 0, "argmax: no token is allowed");
    ids[r] = static_cast<int32_t>(best);
  }
}

std::unique_ptr<PreparedWeights> ReferenceBackend::prepare_weights(WeightSet& set) { return prepare_cpu_weights(set); }

std::unique_ptr<Backend> make_reference_backend(ThreadPool& pool) { return std::make_unique<ReferenceBackend>(pool); }

}  // namespace lfm
