// Spoken chat on POST /v1/chat/completions (LFM2-Audio speech output), as OpenAI's audio chat:
//
// Request: "modalities": ["text", "audio"] with "audio": {"voice", "format"} (format wav, mp3,
// flac, opus or pcm16 — OpenAI's names; voice one of the model's: us_male, us_female, uk_male,
// uk_female, engine/speech_prompt.h) makes the reply interleaved text and audio
// (AudioOutMode::kInterleaved). A conversation without a system message gets the spoken-chat one,
// "Respond with interleaved text and audio. Use the <voice> voice."; one with its own system
// message is used as it is. Ours: "audio": {"temperature", "top_k"} for the audio codes (default
// 0.8 / 4, llama.cpp's runner for interleaved chat; the text follows the request's sampling).
// A model without speech output refuses modalities audio (400 naming "modalities").
//
// Response: choices[0].message {"content": null, "audio": {"id", "data" (base64 of the whole
// reply encoded in `format`), "expires_at" (unix seconds), "transcript" (the text)}}; streamed,
// delta.audio chunks {"id", "transcript": the next text} and {"id", "data": base64 of the next
// 16-bit PCM samples (whatever the format: OpenAI streams pcm16)}, then {"id", "expires_at"}
// before the finish chunk. usage.completion_tokens_details.audio_tokens counts the frames.
//
// Multi-turn: an assistant message {"audio": {"id"}} stands for that earlier reply. Each reply
// (its text ids and audio frames as generated: engine/spoken_turn.h) is kept in a SpokenReplyStore
// by id — least recently used first out under a byte budget, and at most `store_seconds` — and put
// back at the message's place in the prompt (Request::audio_frames), so the prefix cache finds the
// spoken turn. An id that is unknown, expired or evicted is a 400 naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "audio/audio_encode.h"
#include "engine/request.h"
#include "engine/speech_prompt.h"
#include "engine/spoken_turn.h"
#include "server/api_types.h"

namespace lfm::server {

struct SpokenChatOptions {
  // The model's speech output (0 codebooks: it does not speak) and whether its frames become a
  // waveform (the model's detokenizer); without one the replies are kept as codes (for later
  // turns) and "data" is empty.
  int64_t codebooks = 0;
  int64_t audio_vocab = 0;
  bool waveform = false;
  int sample_rate = 24000;
  size_t store_bytes = size_t(256) << 20;  // lfm serve --spoken-store-bytes
  int64_t store_seconds = 3600;            // lfm serve --spoken-store-seconds (OpenAI keeps audio 1 hour)
  std::string no_speech = "the model does not speak: it has no audio output (serve an LFM2-Audio model)";
};

// The request's speech output fields, checked (400 naming the field).
struct ChatSpeech {
  bool on = false;  // modalities holds "audio"
  const SpeechVoice* voice = nullptr;
  std::string format_name = "wav";  // as OpenAI names it
  audio::AudioFormat format = audio::AudioFormat::kWav;
  AudioOutParams audio;  // kInterleaved, temperature, top_k, waveform
};
ChatSpeech parse_chat_speech(const nlohmann::ordered_json& body, const SpokenChatOptions& opt);

// Spoken replies by id; thread-safe.
class SpokenReplyStore {
 public:
  SpokenReplyStore(size_t max_bytes, int64_t max_seconds) : max_bytes_(max_bytes), max_seconds_(max_seconds) {}
  // A fresh id ("audio_…", unguessable).
  std::string new_id();
  // Keeps `reply` under `id` (dropping the least recently used over the budget; a reply larger
  // than the whole budget is not kept) and returns its expiry (unix seconds).
  int64_t put(const std::string& id, std::shared_ptr<const SpokenReply> reply);
  // The reply, now the most recently used; null when unknown, expired or dropped.
  std::shared_ptr<const SpokenReply> find(const std::string& id);
  size_t bytes() const;
  size_t size() const;

 private:
  struct Entry {
    std::string id;
    std::shared_ptr<const SpokenReply> reply;
    int64_t expires_at;
    size_t bytes;
  };
  void drop_expired(int64_t now);  // with mu_ held
  const size_t max_bytes_;
  const int64_t max_seconds_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  size_t bytes_ = 0;
  uint64_t counter_ = 0;
};

// The replies an assistant message's "audio": {"id"} refers to, in order; 400 naming the field
// for an id the store does not have (or a model that does not speak).
std::vector<std::shared_ptr<const SpokenReply>> find_spoken_replies(const std::vector<ChatParams::SpokenRef>& refs,
                                                                    SpokenReplyStore& store, const SpokenChatOptions& opt);

// One choice's spoken reply as it is generated: the reply recorded, the waveform gathered (whole)
// or handed out as PCM16 (streamed).
class SpokenChoice {
 public:
  SpokenChoice(std::string id, const ChatSpeech& speech, const SpokenChatOptions& opt);
  const std::string& id() const { return id_; }
  // Records the event; returns the base64 of its samples as 16-bit PCM ("" when it has none).
  std::string add(const Event& ev);
  // Keeps the reply in the store with `transcript`; its expiry.
  int64_t keep(SpokenReplyStore& store, const std::string& transcript);
  // The whole waveform encoded in the request's format, base64 ("" without a waveform).
  std::string encoded_base64() const;
  int64_t frames() const { return recorder_.reply().frames(); }

 private:
  std::string id_;
  audio::AudioFormat format_;
  int sample_rate_;
  SpokenReplyRecorder recorder_;
  std::vector<float> samples_;
  audio::AudioStreamEncoder pcm_;
};

// usage_json with completion_tokens_details.audio_tokens (the frames generated).
nlohmann::json spoken_usage(nlohmann::json usage, const Usage& u);

}  // namespace lfm::server
