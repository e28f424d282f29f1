// Helpers shared by the engine tests: a request's whole event stream, collected.
#pragma once

#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace lfm::test {

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // per token, when asked for
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per token
  FinishReason finish = FinishReason::kNone;
  Usage usage;
  std::string error;
  // Speech output: each frame's codes, each event's modality in order (1: a text token, 3: an
  // audio frame, as transformers numbers them), and the waveform's samples.
  std::vector<std::vector<int32_t>> frames;
  std::vector<int> modalities;
  std::vector<float> audio;
};

inline Result collect(RequestStream& s) {
  Result r;
  Event ev;
  while (s.next(ev)) {
    if (ev.kind == Event::Kind::kToken) {
      r.tokens.push_back(ev.token);
      r.logprobs.push_back(ev.logprob);
      r.top_logprobs.push_back(ev.top_logprobs);
      r.modalities.push_back(1);
    }
    if (ev.kind == Event::Kind::kAudio && !ev.audio_codes.empty()) {
      r.frames.push_back(ev.audio_codes);
      r.modalities.push_back(3);
    }
    r.audio.insert(r.audio.end(), ev.audio.begin(), ev.audio.end());
    if (ev.kind == Event::Kind::kDone) {
      r.finish = ev.finish;
      r.usage = ev.usage;
      r.error = ev.error;
    }
  }
  return r;
}

// Prompts of the given lengths, random ids in [0, vocab), from `seed`.
inline std::vector<std::vector<int32_t>> random_prompts(int64_t vocab, std::initializer_list<int> lengths, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> out;
  for (int len : lengths) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = id(rng);
    out.push_back(p);
  }
  return out;
}

}  // namespace lfm::test
