// From decoded audio to what the engine takes: each clip's features computed as the model's front
// end does it (audio/log_mel.h), its placeholder in the prompt (the model's audio token, once per
// clip) expanded into one audio token per encoder row, and the clip placed at those tokens
// (AudioInput), with a content hash.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "audio/log_mel.h"
#include "engine/audio_input.h"

namespace lfm {

class Model;
class Tokenizer;

// The speech side of a model.
struct AudioPromptSetup {
  audio::LogMelConfig front_end{};
  int32_t audio_token_id = -1;
  int64_t max_positions = 0;  // the most encoder rows a clip may have (max_position_embeddings)
  // The text that stands for one clip in a prompt or a chat message before tokenizing: the audio
  // token's own text (LFM2-Audio: "<|reserved_123|>"). Empty when the tokenizer lacks it.
  std::string placeholder_text;
};

// The model's speech settings (the placeholder text from `tok` when given); throws lfm::Error when
// the model has no speech encoder, or when the tokenizer has no special token for the audio id.
AudioPromptSetup audio_prompt_setup(const Model& model, const Tokenizer* tok = nullptr);

struct AudioPrompt {
  std::vector<int32_t> ids;                               // the prompt with every clip laid out
  std::vector<std::shared_ptr<const AudioInput>> audios;  // for Request::audios
};

// Replaces the i-th audio token of `ids` (exactly one per clip, in order) by clip i's audio tokens
// (mono samples at setup.front_end.sample_rate). Throws lfm::Error naming the counts when they
// differ, and naming the clip when it is too short (under two hops), too long for the encoder's
// positions, or not finite.
AudioPrompt expand_audio(std::span<const int32_t> ids, std::span<const std::vector<float>> clips,
                         const AudioPromptSetup& setup);

// The marker users write for a clip in plain text ("<audio>", like "<image>"), replaced by the
// placeholder text before tokenizing; returns how many it replaced.
inline constexpr const char* kAudioMarker = "<audio>";
size_t replace_audio_markers(std::string& text, const std::string& placeholder_text);

}  // namespace lfm
