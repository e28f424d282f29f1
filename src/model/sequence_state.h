// Per-sequence recurrent and attention state of the hybrid decoder.
//   conv layers:      the last K-1 gated products u = B ⊙ x, [K-1, d] float32, oldest first;
//   attention layers: post-norm, post-RoPE keys and values, [n_past, G, hd] float32 each.
// Storage here is contiguous per sequence and grows geometrically up to `max_tokens`;
// the paged cache manager of the serving engine replaces it behind the same calls.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace lfm {

class SequenceState {
 public:
  SequenceState(const ModelConfig& cfg, int64_t max_tokens);

  int64_t n_past() const { return n_past_; }
  int64_t max_tokens() const { return max_tokens_; }
  // Forgets the sequence: zero conv state, empty KV. Capacity is kept for reuse.
  void reset();

  // Conv state of the c-th conv layer: [K-1, d].
  float* conv_state(int64_t conv_slot) { return conv_[conv_slot].data(); }
  const float* conv_state(int64_t conv_slot) const { return conv_[conv_slot].data(); }

  // Keys/values of the a-th attention layer, rows [0, n_past + pending) of [*, G·hd].
  float* keys(int64_t attn_slot) { return keys_[attn_slot].data(); }
  float* values(int64_t attn_slot) { return values_[attn_slot].data(); }

  // Makes room for n more tokens (throws when past max_tokens). Called before a step.
  void reserve_more(int64_t n);
  // Commits n tokens after a step has written their state.
  void advance(int64_t n) { n_past_ += n; }

  // Bytes held now (capacity, not just what is used).
  size_t bytes() const;

 private:
  int64_t kv_width_ = 0;  // G · hd
  int64_t max_tokens_ = 0;
  int64_t capacity_ = 0;
  int64_t n_past_ = 0;
  std::vector<std::vector<float>> conv_;
  std::vector<std::vector<float>> keys_, values_;
};

}  // namespace lfm
