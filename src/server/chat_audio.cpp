#include "server/chat_audio.h"

#include "audio/audio_decode.h"
#include "core/base64.h"
#include "core/error.h"
#include "server/api_types.h"

namespace lfm::server {

std::vector<float> decode_audio_bytes(std::span<const uint8_t> bytes, const std::string& param, const AudioOptions& opt,
                                      int sample_rate) {
  if (bytes.empty()) throw ApiError(400, "'" + param + "' holds no audio data", param);
  if (bytes.size() > opt.max_audio_bytes)
    throw ApiError(400,
                   "'" + param + "' holds " + std::to_string(bytes.size()) + " bytes of audio, over this server's limit of " +
                       std::to_string(opt.max_audio_bytes) + " bytes (lfm serve --max-audio-bytes)",
                   param);
  audio::AudioDecodeLimits limits;
  limits.max_seconds = opt.max_audio_seconds;
  limits.max_bytes = static_cast<int64_t>(opt.max_audio_bytes);
  try {
    return audio::decode_audio(bytes, sample_rate, limits).samples;
  } catch (const Error& e) {
    throw ApiError(400, "'" + param + "' is not audio this server can use: " + e.what() +
                            " (limits: lfm serve --max-audio-seconds, --max-audio-bytes)",
                   param);
  }
}

std::vector<std::vector<float>> load_audio_parts(const std::vector<AudioPart>& parts, const AudioOptions& opt,
                                                 const std::string& no_audio, int sample_rate) {
  if (parts.empty()) return {};
  if (!no_audio.empty()) throw ApiError(400, no_audio, parts.front().param);
  if (parts.size() > opt.max_clips)
    throw ApiError(400,
                   "the request holds " + std::to_string(parts.size()) + " audio clips; this server takes at most " +
                       std::to_string(opt.max_clips) + " per request (lfm serve --max-audio-clips)",
                   parts[opt.max_clips].param);
  // Every part's size from its base64 length before anything is decoded.
  for (const AudioPart& p : parts)
    if (p.data.size() / 4 * 3 > opt.max_audio_bytes + 2)
      throw ApiError(400,
                     "'" + p.param + ".data' holds about " + std::to_string(p.data.size() / 4 * 3) +
                         " bytes of audio, over this server's limit of " + std::to_string(opt.max_audio_bytes) +
                         " bytes (lfm serve --max-audio-bytes)",
                     p.param + ".data");
  std::vector<std::vector<float>> clips;
  for (const AudioPart& p : parts) {
    std::optional<std::vector<uint8_t>> bytes = decode_base64(p.data);
    if (!bytes)
      throw ApiError(400,
                     "'" + p.param + ".data' is not valid base64 (RFC 4648: A–Z a–z 0–9 + /, '=' padding to a multiple "
                     "of 4, no whitespace)",
                     p.param + ".data");
    clips.push_back(decode_audio_bytes(*bytes, p.param + ".data", opt, sample_rate));
  }
  return clips;
}

}  // namespace lfm::server
