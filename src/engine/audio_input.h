// An audio clip in a request, ready for the speech encoder (LFM2-Audio): its features as the
// front end computes them, where its audio tokens stand in the prompt, and a content hash. Made by
// expand_audio (engine/audio_prompt.h) from decoded samples; shared, immutable.
#pragma once

#include <cstdint>
#include <vector>

namespace lfm {

struct AudioInput {
  int64_t frames = 0;             // T feature frames
  int64_t mel_bins = 0;           // features per frame
  std::vector<float> features;    // [frames, mel_bins] time-major
  int64_t position = 0;           // prompt index of the clip's first audio token
  int64_t tokens = 0;             // its audio tokens (consecutive from `position`)
  double seconds = 0;             // the clip's duration at the model's sample rate
  // SHA-256 (first 8 bytes) of the frame count and features, in a domain apart from images':
  // equal hashes mean equal encoder rows. It keys the clip's tokens in the prefix cache and the
  // engine's cache of encoded media, as ImageInput::hash does.
  uint64_t hash = 0;
};

}  // namespace lfm
