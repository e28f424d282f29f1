// The plain reference CPU backend. Optimised backends derive from it and override the hot ops,
// inheriting the rest.
#pragma once

#include <vector>

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
                 float* out, int64_t window) override;
  void short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel, const float* w,
                  const float* bias, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void mul(const float* a, const float* b, int64_t n, float* out) override;
  void add(float* y, const float* x, int64_t n) override;
  void softmax(float* x, int64_t n) override;
  void mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols, float* out,
                int64_t ldo) override;
  void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) override;
  void gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) override;
  void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                  float* out) override;
  void gelu(const float* x, int64_t n, bool tanh_approximation, float* out) override;
  void segment_attention(const float* q, const float* k, const float* v, const SegmentAttention& a,
                         float* out) override;
  void segment_conv(const float* u, std::span<const int64_t> seg, int64_t dim, int64_t kernel, int64_t left,
                    const float* w, const float* bias, float* out) override;
  void activation(const float* x, int64_t n, Activation f, float* out) override;
  void glu(const float* x, int64_t rows, int64_t cols, float* out) override;
  void conv2d(const float* x, const Conv2d& c, const float* w, const float* bias, float* out) override;
  void rel_pos_attention(const float* q, const float* k, const float* v, const float* pos, const float* bias_u,
                         const float* bias_v, const RelPosAttention& a, float* out) override;
  void moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k, const float* selection_bias,
                 bool normalize, float scale, int32_t* experts, float* weights) override;
  void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k, int64_t cols,
                   float* out) override;
  void moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first, int32_t* index,
                 int32_t* src) override;
  void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) override;
  void edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) override;
  void logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) override;
  void top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                      const uint8_t* allowed, int64_t n, Candidate* best, float* tail) override;
  // Every CPU backend packs as prepare_cpu_weights does (kernels/weight_pack.h).
  std::unique_ptr<PreparedWeights> prepare_weights(WeightSet& set) override;

 protected:
  ThreadPool& pool_;

 private:
  std::vector<Candidate> candidate_scratch_;  // top_candidates' row copy, kept between steps
};

}  // namespace lfm
