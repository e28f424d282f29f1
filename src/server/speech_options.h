// The limits of POST /v1/audio/speech (server/speech.h), set by lfm serve's flags. Apart from
// speech.h so that server.h does not depend on the encoder's and the prompts' headers.
#pragma once

#include <cstddef>

namespace lfm::server {

struct SpeechOptions {
  size_t max_input_chars = 4096;   // OpenAI's limit (lfm serve --max-speech-chars)
  double max_audio_seconds = 600;  // one answer's audio; generation stops there (--max-speech-seconds)
  // The audio codes' sampling when a request does not say (lfm speak's defaults).
  float audio_temperature = 0.8f;  // llama.cpp's liquid-audio runner's TTS sampling
  int audio_top_k = 64;
  // The model's <|audio_start|> id, for "speak_now" (-1: unknown, the field is refused).
  int audio_start_id = -1;
};

}  // namespace lfm::server
