// Launchers of the CUDA kernels (the .cu files), called by the CUDA backend on its stream. Shapes
// follow Backend (kernels/backend.h); every pointer is device memory. Each output element has one
// fixed order of arithmetic whatever the batch (a row's sums never depend on the other rows), the
// property that makes a sequence's results independent of its neighbours.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "kernels/sampling_types.h"

namespace lfm::cuda {

// ---- a step's descriptors on the device (uploaded once per step by begin_step) ----
struct DevRun {
  int64_t row0, n_rows, pos0;
  int32_t blocks_at, n_blocks;  // its block table: blocks[blocks_at .. blocks_at + n_blocks)
  int32_t conv_slot;
  int32_t ckpt_at, n_ckpt;      // its checkpoints: ckpts[ckpt_at .. ckpt_at + n_ckpt)
};
struct DevCheckpoint {
  int64_t pos;
  int32_t snapshot;
};
// Up to kAttnTileRows consecutive rows of one run: the rows whose queries share the K/V tiles
// that one attention block loads. The tensor-core kernel cuts runs into wide tiles of up to
// kAttnWideTileRows rows, a block taking 64 / G of them (G query heads per KV head: 64 query vectors).
constexpr int kAttnTileRows = 8, kAttnWideTileRows = 64;
struct DevTile {
  int64_t row0;
  int32_t n_rows, run;
};
struct DevStep {
  const DevRun* runs = nullptr;
  const int32_t* blocks = nullptr;
  const DevCheckpoint* ckpts = nullptr;
  const int32_t* row_run = nullptr;  // [rows]: the run a packed row belongs to
  const DevTile* tiles = nullptr;
  const DevTile* wide_tiles = nullptr;
  int32_t n_runs = 0, n_tiles = 0, n_wide_tiles = 0;
  int64_t n_rows = 0;
  int64_t max_run_rows = 0;  // the most rows of one run (1: a decode step)
};

// State pool geometry (kernels/state_pools.h) as the kernels take it.
struct DevKv {
  void* k;
  void* v;
  DType type;
  int64_t block_tokens, kv_heads, head_dim;
};
struct DevConv {
  void* state;
  void* snapshots;
  DType type;
  int64_t rows, dim;
};

// ---- encoder ops (kernels_encoder.cu) ----
void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps, float* out,
                cudaStream_t s);
void gelu(const float* x, int64_t n, bool tanh_approximation, float* out, cudaStream_t s);
// Rows r attend to keys [row_begin[r], row_end[r]) (device arrays [rows]); head_dim ≤ 256;
// k, v have n_kv_heads heads (head h reads kv head h / (n_heads / n_kv_heads)).
void segment_attention(const float* q, const float* k, const float* v, const int64_t* row_begin,
                       const int64_t* row_end, int64_t rows, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                       float scale, float* out, cudaStream_t s);
// Backend::segment_conv with row r's segment [row_begin[r], row_end[r]) (device arrays [rows]).
void segment_conv(const float* u, const int64_t* row_begin, const int64_t* row_end, int64_t rows, int64_t dim,
                  int64_t kernel, int64_t left, const float* w, const float* bias, float* out, cudaStream_t s);
// Backend::activation: kind 0 ReLU, 1 SiLU.
void activation(const float* x, int64_t n, int kind, float* out, cudaStream_t s);
void glu(const float* x, int64_t rows, int64_t cols, float* out, cudaStream_t s);
// Backend::conv2d over `rows` output rows; image [3·rows] (device): per output row, its image's
// first input row, the image's rows and the row's index inside the image's output.
void conv2d(const float* x, const int64_t* image, int64_t rows, int64_t width, int64_t out_width, int64_t channels,
            bool depthwise, int64_t kernel, int64_t stride, int64_t pad, const float* w, const float* bias, float* out,
            cudaStream_t s);
// Backend::rel_pos_attention with row r's segment [row_begin[r], row_end[r]) (device arrays
// [rows]); head_dim ≤ 256.
void rel_pos_attention(const float* q, const float* k, const float* v, const float* pos, const float* bias_u,
                       const float* bias_v, const int64_t* row_begin, const int64_t* row_end, int64_t rows,
                       int64_t n_heads, int64_t head_dim, int64_t max_relative, float scale, float* out,
                       cudaStream_t s);

// ---- elementwise and row ops ----
void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out, cudaStream_t s);
// Backend::add_rms_norm: h += x, out = rms_norm(h), one block per row (out must not be h).
void add_rms_norm(float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out,
                  cudaStream_t s);
void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
               const float* inv_freq, cudaStream_t s);
// Backend::qk_norm_rope: one block per (token, head); head_dim even, at most 256.
void qk_norm_rope(float* q, float* k, const float* qw, const float* kw, int64_t n_tokens, int64_t n_heads,
                  int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions, const float* inv_freq,
                  cudaStream_t s);
// Backend::qk_norm_rope_kv_write: qk_norm_rope's blocks, each key head also storing its roped
// values into the cache, then one block per (token, value head) storing v, as kv_write does.
void qk_norm_rope_kv_write(float* q, float* k, const float* v, const float* qw, const float* kw, int64_t n_tokens,
                           int64_t n_heads, int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions,
                           const float* inv_freq, const DevKv& kv, const DevStep& step, cudaStream_t s);
void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s);
void mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols, float* out,
              int64_t ldo, cudaStream_t s);
void add(float* y, const float* x, int64_t n, cudaStream_t s);
void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t s);
void softmax(float* x, int64_t n, cudaStream_t s);
void gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out, cudaStream_t s);
void embedding(DType type, const void* table, int64_t cols, const int32_t* ids, int64_t n, float* out, cudaStream_t s);
void moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k, const float* selection_bias,
               bool normalize, float scale, int32_t* experts, float* weights, cudaStream_t s);
void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k, int64_t cols,
                 float* out, cudaStream_t s);
// Backend::moe_combine_add_rms_norm: one block per row, the bits of moe_combine then add_rms_norm
// (norm_w null: then add).
void moe_combine_add_rms_norm(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k,
                              int64_t cols, float* h, const float* norm_w, float eps, float* out, cudaStream_t s);
// Backend::moe_group (one block; deterministic: an expert's tokens in ascending order).
void moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first, int32_t* index,
               int32_t* src, cudaStream_t s);
// Backend::argmax_rows: one block per row, the lowest index among equal maxima.
void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids,
                 cudaStream_t s);
// Backend::edit_logits (one thread per edit) and Backend::top_candidates (one block per listed
// row: radix select, the ties in id order, a bitonic sort; n <= 256).
void edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n, cudaStream_t s);
// Backend::logsumexp_rows: one block per listed row, the sum in double in a fixed order.
void logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out, cudaStream_t s);
void top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                    const uint8_t* allowed, int64_t n, Candidate* best, float* tail, cudaStream_t s);
// out[i] = the float's bf16 rounding (round to nearest even), n values.
void to_bf16(const float* x, int64_t n, uint16_t* out, cudaStream_t s);
// The same to f16 (round to nearest even; past ±65504 becomes ±inf).
void to_f16(const float* x, int64_t n, uint16_t* out, cudaStream_t s);
// A [rows, cols] matrix of `type` (as the backend keeps it) decoded to bf16 (for the tensor-core GEMM of long prefills).
void dequantize_to_bf16(DType type, const void* w, int64_t rows, int64_t cols, uint16_t* out, cudaStream_t s);

// ---- matmul: y[n, rows] = x[n, cols] · Wᵀ with W [rows, cols] as the backend keeps it ----
// (quantized types in the split-block layout, kernels/split_blocks.h). Every output's sum is the
// same whatever n (kernels_matmul.cu says how).
void matmul(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y,
            cudaStream_t s);

// Backend::matmul_add_rms_norm for 1 to kMaxFusedNormRows tokens: h[n, rows] += x · Wᵀ, then
// (norm_w given) out = rms_norm(h) · norm_w, in one launch: the vector kernel adds each output into
// h, and the last of its blocks to finish takes the norms with add_rms_norm's arithmetic (the same
// bits as matmul then add_rms_norm; one row with the whole block, more with a warp a row, serially,
// which is why only small batches are fused). done: a device word, 0 before and after the launch
// (the launches of one stream may share it). Needs what the vector kernel reads (matmul_vector_ok).
constexpr int64_t kMaxFusedNormRows = 4;
void matmul_add_rms_norm(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* h,
                         const float* norm_w, float eps, float* out, unsigned* done, cudaStream_t s);

// Backend::matmul_gated_short_conv for a decode step (step.n_rows tokens, one a run): proj [n,
// 3·dim] = x · Wᵀ (W [3·dim, cols]: B | C | x), each block's channels then running
// short_conv_gated's decode conv for every token (the same bits), in one launch. Needs what the vector kernel reads.
void matmul_gated_short_conv(DType type, const void* w, int64_t dim, int64_t cols, const float* x, float* proj,
                             const DevConv& conv, const DevStep& step, int64_t kernel, const float* taps,
                             const float* bias, float* out, cudaStream_t s);

// Matrices that read the same input (Backend::matmul_shared: q/k/v, w1/w3), up to 4, of one
// dtype and column count, in one launch; each output computed as matmul computes it.
// Whether the vector GEMV kernel (decode, verification, small batches) is launched with
// programmatic dependent launch (launch.cuh: its blocks start while the kernel before them ends,
// asking L2 for their weight rows first). Process-wide; CudaBackend sets it from LFM_CUDA_PDL=1
// when it is made (off by default until it has run on a GPU).
void set_pdl_launches(bool on);

constexpr int kMaxSharedMatmuls = 4;
struct SharedMatmul {
  int count = 0;
  const void* w[kMaxSharedMatmuls] = {};
  float* y[kMaxSharedMatmuls] = {};
  int64_t rows[kMaxSharedMatmuls] = {};
};
void matmul_shared(DType type, const SharedMatmul& m, int64_t cols, const float* x, int64_t n, bool vec, cudaStream_t s);

// out [n, rows] = silu(x · W1ᵀ) ⊙ (x · W3ᵀ) in one launch (each warp takes a row of both), the
// bits of matmul on each then swiglu. Needs what the vector kernel reads (matmul_vector_ok).
void matmul_swiglu(DType type, const void* w1, const void* w3, int64_t rows, int64_t cols, const float* x, int64_t n,
                   float* out, cudaStream_t s);

// Backend::moe_matmul for batches of a few rows: one launch for every expert, blocks (W rows,
// expert); an expert's rows [first[e], first[e + 1]) read from device memory (experts without rows
// do nothing), its matrix from w_list[e] (device array of device pointers). Each output is
// computed as matmul computes it. `vec`: every matrix, and x, allow the vector kernel (see matmul).
void grouped_matmul(DType type, const void* const* w_list, int64_t n_experts, int64_t rows, int64_t cols,
                    const float* x, const int32_t* first, float* y, bool vec, cudaStream_t s);
// Whether matmul's vector kernel can read a matrix at w (and x) of `cols` columns.
bool matmul_vector_ok(DType type, const void* w, int64_t cols, const float* x);

// ---- state ops ----
void kv_write(const DevKv& kv, const DevStep& step, const float* k, const float* v, cudaStream_t s);
// Causal paged attention (window > 0: a row at position p sees keys p − window < j ≤ p only).
// Keys go in splits of kAttnSplitKeys positions (one block per tile, kv head and split; a row's
// splits that hold some of its keys are merged in order), and within a split in groups of 32 with
// an online softmax: a row's arithmetic depends only on its own keys' range. `partial` holds
// rows · n_heads · ceil(max_keys / kAttnSplitKeys) · (head_dim + 2) floats. tensor_cores: the
// products on the tensor cores (kernels_attention_tc.cu: tf32 in three terms, float32-accurate,
// its own bits), else on the CUDA cores; both give a row bits that depend only on its own keys.
constexpr int64_t kAttnSplitKeys = 256;
void attention(const float* q, const DevKv& kv, const DevStep& step, int64_t n_heads, float scale, float* out,
               int64_t max_keys, float* partial, int64_t window, bool tensor_cores, cudaStream_t s);
void short_conv(const float* u, const DevConv& conv, const DevStep& step, int64_t kernel, const float* w,
                const float* bias, float* out, cudaStream_t s);
// Backend::gated_short_conv: the conv's input B ⊙ x and its output's gate C read from the
// projection proj [T, 3·dim] (B | C | x) instead of stored apart; out = C ⊙ conv(B ⊙ x).
void short_conv_gated(const float* u, const float* proj, const DevConv& conv, const DevStep& step, int64_t kernel,
                      const float* w, const float* bias, float* out, cudaStream_t s);

}  // namespace lfm::cuda
