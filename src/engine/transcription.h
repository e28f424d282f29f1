// Transcription as LFM2-Audio is asked for it: a chat turn with the system prompt "Perform ASR."
// and the clip as the user's message (transformers' Lfm2AudioProcessor.apply_transcription_request,
// liquid-audio's ASR example), the reply the transcript. Shared by `lfm transcribe`, the server's
// /v1/audio/transcriptions and /v1/audio/translations, the C API and Python.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace lfm {

inline constexpr const char* kTranscribeSystemPrompt = "Perform ASR.";
// Translation into English: LFM2-Audio has no trained instruction for it; this one asks for it in
// words, and how well it works depends on the checkpoint.
inline constexpr const char* kTranslateSystemPrompt = "Perform ASR, then translate the speech into English.";

// The messages of one transcription turn: the system prompt, then a user message holding the
// audio part ({"type": "audio"}) and, when `prompt` is not empty, the caller's text after it
// (OpenAI's `prompt`: vocabulary or the previous segment's text to guide the transcript).
nlohmann::ordered_json transcription_messages(const std::string& prompt, bool translate = false);

// SubRip / WebVTT timestamps of `seconds` ("00:01:02,345" / "00:01:02.345").
std::string srt_timestamp(double seconds);
std::string vtt_timestamp(double seconds);

}  // namespace lfm
