// Scalar reference ops, shared by the reference backend and the kernel tests (which compare
// optimised kernels with these on random inputs).
#pragma once

#include <cstdint>

namespace lfm::ref {

float dot(const float* a, const float* b, int64_t n);
void rms_norm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out);
void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int64_t* positions,
               const float* inv_freq);
void softmax(float* x, int64_t n);
// One (query i, head h) of causal GQA attention; scores has room for q_pos0 + i + 1 floats.
void attention_head(const float* q, int64_t i, int64_t q_pos0, const float* k, const float* v, int64_t h,
                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* scores, float* out);
void short_conv(const float* u, int64_t n, int64_t dim, int64_t kernel, const float* w, const float* bias,
                float* state, float* out);

}  // namespace lfm::ref
