// Single-sequence generation on top of Forward: one prefill of the prompt, then one token per
// step through the cache. The serving engine (continuous batching) builds on the same step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "model/forward.h"

namespace lfm {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  SamplerParams sampler;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  int64_t prefill_chunk = 0;      // 0: the whole prompt in one step
  std::vector<uint8_t> allowed;   // ids the sampler may pick (empty: all); see Sampler::set_allowed
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Generates into `out`; `on_token` (optional) sees each new id and may return false to stop.
std::vector<int32_t> generate(Forward& fwd, SequenceState& state, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token = nullptr,
                              GenerateStats* stats = nullptr);

}  // namespace lfm
