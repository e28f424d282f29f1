// The kernel interface. Kernels know nothing about LFM2: they see float32 activations,
// stored weights (any DType the backend supports) and plain shapes. The reference CPU backend
// implements every op plainly; faster backends (SIMD, quantized, CUDA) override the same calls
// and are tested against the reference on random inputs.
//
// Where data lives: every pointer an op takes (activations, scratch, ids, positions, indices,
// the small weight vectors) points into the backend's own memory (DeviceMemory, below): host
// memory for the CPU backends, device memory for a GPU. Callers allocate scratch there, upload
// what the host produced (token ids, positions) and download what it needs back (logits), so a
// step stays on the device between those two transfers. Matrices arrive as TensorViews; a backend
// reads its own prepared copy of them (prepare_weights). Shapes, counts and the SeqRun
// descriptors are host values.
//
// Invariant every implementation must keep: each output element is computed from its own
// inputs in a fixed order, independent of the batch size, the other rows and the thread count.
// That is what makes a sequence's results independent of its neighbours in a ragged batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/tensor.h"
#include "kernels/device_memory.h"
#include "kernels/sampling_types.h"
#include "kernels/state_pools.h"
#include "kernels/weight_set.h"

namespace lfm {

// Backend::segment_attention's shape (host values).
struct SegmentAttention {
  std::span<const int64_t> seg;      // segment bounds, seg[0] = 0, strictly increasing
  std::span<const int64_t> key_end;  // per segment, the end of its keys (seg[i] < key_end[i] ≤ seg[i+1]); empty: seg[i+1]
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  bool causal = false;
};
// Checks a SegmentAttention's bounds (lfm::Error "<who>: ..."); returns the longest segment.
int64_t check_segment_attention(const SegmentAttention& a, const char* who);

// Backend::conv2d's shape (host values): images packed by rows, channels last. Image i is rows
// [seg[i], seg[i+1]) of x, each row [width, in_channels]; its output is out_rows(rows) rows of
// [out_width(), channels], the images' outputs packed in the same order.
struct Conv2d {
  std::span<const int64_t> seg;  // input row bounds, seg[0] = 0, strictly increasing
  int64_t width = 0;             // W of every image
  int64_t channels = 0;          // C: output channels (= input channels when depthwise)
  bool depthwise = false;        // false: one input channel read by every output channel
  int64_t kernel = 3, stride = 1, pad = 0;  // square kernel, the same stride and zero padding both ways
  int64_t in_channels() const { return depthwise ? channels : 1; }
  int64_t out_rows(int64_t rows) const { return rows + 2 * pad < kernel ? 0 : (rows + 2 * pad - kernel) / stride + 1; }
  int64_t out_width() const { return out_rows(width); }
};
// Checks a Conv2d (lfm::Error "<who>: ..."); returns the output rows of all images together.
int64_t check_conv2d(const Conv2d& c, const char* who);

// Backend::rel_pos_attention's shape (host values): Transformer-XL style relative-position
// self-attention inside segments (a FastConformer's clips), no masking within a segment.
struct RelPosAttention {
  std::span<const int64_t> seg;  // segment bounds, seg[0] = 0, strictly increasing
  int64_t n_heads = 0, head_dim = 0;
  // P0: the position table has 2·P0 + 1 rows, row m for relative position P0 − m; P0 must be at
  // least the longest segment − 1 (so one table serves every segment of a call).
  int64_t max_relative = 0;
  float scale = 1.0f;
};
// Checks a RelPosAttention (lfm::Error "<who>: ..."); returns the longest segment.
int64_t check_rel_pos_attention(const RelPosAttention& a, const char* who);

// Backend::activation's function.
enum class Activation { kRelu, kSilu };

class ThreadPool;

class Backend : public DeviceMemory {
 public:
  ~Backend() override = default;
  virtual const char* name() const = 0;
  // Whether a row's results are the same bits whatever else is in the batch and however a
  // sequence's tokens are split into steps (every CPU backend; the CUDA backend only with its own
  // kernels for every matmul, LFM_CUDA_GEMM=own, since cuBLAS sums in another order for long
  // batches).
  virtual bool bitwise_batch_invariant() const { return true; }

  // ---- weights ----
  // Called once at load, before any op sees the weights: the backend makes the copies its
  // kernels read (a packed layout, device memory), points each view's `packed` at its copy and
  // each vector's `device` at its own, and returns the object that owns them; the model keeps it
  // as long as the views. The CPU backends pack (kernels/weight_pack.h) and share one layout.
  virtual std::unique_ptr<PreparedWeights> prepare_weights(WeightSet& set) = 0;
  // Whether, on weights prepared by this backend (or, for a host-memory backend, by the CPU
  // preparation every CPU backend shares), the kernels read a matrix's stored bytes only where it
  // got no prepared copy, and the embedding table's only where the table got none. Then a model
  // run on it keeps just those bytes and lets go of its files (LoadOptions::run_on).
  virtual bool reads_only_prepared_copies() const { return false; }

  // ---- a step ----
  // Called before the ops of a step with every sequence's run: a device backend uploads the
  // descriptors (block tables, checkpoints) once here, and the state ops of the step then receive
  // the same runs. The CPU backends read the runs where they are. A backend serves one step at a
  // time: two Forwards (two engines) on one backend must not step concurrently.
  virtual void begin_step(std::span<const SeqRun> runs) {}
  // The rows a decode step of n sequences (one new token each) runs on. A backend that replays
  // recorded launches (CUDA graphs) pads such steps to a few batch sizes, so that steps of
  // nearby sizes are one recorded run; Forward fills the rows past n with pad rows that work on
  // the state cache's pad state (StateCacheOptions::pad_rows) and are never read. n: no padding.
  virtual int64_t decode_step_rows(int64_t n) const { return n; }
  // The most pad rows decode_step_rows adds (0: it never pads): the state cache's pad state
  // (StateCacheOptions::pad_rows) needs one slot and block for each.
  virtual int64_t decode_step_max_pad() const { return 0; }
  // Launches the ops queued so far (a backend that queues them until the host waits) as one run;
  // the ops after it form the next. Forward calls it before a padded step's layers (after what
  // the cache queued between steps) and between them and its head: the layers' launches repeat
  // for every batch size of the bucket, the others do not.
  virtual void launch_queued() {}

  // y[n, W.rows] = x[n, W.cols] · Wᵀ, W stored [out, in] in any supported dtype.
  virtual void matmul(const float* x, int64_t n, const TensorView& w, float* y) = 0;

  // ys[i] = x · ws[i]ᵀ for matrices that read the same input (q/k/v, the FFN's w1/w3): bit for
  // bit what separate matmul calls give, but a backend may prepare the input once (quantize,
  // convert) and run all of them in one parallel pass.
  virtual void matmul_shared(const float* x, int64_t n, std::span<const TensorView* const> ws, std::span<float* const> ys) {
    for (size_t i = 0; i < ws.size(); ++i) matmul(x, n, *ws[i], ys[i]);
  }

  // The SwiGLU FFN's first half: gate = silu(x · W1ᵀ) ⊙ (x · W3ᵀ), [n, W1.rows], written over
  // `gate`; `up` [n, W3.rows] is scratch. Bit for bit matmul_shared then swiglu; a device backend
  // may compute both products in one pass and never store them.
  virtual void matmul_swiglu(const float* x, int64_t n, const TensorView& w1, const TensorView& w3, float* gate,
                             float* up) {
    const TensorView* ws[] = {&w1, &w3};
    float* ys[] = {gate, up};
    matmul_shared(x, n, ws, ys);
    swiglu(gate, up, n * w1.shape[0], gate);
  }

  // Independent matmuls, each with its own input and output (an MoE layer's experts on the
  // tokens routed to them): job i computes jobs[i].y = jobs[i].x · jobs[i].wᵀ over jobs[i].n rows,
  // bit for bit what separate matmul calls give, but a backend may run them in one parallel pass
  // (a decode step's experts are small matrices: one pass each would pay a pass's start-up cost
  // per matrix).
  struct MatmulJob {
    const float* x;
    int64_t n;
    const TensorView* w;
    float* y;
  };
  virtual void matmul_jobs(std::span<const MatmulJob> jobs) {
    for (const MatmulJob& j : jobs) matmul(j.x, j.n, *j.w, j.y);
  }

  // out[i, :] = row ids[i] of table [V, d] as float32.
  virtual void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) = 0;

  // RMSNorm over the last dim of x [rows, dim]: out = w * (x / sqrt(mean(x²) + eps)).
  // In place is allowed (out == x).
  virtual void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) = 0;

  // The residual add and the next RMSNorm in one op: h += x, then out = rms_norm(h) (h and x
  // [rows, dim]; out must not be h). Bit for bit add then rms_norm; a device backend does both in
  // one pass over h (one launch instead of two).
  virtual void add_rms_norm(float* h, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                            float* out) {
    add(h, x, rows * dim);
    rms_norm(h, w, rows, dim, eps, out);
  }

  // A residual branch's last projection, the residual add and the next RMSNorm: h += x · Wᵀ
  // ([n, W.rows]), then out = rms_norm(h) · norm (norm null: the sum only). y [n, W.rows] is
  // scratch for the product. Bit for bit matmul, then add_rms_norm (or add); a device backend may
  // add each product into h as it computes it and take the norm in the same launch.
  virtual void matmul_add_rms_norm(const float* x, int64_t n, const TensorView& w, float* y, float* h,
                                   const float* norm, float eps, float* out) {
    matmul(x, n, w, y);
    if (norm) add_rms_norm(h, y, norm, n, w.shape[0], eps, out);
    else add(h, y, n * w.shape[0]);
  }

  // NeoX (rotate-half) RoPE in place on x [n_tokens, n_heads, head_dim]; token t sits at
  // positions[t]; inv_freq has head_dim / 2 entries.
  virtual void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                         const float* inv_freq) = 0;

  // Attention's query and key preparation, in place: each head's head_dim values RMSNormed (q by
  // qw, k by kw, both [head_dim]), then NeoX RoPE at each token's position; q [T, n_heads,
  // head_dim], k [T, kv_heads, head_dim]. Bit for bit rms_norm of q and k, then rope_neox of each;
  // a device backend does all four in one pass.
  virtual void qk_norm_rope(float* q, float* k, const float* qw, const float* kw, int64_t n_tokens, int64_t n_heads,
                            int64_t kv_heads, int64_t head_dim, float eps, const int64_t* positions,
                            const float* inv_freq) {
    rms_norm(q, qw, n_tokens * n_heads, head_dim, eps, q);
    rms_norm(k, kw, n_tokens * kv_heads, head_dim, eps, k);
    rope_neox(q, n_tokens, n_heads, head_dim, positions, inv_freq);
    rope_neox(k, n_tokens, kv_heads, head_dim, positions, inv_freq);
  }

  // ---- state ops: all sequences of a step in one call (see state_pools.h) ----

  // Stores the step's new keys and values: row r of k, v [T, kv_heads, head_dim] goes to the
  // position its run gives it (pos0 + r - row0), through the run's block table.
  virtual void kv_write(const KvPool& pool, std::span<const SeqRun> runs, const float* k, const float* v) = 0;

  // qk_norm_rope, then kv_write of the roped keys and v [T, kv_heads, head_dim]: bit for bit the
  // two; a device backend may store each key head as it ropes it (one launch for both).
  virtual void qk_norm_rope_kv_write(float* q, float* k, const float* v, const float* qw, const float* kw,
                                     int64_t n_tokens, int64_t n_heads, int64_t kv_heads, int64_t head_dim, float eps,
                                     const int64_t* positions, const float* inv_freq, const KvPool& pool,
                                     std::span<const SeqRun> runs) {
    qk_norm_rope(q, k, qw, kw, n_tokens, n_heads, kv_heads, head_dim, eps, positions, inv_freq);
    kv_write(pool, runs, k, v);
  }

  // Causal GQA attention over paged keys/values that kv_write has already stored.
  // q [T, n_heads, head_dim]; the query of row r sits at position p = pos0 + r - row0 of its run
  // and sees that sequence's keys 0 .. p, or with a sliding window w > 0 only keys j with
  // p − w < j ≤ p (the last w positions; window 0: all of them). Keys older than the window stay
  // in the paged cache, unread. Head h uses kv head h / (n_heads / kv_heads).
  // out [T, n_heads, head_dim].
  virtual void attention(const float* q, const KvPool& pool, std::span<const SeqRun> runs, int64_t n_heads,
                         float scale, float* out, int64_t window) = 0;

  // Depthwise causal conv over time with each sequence's rolling state (slot conv_slot of pool).
  // u [T, dim]; w [dim, kernel] (tap kernel-1 multiplies the newest step); bias [dim] or null;
  // out [T, dim]. Inputs are seen as stored in pool.type (rounded once), the state is updated to
  // the last kernel-1 inputs, and each run's checkpoints copy the state into pool snapshots.
  virtual void short_conv(const float* u, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                          const float* w, const float* bias, float* out) = 0;

  // LFM2's gated conv block: proj [T, 3·dim] = B | C | x (the in-projection's output);
  // out [T, dim] = C ⊙ short_conv(B ⊙ x) with the state semantics of short_conv (which stores B ⊙ x).
  // `u` [T, dim] is scratch. Bit for bit mul_rows, short_conv, mul_rows; a device backend may
  // compute the products inside the conv and skip two passes.
  virtual void gated_short_conv(const float* proj, const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                                const float* w, const float* bias, float* u, float* out) {
    int64_t T = 0;
    for (const SeqRun& r : runs) T = T > r.row0 + r.n_rows ? T : r.row0 + r.n_rows;
    const int64_t d = pool.dim;
    mul_rows(proj, 3 * d, proj + 2 * d, 3 * d, T, d, u, d);
    short_conv(u, pool, runs, kernel, w, bias, out);
    mul_rows(proj + d, 3 * d, out, d, T, d, out, d);
  }
  // The conv block's first half: proj [T, 3·dim] = x · in_projᵀ, then gated_short_conv (out, u as
  // there). Bit for bit matmul then gated_short_conv; a device backend may run a decode step's
  // conv inside the projection's launch.
  virtual void matmul_gated_short_conv(const float* x, int64_t n, const TensorView& in_proj, float* proj,
                                       const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel,
                                       const float* w, const float* bias, float* u, float* out) {
    matmul(x, n, in_proj, proj);
    gated_short_conv(proj, pool, runs, kernel, w, bias, u, out);
  }


  // out = silu(gate) * up, elementwise over n values.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // out = a * b, elementwise.
  virtual void mul(const float* a, const float* b, int64_t n, float* out) = 0;
  // y += x, elementwise.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // In-place softmax over n values.
  virtual void softmax(float* x, int64_t n) = 0;

  // ---- row ops (what a model does between the big ops, kept on the backend's memory) ----
  // out[r, c] = a[r · lda + c] * b[r · ldb + c] for r < rows, c < cols (in place allowed: out
  // may be a or b with the same stride; ldb = 0 multiplies every row by the one row b, a scale).
  virtual void mul_rows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t cols,
                        float* out, int64_t ldo) = 0;
  // y[r, :] += bias for every row of y [rows, cols].
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t cols) = 0;
  // out[i, :] = x[index[i], :] for i < n; x and out [*, cols].
  virtual void gather_rows(const float* x, int64_t cols, const int32_t* index, int64_t n, float* out) = 0;

  // ---- encoder ops (the vision tower: LayerNorm, GELU, attention within image tiles) ----
  // LayerNorm over the last dim of x [rows, dim]: out = (x − mean) / sqrt(var + eps) · w + b
  // (biased variance, as torch.nn.LayerNorm). In place is allowed.
  virtual void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps,
                          float* out) = 0;
  // out = GELU(x) over n values: exact (0.5·x·(1 + erf(x/√2)), torch's "gelu") or the tanh
  // approximation (torch's "gelu_pytorch_tanh"). In place is allowed.
  virtual void gelu(const float* x, int64_t n, bool tanh_approximation, float* out) = 0;
  // GQA attention inside segments (an image tile, a text being embedded), without a cache: row r
  // of segment i attends to the keys of rows [seg[i], key_end[i]) of its own segment (all of it
  // when key_end is empty), only to those ≤ r when `causal`, and to nothing else. q, out
  // [T, n_heads, head_dim]; k, v [T, n_kv_heads, head_dim] with T = seg.back(); head h uses kv
  // head h / (n_heads / n_kv_heads). seg and key_end are host values (seg[0] = 0).
  virtual void segment_attention(const float* q, const float* k, const float* v, const SegmentAttention& a,
                                 float* out) = 0;
  // Depthwise conv over time inside segments, zero outside each (no state): for a row r of a
  // segment, out[r, c] = bias[c] + Σ_j w[c, j] · u[r − left + j, c] (j ascending, rows outside
  // the segment read as 0). u, out [T, dim]; w [dim, kernel]; bias [dim] or null. left =
  // kernel − 1 is a causal conv, kernel / 2 a centred one.
  virtual void segment_conv(const float* u, std::span<const int64_t> seg, int64_t dim, int64_t kernel, int64_t left,
                            const float* w, const float* bias, float* out) = 0;

  // ---- speech encoder ops (the FastConformer: subsampling convs, conv module, attention) ----
  // out = f(x) over n values: ReLU max(x, 0) or SiLU x / (1 + e^−x). In place is allowed.
  virtual void activation(const float* x, int64_t n, Activation f, float* out) = 0;
  // Gated linear unit over channels: x [rows, 2·cols] → out[r, c] = x[r, c] · σ(x[r, cols + c]),
  // out [rows, cols], σ(z) = 1 / (1 + e^−z). out must not overlap x.
  virtual void glu(const float* x, int64_t rows, int64_t cols, float* out) = 0;
  // 2-D convolution of channels-last images (see Conv2d): for image i, output row o, column p,
  // channel c: out = bias[c] + Σ_{a,b} w[c, a, b] · x[o·stride − pad + a, p·stride − pad + b, ci]
  // (a, then b ascending; taps outside the image read 0), ci = c when depthwise, else 0.
  // w [C, kernel, kernel]; bias [C] or null; x [seg.back(), width, in_channels];
  // out [Σ out_rows, out_width, C]. A pointwise (1×1) conv is a matmul in this layout.
  virtual void conv2d(const float* x, const Conv2d& c, const float* w, const float* bias, float* out) = 0;
  // Relative-position multi-head attention inside segments (NeMo/transformers' rel_pos, biases u
  // and v untied per layer). For rows i, j of one segment (i, j counted from its first row) and
  // head h: s = ((q_i + u_h)·k_j + (q_i + v_h)·pos[P0 − (i − j)]) · scale (each dot over
  // head_dim), softmax over the segment's j, out_i = Σ_j softmax · v_j.
  // q, k, v, out [T, n_heads, head_dim] (T = seg.back()); pos [2·P0 + 1, n_heads, head_dim];
  // bias_u, bias_v [n_heads, head_dim].
  virtual void rel_pos_attention(const float* q, const float* k, const float* v, const float* pos,
                                 const float* bias_u, const float* bias_v, const RelPosAttention& a,
                                 float* out) = 0;

  // ---- mixture of experts ----
  // Sigmoid routing of rows tokens over n_experts: score = sigmoid(logits[t, e]); the k experts
  // with the largest score + selection_bias[e] (selection_bias may be null; ties keep the lower
  // expert) are chosen, weight = score (divided by the chosen scores' sum + 1e-6 when
  // `normalize`) · scale. experts/weights [rows, k] list each token's choice in ascending expert
  // order. Each token's result depends on its own logits only.
  virtual void moe_route(const float* logits, int64_t rows, int64_t n_experts, int64_t k, const float* selection_bias,
                         bool normalize, float scale, int32_t* experts, float* weights) = 0;
  // out[t, :] = Σ_j weights[t, j] · x[src[t, j], :], j = 0 .. k-1 in order (from zero), for
  // t < rows; x [*, cols], src and weights [rows, k].
  virtual void moe_combine(const float* x, const int32_t* src, const float* weights, int64_t rows, int64_t k,
                           int64_t cols, float* out) = 0;
  // An MoE layer's end: h += moe_combine(x, src, weights) ([rows, cols]), then out = rms_norm(h) ·
  // norm (norm null: the sum only). y [rows, cols] is scratch for the combination. Bit for bit
  // moe_combine then add_rms_norm (or add); a device backend may do all three in one pass a row.
  virtual void moe_combine_add_rms_norm(const float* x, const int32_t* src, const float* weights, int64_t rows,
                                        int64_t k, int64_t cols, float* y, float* h, const float* norm, float eps,
                                        float* out) {
    moe_combine(x, src, weights, rows, k, cols, y);
    if (norm) add_rms_norm(h, y, norm, rows, cols, eps, out);
    else add(h, y, rows * cols);
  }
  // Groups the choices by expert, for the experts' matmuls: experts [rows, k] (moe_route's) →
  // first [n_experts + 1] (expert e owns rows [first[e], first[e + 1]) of the grouped batch,
  // rows · k of them in all), index [rows · k] (grouped row r is token index[r]; an expert's
  // tokens in ascending order) and src [rows, k] (token t's j-th choice is grouped row src[t, j]).
  // All in backend memory: the host need not see the choices.
  virtual void moe_group(const int32_t* experts, int64_t rows, int64_t k, int64_t n_experts, int32_t* first,
                         int32_t* index, int32_t* src) = 0;
  // Every expert's matmul on its grouped rows: y[r, :] = x[r, :] · ws[e]ᵀ for r in
  // [first[e], first[e + 1]), with `first` in backend memory (moe_group's); ws [n_experts]
  // matrices of one dtype and shape; x [rows, cols], y [rows, ws[0].rows]. Bit for bit what
  // matmul on each expert's rows gives. The default reads `first` on the host (host memory only)
  // and runs matmul_jobs; a device backend computes it without the host seeing `first`.
  virtual void moe_matmul(const float* x, const int32_t* first, std::span<const TensorView* const> ws, int64_t rows,
                          float* y);

  // ---- greedy choice ----
  // ids[r] = the index of the largest logits[r, i] over the allowed i (allowed: null for every
  // id, else [vocab] flags), the lowest index on ties: greedy sampling's choice, computed where
  // the logits are so that a device downloads one id per row instead of the row.
  virtual void argmax_rows(const float* logits, int64_t rows, int64_t vocab, const uint8_t* allowed, int32_t* ids) = 0;

  // ---- sampling where the logits are ----
  // A sampled row leaves the device as its best candidates instead of 65,536 logits: the request's
  // sparse changes are applied in place (edit_logits), then top_candidates summarises the row.
  // edit_logits: for each edit, w = logits[row, id] + add; if penalty != 1, w = w > 0 ? w / penalty
  // : w · penalty; then w -= sub (a request's logit bias, repetition and presence/frequency
  // penalties, in the order the host sampler applies them). Each (row, id) at most once; an edit
  // with id kPaddingEdit does nothing (a step pads its edits so that their count, and with it the
  // step's ops, changes rarely: CUDA graphs replay a step only when its ops are the same).
  virtual void edit_logits(float* logits, int64_t vocab, const LogitEdit* edits, int64_t n) = 0;
  // For each listed row rows[r] (r < count) of logits [*, vocab], over the allowed ids (allowed:
  // null for every id, else [vocab] flags): best [count, n] = its n largest values, largest first,
  // equal values by lower id (-0 counted as +0), then {-inf, -1} past the allowed count; and, where
  // rows[r].temperature T > 0, tail[r] = Σ exp(w/T − best/T) over the allowed ids not in best (each
  // term a float exp, the sum in any fixed order; 0 when T = 0). n ≤ kMaxCandidates.
  static constexpr int64_t kMaxCandidates = lfm::kMaxCandidates;
  virtual void top_candidates(const float* logits, int64_t vocab, const CandidateRow* rows, int64_t count,
                              const uint8_t* allowed, int64_t n, Candidate* best, float* tail) = 0;
  // out[r] = log Σ exp(w) over every id of row rows[r] (r < count) of logits [*, vocab]: what a
  // request's logprobs are measured against (row_logsumexp's arithmetic: the max, then the exps of
  // the differences summed in double, in any fixed order).
  virtual void logsumexp_rows(const float* logits, int64_t vocab, const int32_t* rows, int64_t count, double* out) = 0;
};

// The plain reference CPU backend; matmul and attention are spread over `pool`.
std::unique_ptr<Backend> make_reference_backend(ThreadPool& pool);

}  // namespace lfm
