// POST /v1/audio/speech (speech.cpp): text to speech as OpenAI defines it, on an LFM2.5-Audio
// model; the request's limits are in speech_options.h.
//
// The body: model, input (≤ max_input_chars characters, counted before any work), voice (the
// model's: us_male, us_female, uk_male, uk_female, or "US female" etc.; OpenAI's alloy, ash, …
// are refused with the list), response_format (mp3 — OpenAI's default, also ours —, opus, flac,
// wav, pcm, and ours: wav_float, vorbis/ogg; aac is refused: no encoder is packaged; mp3 needs a
// libsndfile built with LAME, and without one the 400 says so), speed (only 1: the model has no
// rate control, and resampling would shift the pitch), instructions (accepted and ignored, as
// OpenAI ignores it for tts-1: the checkpoints know only their TTS system prompt), stream_format
// ("audio", the default: the file's bytes as chunks while the model speaks; "sse": events
// speech.audio.delta {"audio": base64 of the next bytes} and speech.audio.done {"usage"}).
// Ours: temperature and top_k of the text tokens, audio_temperature and audio_top_k of the audio
// codes, seed, speak_now (true: the answer opens with <|audio_start|>, so the model speaks from its
// first step, as `lfm speak --speak-now`). The waveform is encoded as it streams (audio/audio_encode.h): a streamed wav has
// the unknown-length header (sizes 0xFFFFFFFF), a streamed mp3 is constant bit rate.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "audio/audio_encode.h"
#include "engine/request.h"
#include "engine/speech_prompt.h"
#include "server/speech_options.h"

namespace lfm::server {


// A /v1/audio/speech body, checked.
struct SpeechRequest {
  std::string input;
  const SpeechVoice* voice = nullptr;
  audio::AudioFormat format = audio::AudioFormat::kMp3;
  bool sse = false;       // stream_format "sse"
  SamplingParams text;    // temperature, top_k, seed
  AudioOutParams audio;   // audio_temperature, audio_top_k (mode set by tts_request)
  bool speak_now = false; // the turn opens with <|audio_start|> (AudioOutParams::audio_first)
};

// Every field checked, before any work (the input's length in characters first of all); throws
// ApiError(400, …, field) naming the field.
SpeechRequest parse_speech_request(const nlohmann::ordered_json& body, const SpeechOptions& opt);

}  // namespace lfm::server
