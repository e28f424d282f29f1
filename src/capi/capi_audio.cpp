// The C API's audio (LFM2-Audio): a prompt's files, in-memory encoded bytes and raw PCM, and a chat
// input_audio part's base64 data, decoded and resampled as `lfm generate --audio` and lfm serve's
// input_audio parts do it (audio/audio_decode.h).
#include <cmath>
#include <span>

#include "audio/audio_decode.h"
#include "capi/capi_internal.h"
#include "core/base64.h"
#include "model/audio_model.h"

using lfm::capi::fail;
using lfm::capi::require;

namespace lfm::capi {

const AudioPromptSetup& audio_setup(const lfm_model_state& s) {
  if (!s.audio_setup) fail(LFM_ERR_UNSUPPORTED, "audio: " + s.audio_error);
  return *s.audio_setup;
}

void load_audio_setup(lfm_model_state& s) {
  if (!s.model->audio()) {
    s.audio_error = "the model has no speech encoder (audio needs an LFM2-Audio model: a checkpoint folder, or a .gguf "
                    "language model with lfm_model_options.mmproj)";
  } else {
    // Without a tokenizer, ids prompts still take clips (their placeholder is the audio token id).
    try {
      s.audio_setup = std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*s.model, s.tokenizer.get()));
    } catch (const Error& e) {
      s.audio_error = std::string("the model cannot take audio: ") + e.what();
    }
  }
}

namespace {

audio::AudioDecodeLimits limits_for(double max_seconds) {
  audio::AudioDecodeLimits limits;
  limits.max_seconds = max_seconds > 0 ? max_seconds : kDefaultMaxAudioSeconds;
  return limits;
}

}  // namespace

std::vector<std::vector<float>> prompt_audio(const lfm_model_state& s, const lfm_prompt& p) {
  std::vector<std::vector<float>> out;
  if (p.n_audio == 0) return out;
  const int rate = audio_setup(s).front_end.sample_rate;
  require(p.max_audio_seconds >= 0 && std::isfinite(p.max_audio_seconds),
          "lfm_prompt: max_audio_seconds must be 0 (the default) or more");
  const audio::AudioDecodeLimits limits = limits_for(p.max_audio_seconds);
  require(p.audio_paths != nullptr || p.audio_data != nullptr || p.audio_pcm != nullptr,
          "lfm_prompt: n_audio is set but audio_paths, audio_data and audio_pcm are all NULL");
  for (size_t i = 0; i < p.n_audio; ++i) {
    const std::string which = "lfm_prompt: audio clip " + std::to_string(i);
    std::string what = which;
    try {
      if (p.audio_paths && p.audio_paths[i]) {
        what = which + " ('" + p.audio_paths[i] + "')";
        out.push_back(audio::load_audio_file(p.audio_paths[i], rate, limits).samples);
      } else if (p.audio_data && p.audio_data[i]) {
        require(p.audio_sizes != nullptr, (which + ": audio_data is set but audio_sizes is NULL").c_str());
        what = which + " (" + std::to_string(p.audio_sizes[i]) + " bytes in memory)";
        out.push_back(audio::decode_audio(std::span(static_cast<const uint8_t*>(p.audio_data[i]), p.audio_sizes[i]),
                                          rate, limits)
                          .samples);
      } else if (p.audio_pcm && p.audio_pcm[i]) {
        require(p.audio_pcm_frames != nullptr, (which + ": audio_pcm is set but audio_pcm_frames is NULL").c_str());
        what = which + " (" + std::to_string(p.audio_pcm_frames[i]) + " PCM frames)";
        require(p.audio_pcm_channels > 0 && p.audio_pcm_channels <= limits.max_channels,
                (which + ": audio_pcm_channels must be 1 to " + std::to_string(limits.max_channels)).c_str());
        require(p.audio_pcm_frames[i] <= (size_t(1) << 40) / static_cast<size_t>(p.audio_pcm_channels),
                (which + ": audio_pcm_frames is implausibly large").c_str());
        const std::span<const float> interleaved(p.audio_pcm[i], p.audio_pcm_frames[i] * static_cast<size_t>(p.audio_pcm_channels));
        out.push_back(audio::decode_pcm_f32(interleaved, p.audio_pcm_channels, p.audio_pcm_rate, rate, limits).samples);
      } else {
        fail(LFM_ERR_INVALID_ARGUMENT, which + " has no path (audio_paths), no bytes (audio_data) and no PCM (audio_pcm)");
      }
    } catch (const Error& e) {
      fail(LFM_ERR_INVALID_ARGUMENT, what + ": " + e.what());
    }
  }
  return out;
}

std::vector<float> audio_from_part(const lfm_model_state& s, const nlohmann::ordered_json& input_audio,
                                   const std::string& where, double max_seconds) {
  const int rate = audio_setup(s).front_end.sample_rate;
  if (!input_audio.is_object() || !input_audio.contains("data") || !input_audio["data"].is_string())
    fail(LFM_ERR_INVALID_ARGUMENT, where + ".input_audio must be an object {\"data\": base64 audio, \"format\": \"wav\"}");
  std::optional<std::vector<uint8_t>> bytes = decode_base64(input_audio["data"].get<std::string>());
  if (!bytes)
    fail(LFM_ERR_INVALID_ARGUMENT, where + ".input_audio.data is not valid base64 (RFC 4648, '=' padding, no whitespace)");
  try {
    return audio::decode_audio(*bytes, rate, limits_for(max_seconds)).samples;
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, where + ".input_audio: not audio that can be used: " + e.what());
  }
}

}  // namespace lfm::capi
