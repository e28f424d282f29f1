// The CUDA backend's mixture-of-experts and sampling ops (class in cuda_backend_impl.h): routing,
// grouping rows by expert, the experts' grouped matmul and the weighted combine; argmax, logit
// edits, top candidates and log-sum-exp over the vocabulary rows.
#include "kernels/cuda/cuda_backend_impl.h"

#include <string>
#include <vector>

namespace lfm::cuda {

void CudaBackend::moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k,
                            const float* selection_bias, bool normalize, float scale, int32_t* experts,
                            float* weights) {
  auto timer = time_op("moe_route");
  enqueue("moe_route", [this](const float* logits, int64_t rows, int64_t e, int64_t k, const float* bias, bool norm,
                              float scale, int32_t* experts, float* weights) {
    cuda::moe_route(logits, rows, e, k, bias, norm, scale, experts, weights, stream_);
  }, logits, rows, n_experts, k, selection_bias, normalize, scale, experts, weights);
}

void CudaBackend::moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first,
                            int32_t* index, int32_t* src) {
  auto timer = time_op("moe_group");
  enqueue("moe_group", [this](const int32_t* experts, int64_t rows, int64_t k, int64_t e, int32_t* first,
                              int32_t* index, int32_t* src) {
    cuda::moe_group(experts, rows, k, e, first, index, src, stream_);
  }, experts, rows, k, n_experts, first, index, src);
}

void CudaBackend::moe_matmul(const float* x, const int32_t* first, std::span<const TensorView* const> ws, int64_t rows,
                             float* y) {
  const int64_t E = static_cast<int64_t>(ws.size());
  LFM_CHECK(E > 0, "cuda: moe_matmul without experts");
  const TensorView& w0 = *ws[0];
  for (const TensorView* w : ws)
    LFM_CHECK(w->dtype == w0.dtype && w->shape == w0.shape, "cuda: moe_matmul's experts differ: ",
              dtype_name(w->dtype), " ", shape_str(w->shape), " and ", dtype_name(w0.dtype), " ", shape_str(w0.shape));
  const int64_t out = w0.shape[0], cols = w0.shape[1];
  if (gemm_path(rows / E)) {
    // Long batches (prefill), where the experts average a cuBLAS matmul's worth of rows: each
    // expert's rows as one matmul, sized on the host from the groups (one wait; the step is
    // compute-bound). Fewer rows (batched decode) stay one grouped launch: no wait mid-step, no
    // launch per expert, and the step remains one CUDA graph.
    std::vector<int32_t> f(static_cast<size_t>(E + 1));
    download(f.data(), first, f.size() * sizeof(int32_t));
    LFM_CHECK(f[0] == 0 && f[E] == rows, "cuda: moe_matmul's groups cover ", f[E] - f[0], " rows, not ", rows);
    for (int64_t e = 0; e < E; ++e)
      if (f[e + 1] > f[e]) matmul(x + f[e] * cols, f[e + 1] - f[e], *ws[e], y + f[e] * out);
    return;
  }
  auto timer = time_op(profile_.enabled() ? cat("moe_matmul ", dtype_name(w0.dtype)) : std::string());
  const void* const* list = expert_list(ws);
  bool vec = true;
  for (const TensorView* w : ws) vec = vec && cuda::matmul_vector_ok(w->dtype, device_weight(*w), cols, x);
  enqueue("moe_matmul", [this](DType t, const void* const* list, int64_t E, int64_t out, int64_t cols, const float* x,
                               const int32_t* first, float* y, bool vec) {
    cuda::grouped_matmul(t, list, E, out, cols, x, first, y, vec, stream_);
  }, w0.dtype, list, E, out, cols, x, first, y, vec);
}

void CudaBackend::argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) {
  auto timer = time_op("argmax_rows");
  enqueue("argmax_rows", [this](const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) {
    cuda::argmax_rows(logits, rows, vocab, allowed, ids, stream_);
  }, logits, rows, vocab, allowed, ids);
}

void CudaBackend::edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) {
  auto timer = time_op("edit_logits");
  enqueue("edit_logits", [this](float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) {
    cuda::edit_logits(logits, vocab, edits, n, stream_);
  }, logits, vocab, edits, n);
}

void CudaBackend::top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                                 const uint8_t* allowed, int64_t n, Candidate* best, float* tail) {
  auto timer = time_op("top_candidates");
  enqueue("top_candidates", [this](const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                                   const uint8_t* allowed, int64_t n, Candidate* best, float* tail) {
    cuda::top_candidates(logits, vocab, rows, count, allowed, n, best, tail, stream_);
  }, logits, vocab, rows, count, allowed, n, best, tail);
}

void CudaBackend::logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) {
  auto timer = time_op("logsumexp_rows");
  enqueue("logsumexp_rows", [this](const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) {
    cuda::logsumexp_rows(logits, vocab, rows, count, out, stream_);
  }, logits, vocab, rows, count, out);
}

void CudaBackend::moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k,
                              int64_t cols, float* out) {
  auto timer = time_op("moe_combine");
  enqueue("moe_combine", [this](const float* x, const int32_t* src, const float* w, int64_t rows, int64_t k,
                                int64_t cols, float* out) { cuda::moe_combine(x, src, w, rows, k, cols, out, stream_); },
          x, src, weights, rows, k, cols, out);
}

void CudaBackend::moe_combine_add_rms_norm(const float* x, const int32_t* src, const float* weights, int64_t rows,
                                           int64_t k, int64_t cols, float* y, float* h, const float* norm, float eps,
                                           float* out) {
  if (!fuse_ || (norm && out == h))
    return Backend::moe_combine_add_rms_norm(x, src, weights, rows, k, cols, y, h, norm, eps, out);
  auto timer = time_op("moe_combine_add_rms_norm");
  enqueue("moe_combine_add_rms_norm", [this](const float* x, const int32_t* src, const float* w, int64_t rows,
                                             int64_t k, int64_t cols, float* h, const float* norm, float eps,
                                             float* out) {
    cuda::moe_combine_add_rms_norm(x, src, w, rows, k, cols, h, norm, eps, out, stream_);
  }, x, src, weights, rows, k, cols, h, norm, eps, out);
}

// A device array of the experts' weight pointers, uploaded once per expert set (keyed by its
// first matrix, checked against the whole list).
const void* const* CudaBackend::expert_list(std::span<const TensorView* const> ws) {
  std::vector<const void*> ptrs;
  for (const TensorView* w : ws) ptrs.push_back(device_weight(*w));
  ExpertList& l = expert_lists_[ws[0]];
  if (l.ptrs != ptrs) {
    ensure_capacity(*this, l.dev, ptrs.size() * sizeof(void*));
    upload(l.dev.data(), ptrs.data(), ptrs.size() * sizeof(void*));
    l.ptrs = std::move(ptrs);
  }
  return l.dev.as<const void* const>();
}

}  // namespace lfm::cuda
