// Scalar reference ops, shared by the reference backend and the kernel tests (which compare
// optimised kernels with these on random inputs).
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/state_pools.h"

namespace lfm::ref {

float dot(const float* a, const float* b, int64_t n);
// Whether a matmul over w rounds its input to bf16 first (TensorView::act_type); throws for a
// combination no kernel implements (bf16 activations are for BF16 weights only).
bool rounds_input_to_bf16(const TensorView& w);
// out[i] = x[i] rounded to bf16 (nearest even) and back to float32; in place is allowed.
void round_to_bf16(const float* x, int64_t n, float* out);
void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out);
void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
               const float* inv_freq);
// cos and sin of position · inv_freq[j], j < half, as transformers computes them (the angle in
// float32, its cos/sin rounded to float32): the table rope_neox rotates one token by.
void rope_angles(int64_t position, const float* inv_freq, int64_t half, float* cs, float* sn);
void softmax(float* x, int64_t n);
// Checks that a run's block table covers its positions and names only blocks of the pool.
void check_run(const SeqRun& r, int64_t block_tokens, int64_t n_blocks);
// Address of KV head `head`'s value row at position `pos` of a sequence (in pool.v).
const uint8_t* value_row(const KvPool& pool, std::span<const int32_t> blocks, int64_t pos, int64_t head);
// KV head `head`'s key at position `pos` of a sequence, gathered from the dim-major pool.k as
// float32 (out [head_dim]), or stored into it rounded to the pool's type (in [head_dim]).
void load_key(const KvPool& pool, std::span<const int32_t> blocks, int64_t pos, int64_t head, float* out);
void store_key(const KvPool& pool, std::span<const int32_t> blocks, int64_t pos, int64_t head, const float* in);
// Query row i (of run `run`), head h of paged causal GQA attention (window > 0: only the last
// `window` keys, Backend::attention); scores has room for run.pos0 + i + 1 floats, kbuf for head_dim.
void paged_attention_head(const float* q, const KvPool& pool, const SeqRun& run, int64_t i, int64_t h,
                          int64_t n_heads, float scale, int64_t window, float* scores, float* kbuf, float* out);
// Arguments of Backend::short_conv that every backend checks first: the kernel matches the
// pool's state rows, each run's conv slot is in the pool, and its checkpoints name snapshots of
// the pool at positions inside the run, in order.
void check_short_conv(const ConvPool& pool, std::span<const SeqRun> runs, int64_t kernel);
// One run of the short conv (see Backend::short_conv); its arguments passed check_short_conv.
void short_conv_run(const float* u, const ConvPool& pool, const SeqRun& run, int64_t kernel, const float* w,
                    const float* bias, float* out);

// Encoder ops (Backend::layer_norm, gelu, segment_attention), plainly.
void layer_norm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps, float* out);
float gelu(float x, bool tanh_approximation);
// Query row r (absolute) and head h of attention over key rows [begin, end); scores has room
// for end - begin floats. q [T, a.n_heads, head_dim], k, v [T, a.n_kv_heads, head_dim]; out is
// row r, head h (a's segment bounds are not read).
void segment_attention_row(const float* q, const float* k, const float* v, int64_t begin, int64_t end, int64_t r,
                           int64_t h, const SegmentAttention& a, float* scores, float* out);

// Speech encoder ops (Backend::glu, conv2d, rel_pos_attention), plainly.
float sigmoid(float x);
// Output row o (of an image whose rows are [in_row0, in_row0 + in_rows) of x) of Backend::conv2d:
// out_row [out_width, channels].
void conv2d_row(const float* x, int64_t in_row0, int64_t in_rows, int64_t o, const Conv2d& c, const float* w,
                const float* bias, float* out_row);
// Query row r (absolute) and head h of Backend::rel_pos_attention over the segment [begin, end);
// scores has room for end - begin floats.
void rel_pos_attention_row(const float* q, const float* k, const float* v, const float* pos, const float* bias_u,
                           const float* bias_v, int64_t begin, int64_t end, int64_t r, int64_t h,
                           const RelPosAttention& a, float* scores, float* out);

}  // namespace lfm::ref
