#include "engine/speech_prompt.h"

#include <array>
#include <cctype>

#include "core/error.h"
#include "engine/content_hash.h"

namespace lfm {

namespace {

constexpr std::array<SpeechVoice, 4> kVoices = {{
    {"us_male", "US male"},
    {"us_female", "US female"},
    {"uk_male", "UK male"},
    {"uk_female", "UK female"},
}};

// Lower case, each run of spaces, '-' and '_' one '_', the ends trimmed: "US  Female" → "us_female".
std::string normalized(const std::string& name) {
  std::string out;
  bool gap = false;
  for (char c : name) {
    if (c == ' ' || c == '-' || c == '_' || c == '\t') {
      gap = !out.empty();
      continue;
    }
    if (gap) out += '_';
    gap = false;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

std::span<const SpeechVoice> speech_voices() { return kVoices; }

std::string speech_voice_list() {
  std::string s;
  for (const SpeechVoice& v : kVoices) s += cat(s.empty() ? "" : ", ", v.id);
  return s;
}

const SpeechVoice& parse_voice(const std::string& name) {
  const std::string n = normalized(name);
  for (const SpeechVoice& v : kVoices)
    if (n == v.id) return v;
  fail("speech: unknown voice '", name, "'; the model speaks with ", speech_voice_list(),
       " (or as the prompts name them: \"US female\", …)");
}

std::string tts_system_prompt(const SpeechVoice& voice) { return cat("Perform TTS. Use the ", voice.prompt_name, " voice."); }

nlohmann::ordered_json tts_messages(const std::string& text, const SpeechVoice& voice) {
  return nlohmann::ordered_json::array({
      {{"role", "system"}, {"content", tts_system_prompt(voice)}},
      {{"role", "user"}, {"content", text}},
  });
}

nlohmann::ordered_json spoken_chat_messages(const nlohmann::ordered_json& messages) {
  LFM_CHECK(messages.is_array(), "speech: the conversation must be an array of messages");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  out.push_back({{"role", "system"}, {"content", kSpokenChatSystemPrompt}});
  for (const auto& m : messages) {
    LFM_CHECK(!(m.is_object() && m.contains("role") && m["role"] == "system"),
              "speech: a spoken chat takes no system message of its own (the model answers in speech under \"",
              kSpokenChatSystemPrompt, "\" only)");
    out.push_back(m);
  }
  return out;
}

ChatTurn tts_turn(const ChatTurnBuilder& chat, const std::string& text, const SpeechVoice& voice) {
  LFM_CHECK(!text.empty(), "speech: no text to speak");
  ChatTurnInput in;
  in.messages = tts_messages(text, voice);
  return chat.build(in);
}

Request tts_request(const ChatTurnBuilder& chat, const std::string& text, const SpeechVoice& voice,
                    const AudioOutParams& audio, const SamplingParams& sampling) {
  Request r;
  r.sampling = sampling;
  tts_turn(chat, text, voice).apply(r);
  r.audio_out = audio;
  r.audio_out.mode = AudioOutMode::kSequential;
  return r;
}

uint64_t audio_frames_hash(int64_t frames, int64_t codebooks, std::span<const int32_t> codes) {
  ContentHash h("speech");
  static constexpr char kTag[] = "lfm-audio-out-frames";
  h.add(kTag, sizeof(kTag));
  h.add(&frames, sizeof(frames));
  h.add(&codebooks, sizeof(codebooks));
  h.add(codes);
  return h.finish();
}

std::shared_ptr<const AudioOutFrames> make_audio_out_frames(int64_t position, int64_t codebooks,
                                                            std::vector<int32_t> codes, int64_t audio_vocab_size) {
  LFM_CHECK(codebooks >= 1, "speech: bad codebook count ", codebooks);
  LFM_CHECK(position >= 0, "speech: bad position ", position, " for spoken frames");
  LFM_CHECK(!codes.empty() && codes.size() % size_t(codebooks) == 0, "speech: ", codes.size(),
            " codes are not a whole number of ", codebooks, "-code frames");
  for (size_t i = 0; i < codes.size(); ++i) {
    LFM_CHECK(codes[i] >= 0 && codes[i] < audio_vocab_size, "speech: code ", codes[i], " (frame ",
              i / size_t(codebooks), ", codebook ", i % size_t(codebooks), ") is outside [0, ", audio_vocab_size, ")");
  }
  auto f = std::make_shared<AudioOutFrames>();
  f->position = position;
  f->frames = int64_t(codes.size()) / codebooks;
  f->hash = audio_frames_hash(f->frames, codebooks, codes);
  f->codes = std::move(codes);
  return f;
}

}  // namespace lfm
