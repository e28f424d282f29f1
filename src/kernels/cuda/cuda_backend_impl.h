// The CUDA backend's class, declared here so that its ops' launches can live in files of their
// own instead of one long class: cuda_backend.cpp (construction, device memory, weight upload, the
// step's descriptors), cuda_backend_ops.cpp (the language model's ops), cuda_backend_encoder.cpp
// (the audio and vision encoders' ops) and cuda_backend_moe.cpp (mixture-of-experts routing and
// sampling). Included only by those files; the rest of lfm sees kernels/cuda/cuda_backend.h. The
// class is in lfm::cuda, which the emulator's build renames (tests/cuda_emu/cuda_emu.h), so that
// the emulated copy links beside the real one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_graphs.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_profile.h"

namespace lfm::cuda {

// Long prompts take cuBLAS's tensor-core GEMM; shorter batches (decode) the warp-per-row kernels,
// whose results do not depend on the batch. LFM_CUDA_GEMM=own keeps every matmul on those.
inline constexpr int64_t kGemmMinTokens = 64;

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, ThreadPool& pool);
  ~CudaBackend() override;

  const char* name() const override { return name_.c_str(); }
  bool host_memory() const override { return false; }
  bool reads_only_prepared_copies() const override { return true; }  // every weight uploaded
  bool bitwise_batch_invariant() const override { return own_only_; }

  // ---- memory ----
  DeviceBuffer allocate(size_t bytes) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* dst, size_t bytes) override;

  // ---- weights: every tensor uploaded once, into one arena ----
  std::unique_ptr<PreparedWeights> prepare_weights(WeightSet& set) override;

  // ---- the step's descriptors ----
  void begin_step(std::span<const SeqRun> runs) override;
  // With graphs (LFM_CUDA_GRAPHS=1; LFM_CUDA_BUCKETS=0 turns this off), decode steps are padded
  // to cuda::decode_bucket_rows, and a padded step's layers are one run (one graph), its head
  // another.
  int64_t decode_step_rows(int64_t n) const override { return buckets_ ? cuda::decode_bucket_rows(n) : n; }
  int64_t decode_step_max_pad() const override { return buckets_ ? cuda::kMaxDecodePad : 0; }
  void launch_queued() override;

  // ---- ops ----
  void matmul(const float* x, int64_t n, const TensorView& w, float* y) override;
  void matmul_shared(const float* x, int64_t n, std::span<const TensorView* const> ws,
                     std::span<float* const> ys) override;
  void matmul_swiglu(const float* x, int64_t n, const TensorView& w1, const TensorView& w3, float* gate,
                     float* up) override;
  void matmul_add_rms_norm(const float* x, int64_t n, const TensorView& w, float* y, float* h, const float* norm,
                           float eps, float* out) override;
  void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) override;
  void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) override;
  void add_rms_norm(float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                    float* out) override;
  void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                 const float* inv_freq) override;
  void qk_norm_rope(float* q, float* k, const float* qw, const float* kw, int64_t n_tokens, int64_t n_heads,
                    int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions,
                    const float* inv_freq) override;
  void kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) override;
  void qk_norm_rope_kv_write(float* q, float* k, const float* v, const float* qw, const float* kw, int64_t n_tokens,
                             int64_t n_heads, int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions,
                             const float* inv_freq, const KvPool& pool, std::span<const SeqRun> runs) override;
  void attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads, float scale,
                 float* out, int64_t window) override;
  void short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel, const float* w,
                  const float* bias, float* out) override;
  void gated_short_conv(const float* proj, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                        const float* w, const float* bias, float* u, float* out) override;
  void matmul_gated_short_conv(const float* x, int64_t n, const TensorView& in_proj, float* proj, const ConvPool& pool,
                               std::span<const SeqRun> runs, int64_t kernel, const float* w, const float* bias,
                               float* u, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void mul(const float* a, const float* b, int64_t n, float* out) override { mul_rows(a, n, b, n, 1, n, out, n); }
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
  void moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first, int32_t* index,
                 int32_t* src) override;
  void moe_matmul(const float* x, const int32_t* first, std::span<const TensorView* const> ws, int64_t rows,
                  float* y) override;

  void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) override;
  void edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) override;
  void top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                      const uint8_t* allowed, int64_t n, Candidate* best, float* tail) override;
  void logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) override;
  void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k, int64_t cols,
                   float* out) override;
  void moe_combine_add_rms_norm(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k,
                                int64_t cols, float* y, float* h, const float* norm, float eps, float* out) override;

 private:
  cuda::OpProfile::Timer time_op(std::string_view name) { return profile_.time(stream_, name); }

  const void* device_weight(const TensorView& w) const {
    LFM_CHECK(w.packed && w.packed_layout == PackedLayout::kDevice, "cuda: a ", dtype_name(w.dtype), " weight ",
              shape_str(w.shape), " was not uploaded (load the model with LoadOptions::backend set to this backend)");
    return w.packed;
  }

  const void* const* expert_list(std::span<const TensorView* const> ws);

  void check_step(std::span<const SeqRun> runs) const {
    LFM_CHECK(runs.data() == step_runs_ && runs.size() == step_n_runs_,
              "cuda: a state op's runs are not the ones begin_step uploaded");
  }

  static cuda::DevKv dev_kv(const KvPool& p) {
    return cuda::DevKv{p.k, p.v, p.type, p.block_tokens, p.kv_heads, p.head_dim};
  }

  // Whether a matmul of n rows goes to cuBLAS (kGemmMinTokens+, unless LFM_CUDA_GEMM=own).
  bool gemm_path(int64_t n) const { return n >= kGemmMinTokens && !own_only_; }
  // y [n, rows] = x [n, cols] · Wᵀ by cuBLAS: gemm_input queues x's conversion to the GEMM's
  // operand type (bf16, f16 for F16 weights; nullptr for F32, which multiplies x itself) into
  // act_buf_, gemm_converted the product from it, so matrices that share an input convert it once.
  void gemm(const float* x, int64_t n, DType type, const void* w, int64_t rows, int64_t cols, float* y);
  const uint16_t* gemm_input(const float* x, int64_t n, int64_t cols, DType type);
  void gemm_converted(const float* x, const uint16_t* xa, int64_t n, DType type, const void* w, int64_t rows,
                      int64_t cols, float* y);

  template <typename Fn, typename... Args>
  void enqueue(const char* name, Fn fn, const Args&... args) {
    queue_->enqueue(name, std::move(fn), args...);
  }

  int device_;
  bool own_only_;
  bool attention_tc_;  // tensor-core attention for prefill steps (not with own_only_; LFM_CUDA_ATTN=plain says no)
  // A decode GEMV's residual add + norm or short conv, the MoE combine + add + norm, the K/V store
  // after q/k norm + RoPE, each in one launch (LFM_CUDA_FUSE=0: the separate ops).
  bool fuse_;
  bool buckets_ = false;  // decode steps padded to batch-size buckets (graphs only)
  cuda::OpProfile profile_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  const cuda::CublasLibrary& blas_lib_;  // opened by the first backend
  cublasHandle_t blas_ = nullptr;
  // The step's descriptors (begin_step) and what they were made from.
  std::vector<uint8_t> staging_;
  DeviceBuffer step_buf_;
  cuda::DevStep step_;
  const SeqRun* step_runs_ = nullptr;
  size_t step_n_runs_ = 0;
  int64_t step_splits_ = 1;  // attention's key splits this step (see begin_step)
  // GEMM scratch: activations rounded to 16 bits, a quantized matrix decoded to bf16.
  DeviceBuffer act_buf_, weight_buf_;
  DeviceBuffer segment_buf_;  // segment_attention's per-row key ranges
  DeviceBuffer conv2d_buf_, rel_pos_buf_;  // conv2d's per-row images, rel_pos_attention's per-row segments
  std::vector<int64_t> conv2d_host_, rel_pos_host_;
  std::vector<int64_t> segment_host_;
  DeviceBuffer conv_segment_buf_;  // segment_conv's per-row segments
  std::vector<int64_t> conv_segment_host_;
  DeviceBuffer partial_buf_;  // attention's per-split partials
  DeviceBuffer add_norm_done_;  // matmul_add_rms_norm's arrival counter (4 bytes, 0 between launches)
  struct ExpertList {
    std::vector<const void*> ptrs;  // host copy of what dev holds
    DeviceBuffer dev;
  };
  std::unordered_map<const TensorView*, ExpertList> expert_lists_;
  static constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
  DeviceBuffer blas_workspace_;
  // Declared last: the queue's ops use the members above, and it goes first.
  std::shared_ptr<FreeGate> gate_;
  std::unique_ptr<cuda::CudaGraphs> graphs_;
  std::unique_ptr<ReplayQueue> queue_;
};

}  // namespace lfm::cuda
