#include "model/sequence_state.h"

#include <algorithm>

#include "core/error.h"

namespace lfm {

SequenceState::SequenceState(const ModelConfig& cfg, int64_t max_tokens)
    : kv_width_(cfg.n_kv_heads * cfg.head_dim), max_tokens_(max_tokens) {
  LFM_CHECK(max_tokens > 0, "state: context size must be positive, got ", max_tokens);
  conv_.assign(cfg.n_conv_layers(), std::vector<float>(static_cast<size_t>((cfg.conv_kernel - 1) * cfg.hidden_size)));
  keys_.resize(cfg.n_attention_layers());
  values_.resize(cfg.n_attention_layers());
}

void SequenceState::reset() {
  for (auto& c : conv_) std::fill(c.begin(), c.end(), 0.0f);
  n_past_ = 0;
}

void SequenceState::reserve_more(int64_t n) {
  const int64_t need = n_past_ + n;
  LFM_CHECK(need <= max_tokens_, "state: sequence would reach ", need, " tokens, past the context size ", max_tokens_);
  if (need <= capacity_) return;
  const int64_t cap = std::min(max_tokens_, std::max({need, capacity_ * 2, int64_t{64}}));
  for (auto* vs : {&keys_, &values_})
    for (auto& v : *vs) v.resize(static_cast<size_t>(cap * kv_width_));
  capacity_ = cap;
}

size_t SequenceState::bytes() const {
  size_t n = 0;
  for (const auto& c : conv_) n += c.size() * sizeof(float);
  for (const auto* vs : {&keys_, &values_})
    for (const auto& v : *vs) n += v.capacity() * sizeof(float);
  return n;
}

}  // namespace lfm
