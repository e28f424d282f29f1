// The CUDA backend's ops for the language model's layers (class in cuda_backend_impl.h): matmuls
// (the warp-per-row kernels, or cuBLAS's GEMM for long prompts), embedding, norms, rope, the KV
// cache and paged attention, the short convs, and the elementwise ops. Each queues its launch on
// the backend's stream (kernels in the .cu files beside it).
#include "kernels/cuda/cuda_backend_impl.h"

#include <string>

#include "kernels/cuda/cuda_check.h"

namespace lfm::cuda {

void CudaBackend::matmul(const float* x, int64_t n, const TensorView& w, float* y) {
  LFM_CHECK(w.shape.size() == 2, "cuda: matmul weight must be 2-D, got ", shape_str(w.shape));
  const void* dw = device_weight(w);
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const bool by_gemm = gemm_path(n);
  auto timer = time_op(profile_.enabled() ? cat(by_gemm ? "gemm " : "matmul ", dtype_name(w.dtype)) : std::string());
  if (by_gemm) return gemm(x, n, w.dtype, dw, rows, cols, y);
  enqueue("matmul", [this](DType t, const void* dw, int64_t rows, int64_t cols, const float* x, int64_t n, float* y) {
    cuda::matmul(t, dw, rows, cols, x, n, y, stream_);
  }, w.dtype, dw, rows, cols, x, n, y);
}

// Matrices of one type and width on the same input (q/k/v, w1/w3): in one launch when the batch
// takes the warp-per-row kernels, else through cuBLAS from one conversion of the input; each
// output the bits matmul gives.
void CudaBackend::matmul_shared(const float* x, int64_t n, std::span<const TensorView* const> ws,
                                std::span<float* const> ys) {
  bool alike = !ws.empty();
  for (const TensorView* w : ws)
    alike = alike && w->shape.size() == 2 && w->dtype == ws[0]->dtype && w->shape[1] == ws[0]->shape[1];
  if (alike && gemm_path(n)) {
    auto timer = time_op(profile_.enabled() ? cat("gemm ", dtype_name(ws[0]->dtype)) : std::string());
    const uint16_t* xa = gemm_input(x, n, ws[0]->shape[1], ws[0]->dtype);
    for (size_t i = 0; i < ws.size(); ++i)
      gemm_converted(x, xa, n, ws[i]->dtype, device_weight(*ws[i]), ws[i]->shape[0], ws[i]->shape[1], ys[i]);
    return;
  }
  if (!alike || ws.size() > static_cast<size_t>(cuda::kMaxSharedMatmuls)) return Backend::matmul_shared(x, n, ws, ys);
  auto timer = time_op(profile_.enabled() ? cat("matmul_shared ", dtype_name(ws[0]->dtype)) : std::string());
  const int64_t cols = ws[0]->shape[1];
  cuda::SharedMatmul m;
  bool vec = true;
  for (size_t i = 0; i < ws.size(); ++i) {
    m.w[m.count] = device_weight(*ws[i]);
    m.y[m.count] = ys[i];
    m.rows[m.count] = ws[i]->shape[0];
    vec = vec && cuda::matmul_vector_ok(ws[i]->dtype, m.w[m.count], cols, x);
    ++m.count;
  }
  enqueue("matmul_shared", [this](DType t, const cuda::SharedMatmul& m, int64_t cols, const float* x, int64_t n,
                                  bool vec) { cuda::matmul_shared(t, m, cols, x, n, vec, stream_); },
          ws[0]->dtype, m, cols, x, n, vec);
}

void CudaBackend::matmul_swiglu(const float* x, int64_t n, const TensorView& w1, const TensorView& w3, float* gate,
                                float* up) {
  const bool fused = !gemm_path(n) && w1.dtype == w3.dtype && w1.shape == w3.shape &&
                     w1.shape.size() == 2 && cuda::matmul_vector_ok(w1.dtype, device_weight(w1), w1.shape[1], x) &&
                     cuda::matmul_vector_ok(w3.dtype, device_weight(w3), w3.shape[1], x);
  if (!fused) return Backend::matmul_swiglu(x, n, w1, w3, gate, up);
  auto timer = time_op(profile_.enabled() ? cat("matmul_swiglu ", dtype_name(w1.dtype)) : std::string());
  enqueue("matmul_swiglu", [this](DType t, const void* w1, const void* w3, int64_t rows, int64_t cols, const float* x,
                                  int64_t n, float* out) { cuda::matmul_swiglu(t, w1, w3, rows, cols, x, n, out, stream_); },
          w1.dtype, device_weight(w1), device_weight(w3), w1.shape[0], w1.shape[1], x, n, gate);
}

// Up to kMaxFusedNormRows tokens: the product added into h and the norms taken in the matmul's
// own launch (its last block), add_rms_norm's bits. Larger batches take the two launches.
void CudaBackend::matmul_add_rms_norm(const float* x, int64_t n, const TensorView& w, float* y, float* h,
                                      const float* norm, float eps, float* out) {
  LFM_CHECK(w.shape.size() == 2, "cuda: matmul weight must be 2-D, got ", shape_str(w.shape));
  const void* dw = device_weight(w);
  const int64_t rows = w.shape[0], cols = w.shape[1];
  if (!fuse_ || n < 1 || n > cuda::kMaxFusedNormRows || !cuda::matmul_vector_ok(w.dtype, dw, cols, x) ||
      (norm && out == h))
    return Backend::matmul_add_rms_norm(x, n, w, y, h, norm, eps, out);
  auto timer = time_op(profile_.enabled() ? cat("matmul_add_rms_norm ", dtype_name(w.dtype)) : std::string());
  enqueue("matmul_add_rms_norm", [this](DType t, const void* dw, int64_t rows, int64_t cols, const float* x, int64_t n,
                                        float* h, const float* norm, float eps, float* out, unsigned* done) {
    cuda::matmul_add_rms_norm(t, dw, rows, cols, x, n, h, norm, eps, out, done, stream_);
  }, w.dtype, dw, rows, cols, x, n, h, norm, eps, out, static_cast<unsigned*>(add_norm_done_.data()));
}

void CudaBackend::embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) {
  auto timer = time_op("embedding");
  enqueue("embedding", [this](DType t, const void* table, int64_t cols, const int32_t* ids, int64_t n, float* out) {
    cuda::embedding(t, table, cols, ids, n, out, stream_);
  }, table.dtype, device_weight(table), table.cols(), ids, n, out);
}

void CudaBackend::rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
  auto timer = time_op("rms_norm");
  enqueue("rms_norm", [this](const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) {
    cuda::rms_norm(x, w, rows, dim, eps, out, stream_);
  }, x, w, rows, dim, eps, out);
}

void CudaBackend::add_rms_norm(float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                               float* out) {
  auto timer = time_op("add_rms_norm");
  LFM_CHECK(out != h, "cuda: add_rms_norm cannot write its norm over the sum");
  enqueue("add_rms_norm", [this](float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                                 float* out) { cuda::add_rms_norm(h, x, w, rows, dim, eps, out, stream_); },
          h, x, w, rows, dim, eps, out);
}

void CudaBackend::rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                            const float* inv_freq) {
  auto timer = time_op("rope");
  enqueue("rope", [this](float* x, int64_t n, int64_t h, int64_t hd, const int64_t* pos, const float* f) {
    cuda::rope_neox(x, n, h, hd, pos, f, stream_);
  }, x, n_tokens, n_heads, head_dim, positions, inv_freq);
}

void CudaBackend::qk_norm_rope(float* q, float* k, const float* qw, const float* kw, int64_t n_tokens, int64_t n_heads,
                               int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions,
                               const float* inv_freq) {
  auto timer = time_op("qk_norm_rope");
  enqueue("qk_norm_rope", [this](float* q, float* k, const float* qw, const float* kw, int64_t n, int64_t h, int64_t g,
                                 int64_t hd, float eps, const int64_t* pos, const float* f) {
    cuda::qk_norm_rope(q, k, qw, kw, n, h, g, hd, eps, pos, f, stream_);
  }, q, k, qw, kw, n_tokens, n_heads, kv_heads, head_dim, eps, positions, inv_freq);
}

void CudaBackend::kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) {
  auto timer = time_op("kv_write");
  check_step(runs);
  enqueue("kv_write", [this](const cuda::DevKv& kv, const cuda::DevStep& step, const float* k, const float* v) {
    cuda::kv_write(kv, step, k, v, stream_);
  }, dev_kv(pool), step_, k, v);
}

void CudaBackend::qk_norm_rope_kv_write(float* q, float* k, const float* v, const float* qw, const float* kw,
                                        int64_t n_tokens, int64_t n_heads, int64_t kv_heads, int64_t head_dim,
                                        float eps, const int64_t* positions, const float* inv_freq,
                                        const KvPool& pool, std::span<const SeqRun> runs) {
  if (!fuse_)
    return Backend::qk_norm_rope_kv_write(q, k, v, qw, kw, n_tokens, n_heads, kv_heads, head_dim, eps, positions,
                                          inv_freq, pool, runs);
  auto timer = time_op("qk_norm_rope_kv_write");
  check_step(runs);
  enqueue("qk_norm_rope_kv_write", [this](float* q, float* k, const float* v, const float* qw, const float* kw,
                                          int64_t n, int64_t h, int64_t g, int64_t hd, float eps, const int64_t* pos,
                                          const float* f, const cuda::DevKv& kv, const cuda::DevStep& step) {
    cuda::qk_norm_rope_kv_write(q, k, v, qw, kw, n, h, g, hd, eps, pos, f, kv, step, stream_);
  }, q, k, v, qw, kw, n_tokens, n_heads, kv_heads, head_dim, eps, positions, inv_freq, dev_kv(pool), step_);
}

void CudaBackend::attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads,
                            float scale, float* out, int64_t window) {
  auto timer = time_op("attention");
  check_step(runs);
  LFM_CHECK(pool.kv_heads > 0 && n_heads % pool.kv_heads == 0, "cuda: ", n_heads, " query heads cannot share ",
            pool.kv_heads, " kv heads");
  LFM_CHECK(window >= 0, "cuda: attention window ", window, " is negative");
  float* partial = nullptr;
  if (step_splits_ > 1) {  // rows of several splits leave (max, sum, acc) per split
    ensure_capacity(*this, partial_buf_, sizeof(float) * static_cast<size_t>(step_.n_rows * n_heads * step_splits_ * (pool.head_dim + 2)));
    partial = partial_buf_.as<float>();
  }
  // Prefill steps (as many rows as take cuBLAS's GEMMs: begin_step made their wide tiles; tiles
  // four rows full on average) on the tensor cores; decode rows, one a tile, on the CUDA-core
  // kernel made for them.
  const bool tc = attention_tc_ && step_.n_wide_tiles > 0 && step_.n_tiles * 4 <= step_.n_rows;
  enqueue("attention", [this](const float* q, const cuda::DevKv& kv, const cuda::DevStep& step, int64_t h, float scale,
                              float* out, int64_t max_keys, float* partial, int64_t window, bool tc) {
    cuda::attention(q, kv, step, h, scale, out, max_keys, partial, window, tc, stream_);
  }, q, dev_kv(pool), step_, n_heads, scale, out, step_splits_ * cuda::kAttnSplitKeys, partial, window, tc);
}

void CudaBackend::short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                             const float* w, const float* bias, float* out) {
  auto timer = time_op("short_conv");
  check_step(runs);
  LFM_CHECK(pool.rows == kernel - 1, "cuda: conv kernel ", kernel, " does not match state rows ", pool.rows);
  enqueue("short_conv", [this](const float* u, const cuda::DevConv& conv, const cuda::DevStep& step, int64_t kernel,
                               const float* w, const float* bias, float* out) {
    cuda::short_conv(u, conv, step, kernel, w, bias, out, stream_);
  }, u, cuda::DevConv{pool.state, pool.snapshots, pool.type, pool.rows, pool.dim}, step_, kernel, w, bias, out);
}

void CudaBackend::gated_short_conv(const float* proj, const ConvPool& pool, std::span<const SeqRun> runs,
                                   int64_t kernel, const float* w, const float* bias, float* u, float* out) {
  auto timer = time_op("gated_short_conv");
  check_step(runs);
  LFM_CHECK(pool.rows == kernel - 1, "cuda: conv kernel ", kernel, " does not match state rows ", pool.rows);
  (void)u;  // the products are computed inside the conv
  enqueue("gated_short_conv", [this](const float* proj, const cuda::DevConv& conv, const cuda::DevStep& step,
                                     int64_t kernel, const float* w, const float* bias, float* out) {
    cuda::short_conv_gated(nullptr, proj, conv, step, kernel, w, bias, out, stream_);
  }, proj, cuda::DevConv{pool.state, pool.snapshots, pool.type, pool.rows, pool.dim}, step_, kernel, w, bias, out);
}

// A decode step (one token a sequence, up to the vector kernel's batches): the conv inside the
// projection's launch (its blocks' channels).
void CudaBackend::matmul_gated_short_conv(const float* x, int64_t n, const TensorView& in_proj, float* proj,
                                          const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                                          const float* w, const float* bias, float* u, float* out) {
  LFM_CHECK(in_proj.shape.size() == 2, "cuda: matmul weight must be 2-D, got ", shape_str(in_proj.shape));
  const void* dw = device_weight(in_proj);
  const int64_t cols = in_proj.shape[1];
  if (!fuse_ || n < 1 || gemm_path(n) || step_.n_rows != n || step_.max_run_rows != 1 ||
      in_proj.shape[0] != 3 * pool.dim || !cuda::matmul_vector_ok(in_proj.dtype, dw, cols, x))
    return Backend::matmul_gated_short_conv(x, n, in_proj, proj, pool, runs, kernel, w, bias, u, out);
  auto timer = time_op(profile_.enabled() ? cat("matmul_gated_short_conv ", dtype_name(in_proj.dtype)) : std::string());
  check_step(runs);
  LFM_CHECK(pool.rows == kernel - 1, "cuda: conv kernel ", kernel, " does not match state rows ", pool.rows);
  enqueue("matmul_gated_short_conv", [this](DType t, const void* dw, int64_t dim, int64_t cols, const float* x,
                                            float* proj, const cuda::DevConv& conv, const cuda::DevStep& step,
                                            int64_t kernel, const float* w, const float* bias, float* out) {
    cuda::matmul_gated_short_conv(t, dw, dim, cols, x, proj, conv, step, kernel, w, bias, out, stream_);
  }, in_proj.dtype, dw, pool.dim, cols, x, proj, cuda::DevConv{pool.state, pool.snapshots, pool.type, pool.rows, pool.dim},
          step_, kernel, w, bias, out);
}

void CudaBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  auto timer = time_op("swiglu");
  enqueue("swiglu", [this](const float* g, const float* u, int64_t n, float* o) { cuda::swiglu(g, u, n, o, stream_); },
          gate, up, n, out);
}

void CudaBackend::add(float* y, const float* x, int64_t n) {
  auto timer = time_op("add");
  enqueue("add", [this](float* y, const float* x, int64_t n) { cuda::add(y, x, n, stream_); }, y, x, n);
}

void CudaBackend::softmax(float* x, int64_t n) {
  enqueue("softmax", [this](float* x, int64_t n) { cuda::softmax(x, n, stream_); }, x, n);
}

void CudaBackend::mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols,
                           float* out, int64_t ldo) {
  auto timer = time_op("mul_rows");
  enqueue("mul_rows", [this](const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols,
                             float* out, int64_t ldo) { cuda::mul_rows(a, lda, b, ldb, rows, cols, out, ldo, stream_); },
          a, lda, b, ldb, rows, cols, out, ldo);
}

void CudaBackend::add_bias(float* y, const float* bias, int64_t rows, int64_t cols) {
  auto timer = time_op("add_bias");
  enqueue("add_bias", [this](float* y, const float* b, int64_t rows, int64_t cols) { cuda::add_bias(y, b, rows, cols, stream_); },
          y, bias, rows, cols);
}

void CudaBackend::gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) {
  auto timer = time_op("gather_rows");
  enqueue("gather_rows", [this](const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) {
    cuda::gather_rows(x, cols, index, n, out, stream_);
  }, x, cols, index, n, out);
}

// y [n, rows] = x [n, cols] · Wᵀ on the tensor cores. In column-major terms W is a cols × rows
// matrix, x a cols × n one and y rows × n: y = Wᵀ x. F32 weights stay float32 (no TF32); F16
// weights multiply f16-rounded activations; BF16 and quantized ones (decoded to bf16 first)
// bf16-rounded activations, as transformers running in those dtypes does.
void CudaBackend::gemm(const float* x, int64_t n, DType type, const void* w, int64_t rows, int64_t cols, float* y) {
  gemm_converted(x, gemm_input(x, n, cols, type), n, type, w, rows, cols, y);
}

const uint16_t* CudaBackend::gemm_input(const float* x, int64_t n, int64_t cols, DType type) {
  if (type == DType::F32) return nullptr;
  // Scratch sized here, at the call: a queued op never allocates.
  ensure_capacity(*this, act_buf_, static_cast<size_t>(n * cols) * 2);
  uint16_t* xa = act_buf_.as<uint16_t>();
  enqueue("gemm", [this](const float* x, int64_t count, bool f16, uint16_t* xa) {
    if (f16) cuda::to_f16(x, count, xa, stream_);
    else cuda::to_bf16(x, count, xa, stream_);
  }, x, n * cols, type == DType::F16, xa);
  return xa;
}

void CudaBackend::gemm_converted(const float* x, const uint16_t* xa, int64_t n, DType type, const void* w,
                                 int64_t rows, int64_t cols, float* y) {
  uint16_t* wa = nullptr;
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16) {
    ensure_capacity(*this, weight_buf_, static_cast<size_t>(rows * cols) * 2);
    wa = weight_buf_.as<uint16_t>();
  }
  enqueue("gemm", [this](const float* x, const uint16_t* xa, int64_t n, DType type, const void* w, int64_t rows,
                         int64_t cols, float* y, uint16_t* wa) {
    const float one = 1.0f, zero = 0.0f;
    const int m = static_cast<int>(rows), nn = static_cast<int>(n), k = static_cast<int>(cols);
    if (type == DType::F32) {
      LFM_CUBLAS_CHECK(blas_lib_.sgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, k, &one, static_cast<const float*>(w), k,
                                   x, k, &zero, y, m));
      return;
    }
    const cudaDataType_t t = type == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;
    const void* a = w;
    if (wa) {
      cuda::dequantize_to_bf16(type, w, rows, cols, wa, stream_);
      a = wa;
    }
    LFM_CUBLAS_CHECK(blas_lib_.gemm_ex(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, nn, k, &one, a, t, k, xa, t, k, &zero, y,
                                  CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }, x, xa, n, type, w, rows, cols, y, wa);
}

}  // namespace lfm::cuda
