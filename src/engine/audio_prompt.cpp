#include "engine/audio_prompt.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engine/content_hash.h"
#include "model/audio_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace lfm {

namespace {

// SHA-256 of a domain tag, the frame count and the features (content_hash.h). The tag keeps a
// clip's hash apart from any image's (both key the same caches).
uint64_t features_hash(int64_t frames, const std::vector<float>& features) {
  ContentHash h("audio");
  static constexpr char kTag[] = "lfm-audio-features";
  h.add(kTag, sizeof(kTag));
  h.add(&frames, sizeof(frames));
  h.add(std::span<const float>(features));
  return h.finish();
}

}  // namespace

AudioPromptSetup audio_prompt_setup(const Model& model, const Tokenizer* tok) {
  const AudioModel* audio = model.audio();
  LFM_CHECK(audio, "audio: the model has no speech encoder (audio needs an LFM2-Audio checkpoint folder, or a "
            ".gguf language model with its --mmproj)");
  const AudioConfig& c = audio->config();
  AudioPromptSetup s;
  s.front_end = c.front_end;
  s.audio_token_id = c.audio_token_id;
  s.max_positions = c.max_position_embeddings;
  if (tok) {
    LFM_CHECK(c.audio_token_id >= 0 && c.audio_token_id < tok->vocab_size() && tok->is_special(c.audio_token_id),
              "audio: the tokenizer has no special token for the audio id ", c.audio_token_id);
    s.placeholder_text = tok->id_to_token(c.audio_token_id);
  }
  return s;
}

AudioPrompt expand_audio(std::span<const int32_t> ids, std::span<const std::vector<float>> clips,
                         const AudioPromptSetup& setup) {
  size_t placeholders = 0;
  for (int32_t t : ids) placeholders += t == setup.audio_token_id ? 1 : 0;
  LFM_CHECK(placeholders == clips.size(), "audio: the prompt has ", placeholders, " audio placeholders (token ",
            setup.audio_token_id, ") for ", clips.size(), " clips; each clip needs exactly one (\"<audio>\" in a text prompt)");
  AudioPrompt out;
  size_t next = 0;
  for (int32_t t : ids) {
    if (t != setup.audio_token_id) {
      out.ids.push_back(t);
      continue;
    }
    const std::vector<float>& samples = clips[next];
    const int64_t frames = audio::log_mel_frames(static_cast<int64_t>(samples.size()), setup.front_end);
    const int64_t tokens = audio::audio_tokens_for_frames(frames);
    LFM_CHECK(setup.max_positions <= 0 || tokens <= setup.max_positions, "audio: clip ", next, " (",
              static_cast<double>(samples.size()) / setup.front_end.sample_rate, " s) makes ", tokens,
              " audio tokens, past the encoder's ", setup.max_positions, " positions");
    auto input = std::make_shared<AudioInput>();
    try {
      audio::LogMel mel = audio::compute_log_mel(samples, setup.front_end, samples.size() + 1);
      input->frames = mel.frames;
      input->mel_bins = mel.num_mel_bins;
      input->features = std::move(mel.values);
    } catch (const Error& e) {
      fail("audio: clip ", next, ": ", e.what());
    }
    input->position = static_cast<int64_t>(out.ids.size());
    input->tokens = tokens;
    input->seconds = static_cast<double>(samples.size()) / setup.front_end.sample_rate;
    input->hash = features_hash(input->frames, input->features);
    out.ids.insert(out.ids.end(), static_cast<size_t>(tokens), setup.audio_token_id);
    out.audios.push_back(std::move(input));
    ++next;
  }
  return out;
}

size_t replace_audio_markers(std::string& text, const std::string& placeholder_text) {
  LFM_CHECK(!placeholder_text.empty(), "audio: no placeholder text for the <audio> marker");
  const std::string marker = kAudioMarker;
  size_t n = 0;
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + placeholder_text.size())) {
    text.replace(at, marker.size(), placeholder_text);
    ++n;
  }
  return n;
}

}  // namespace lfm
