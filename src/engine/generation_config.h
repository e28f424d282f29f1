// Sampling defaults from a model's generation_config.json (temperature, top_p, top_k, min_p,
// repetition_penalty), applied to the fields a request leaves unset, as vLLM does by default:
// LFM2's model cards recommend temperature 0.3, min_p 0.15 and repetition_penalty 1.05, and the
// checkpoints say so in that file. Other keys (eos ids, do_sample, …) are ignored here.
#pragma once

#include <optional>
#include <string>

#include "engine/sampler.h"

namespace lfm {

struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::string source;  // the file they came from (empty: none)

  bool empty() const { return !temperature && !top_p && !min_p && !repetition_penalty && !top_k; }
  // "temperature 0.3, min_p 0.15, repetition_penalty 1.05" ("none" when empty).
  std::string describe() const;
  // Sets every field these defaults hold.
  void apply(SamplingParams& s) const;
};

// The sampling fields of a generation_config.json text; lfm::Error naming `source` and the field
// when one is out of range or not a number.
SamplingDefaults parse_generation_config(const std::string& text, const std::string& source);

// `spec` as the --generation-config flag takes it: "none" (no defaults), "auto" (the model
// folder's generation_config.json when there is one; none for a .gguf file or a folder without
// it) or a file path (which must exist).
SamplingDefaults load_sampling_defaults(const std::string& spec, const std::string& model_path);

}  // namespace lfm
