// The kernel interface. Kernels know nothing about LFM2: they see float32 activations,
// stored weights (any DType the backend supports) and plain shapes. The reference CPU backend
// implements every op plainly; faster backends (SIMD, quantized, CUDA) override the same calls
// and are tested against the reference on random inputs.
//
// Invariant every implementation must keep: each output element is computed from its own
// inputs in a fixed order, independent of the batch size, the other rows and the thread count.
// That is what makes a sequence's results independent of its neighbours in a ragged batch.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace lfm {

class ThreadPool;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // y[n, W.rows] = x[n, W.cols] · Wᵀ, W stored [out, in] in any supported dtype.
  virtual void matmul(const float* x, int64_t n, const TensorView& w, float* y) = 0;

  // out[i, :] = row ids[i] of table [V, d] as float32.
  virtual void embedding(const TensorView& table, const int32_t* ids, int64_t n, float* out) = 0;

  // RMSNorm over the last dim of x [rows, dim]: out = w * (x / sqrt(mean(x²) + eps)).
  // In place is allowed (out == x).
  virtual void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) = 0;

  // NeoX (rotate-half) RoPE in place on x [n_tokens, n_heads, head_dim]; token t sits at
  // positions[t]; inv_freq has head_dim / 2 entries.
  virtual void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
                         const float* inv_freq) = 0;

  // Causal GQA attention for one sequence.
  // q [n_q, n_heads, head_dim] holds the queries at positions q_pos0 .. q_pos0 + n_q - 1;
  // k, v [n_kv, n_kv_heads, head_dim] hold keys/values of positions 0 .. n_kv - 1
  // (n_kv >= q_pos0 + n_q). Query i sees keys 0 .. q_pos0 + i. Head h uses kv head
  // h / (n_heads / n_kv_heads). out [n_q, n_heads, head_dim].
  virtual void attention(const float* q, int64_t n_q, int64_t q_pos0, const float* k, const float* v, int64_t n_kv,
                         int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out) = 0;

  // Depthwise causal conv over time for one sequence, with a rolling state.
  // u [n, dim]; w [dim, kernel] (tap kernel-1 multiplies the newest step); bias [dim] or null;
  // state [kernel-1, dim], oldest first, updated to the last kernel-1 steps; out [n, dim].
  virtual void short_conv(const float* u, int64_t n, int64_t dim, int64_t kernel, const float* w, const float* bias,
                          float* state, float* out) = 0;

  // out = silu(gate) * up, elementwise over n values.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // out = a * b, elementwise.
  virtual void mul(const float* a, const float* b, int64_t n, float* out) = 0;
  // y += x, elementwise.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // In-place softmax over n values.
  virtual void softmax(float* x, int64_t n) = 0;
};

// The plain reference CPU backend; matmul and attention are spread over `pool`.
std::unique_ptr<Backend> make_reference_backend(ThreadPool& pool);

}  // namespace lfm
