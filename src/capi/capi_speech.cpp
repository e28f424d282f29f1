// The C API's speech output (LFM2-Audio, lfm_prompt [5]): audio_out and its sampling onto the
// engine's request, earlier spoken turns' frames at their prompt positions, the TTS turn of
// speak_text, and the spoken-chat system message of an interleaved chat.
#include "capi/capi_internal.h"
#include "engine/speech_prompt.h"
#include "engine/spoken_turn.h"
#include "model/speech_out.h"

using lfm::capi::fail;
using lfm::capi::require;

namespace lfm::capi {

namespace {

const SpeechOutConfig& speech_config(const lfm_model_state& s, const char* what) {
  if (!s.model->speech_out())
    fail(LFM_ERR_UNSUPPORTED, std::string("lfm_request_submit: ") + what +
                                  " needs speech output, which the model does not have (an LFM2-Audio model "
                                  "with its depth transformer)");
  return s.model->speech_out()->config();
}

const SpeechVoice& voice_of(const lfm_prompt& p) {
  try {
    return parse_voice(p.voice ? p.voice : kDefaultVoice);
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, std::string("lfm_request_submit: voice: ") + e.what());
  }
}

}  // namespace

bool wants_speech(const lfm_prompt& p) {
  return p.audio_out != LFM_AUDIO_OUT_NONE || p.n_audio_frames > 0 || p.speak_text != nullptr;
}

void prepare_spoken_chat(const lfm_prompt& p, ChatTurnInput& in) {
  if (p.audio_out == LFM_AUDIO_OUT_INTERLEAVED) add_spoken_chat_prompt(in.messages, voice_of(p));
}

ChatTurn speak_turn(const lfm_model_state& s, const lfm_prompt& p) {
  speech_config(s, "speak_text");
  require(s.chat != nullptr, "lfm_request_submit: speak_text needs the model's tokenizer and chat template");
  try {
    return tts_turn(*s.chat, p.speak_text, voice_of(p));
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, std::string("lfm_request_submit: speak_text: ") + e.what());
  }
}

void apply_speech(const lfm_model_state& s, const lfm_prompt& p, Request& r) {
  if (!wants_speech(p)) return;
  const SpeechOutConfig& sc = speech_config(s, p.n_audio_frames > 0 ? "audio_frames" : "audio_out");
  switch (p.speak_text ? LFM_AUDIO_OUT_SEQUENTIAL : p.audio_out) {
    case LFM_AUDIO_OUT_NONE: r.audio_out.mode = AudioOutMode::kNone; break;
    case LFM_AUDIO_OUT_SEQUENTIAL: r.audio_out.mode = AudioOutMode::kSequential; break;
    case LFM_AUDIO_OUT_INTERLEAVED: r.audio_out.mode = AudioOutMode::kInterleaved; break;
    default:
      fail(LFM_ERR_INVALID_ARGUMENT, "lfm_request_submit: unknown audio_out " + std::to_string(p.audio_out) +
                                         " (LFM_AUDIO_OUT_NONE 0, LFM_AUDIO_OUT_SEQUENTIAL 1, LFM_AUDIO_OUT_INTERLEAVED 2)");
  }
  r.audio_out.temperature = p.audio_temperature;
  r.audio_out.top_k = p.audio_top_k;
  r.audio_out.waveform = p.audio_waveform != 0;
  try {
    r.audio_out.validate();
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, std::string("lfm_request_submit: ") + e.what());
  }
  if (p.n_audio_frames == 0) return;
  require(p.n_ids > 0, "lfm_request_submit: audio_frames go with an ids prompt (their positions are the ids')");
  require(p.audio_frames_position && p.audio_frames_count && p.audio_frames_codes,
          "lfm_request_submit: audio_frames_position, audio_frames_count or audio_frames_codes is NULL");
  for (size_t i = 0; i < p.n_audio_frames; ++i) {
    const int64_t n = p.audio_frames_count[i], at = p.audio_frames_position[i];
    const std::string what = "lfm_request_submit: audio frames " + std::to_string(i);
    require(p.audio_frames_codes[i] != nullptr, (what + ": codes are NULL").c_str());
    require(n > 0 && at >= 0 && at <= static_cast<int64_t>(p.n_ids) && n <= static_cast<int64_t>(p.n_ids) - at,
            (what + ": " + std::to_string(n) + " frames at position " + std::to_string(at) +
             " do not fit in the prompt of " + std::to_string(p.n_ids) + " ids")
                .c_str());
    std::vector<int32_t> codes(p.audio_frames_codes[i], p.audio_frames_codes[i] + n * sc.codebooks);
    try {
      r.audio_frames.push_back(make_audio_out_frames(at, sc.codebooks, std::move(codes), sc.audio_vocab));
    } catch (const Error& e) {
      fail(LFM_ERR_INVALID_ARGUMENT, what + ": " + e.what());
    }
  }
}

}  // namespace lfm::capi
