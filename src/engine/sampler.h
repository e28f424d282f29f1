// Token selection from a logits row: greedy (temperature 0) or temperature / top-k / top-p /
// min-p sampling with a seeded generator, so runs are reproducible.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace lfm {

struct SamplerParams {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  int32_t sample(const float* logits, int64_t vocab);
  // Restricts choices to ids whose entry is non-zero (e.g. ids the tokenizer can decode: a
  // model's output layer may be wider than its tokenizer). Empty: every id is allowed.
  void set_allowed(std::vector<uint8_t> allowed) { allowed_ = std::move(allowed); }

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<uint8_t> allowed_;
};

// Index of the largest value; the lowest index wins ties.
int32_t argmax(const float* x, int64_t n);

}  // namespace lfm
