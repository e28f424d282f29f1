// The plain reference CPU backend. Optimised backends derive from it and override the hot ops,
// inheriting the rest.
#pragma once

#include "kernels/backend.h"

namespace lfm {

class ReferenceBackend : public Backend {
 public:
  explicit ReferenceBackend(ThreadPool& pool) : pool_(pool) {}
  const char* name() const override { return "cpu-reference"; }

  void matmul(const float* x, int64_t n, const TensorView& w, float* y) override;
  void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) override;
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) override;
  void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                 const float* inv_freq) override;
  void kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) override;
  void attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads, float scale,
                 float* out) override;
  void short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel, const float* w,
                  const float* bias, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void mul(const float* a, const float* b, int64_t n, float* out) override;
  void add(float* y, const float* x, int64_t n) override;
  void softmax(float* x, int64_t n) override;

 protected:
  ThreadPool& pool_;
};

}  // namespace lfm
