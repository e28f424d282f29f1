// Audio in requests (LFM2-Audio): chat messages' input_audio parts and the uploads of
// /v1/audio/transcriptions and /v1/audio/translations. How many clips, how big and how long they
// may be, and the bytes → 16 kHz mono samples step (audio/audio_decode.h), each refusal a 400
// naming the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lfm::server {

struct AudioOptions {
  size_t max_clips = 4;                  // input_audio parts per chat request (lfm serve --max-audio-clips)
  size_t max_audio_bytes = 25u << 20;    // encoded bytes of one clip (--max-audio-bytes; OpenAI's upload limit)
  double max_audio_seconds = 300;        // duration of one clip (--max-audio-seconds)
};

// One input_audio part of a chat request, as parsed (api_types.cpp): its base64 data, the format
// the client named ("wav", "mp3", …; informative: the decoder recognises the bytes), and the field
// it came from ("messages[0].content[1].input_audio"), for errors.
struct AudioPart {
  std::string data;
  std::string format;
  std::string param;
};

// The mono samples at `sample_rate` of an upload or a part's decoded bytes. Throws ApiError(400,
// …, param) naming the field for bytes the decoder refuses (not audio, truncated, too long, too
// many channels, …) and for clips over the options' limits.
std::vector<float> decode_audio_bytes(std::span<const uint8_t> bytes, const std::string& param, const AudioOptions& opt,
                                      int sample_rate);

// Every part's clip, in order: the model takes audio (`no_audio` empty; else it says why not), at
// most max_clips of them, each valid base64 within max_audio_bytes, decodable, within the limits.
std::vector<std::vector<float>> load_audio_parts(const std::vector<AudioPart>& parts, const AudioOptions& opt,
                                                 const std::string& no_audio, int sample_rate);

}  // namespace lfm::server
