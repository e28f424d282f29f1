#include "server/chat_speech.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "core/base64.h"
#include "core/error.h"

namespace lfm::server {

using ojson = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "' " + message, param);
}

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// OpenAI's chat audio formats and ours behind them.
struct ChatFormat {
  const char* name;
  audio::AudioFormat format;
};
constexpr ChatFormat kFormats[] = {{"wav", audio::AudioFormat::kWav},
                                   {"mp3", audio::AudioFormat::kMp3},
                                   {"flac", audio::AudioFormat::kFlac},
                                   {"opus", audio::AudioFormat::kOpus},
                                   {"pcm16", audio::AudioFormat::kPcm}};

}  // namespace

ChatSpeech parse_chat_speech(const ojson& body, const SpokenChatOptions& opt) {
  ChatSpeech s;
  auto m = body.find("modalities");
  if (m != body.end() && !m->is_null()) {
    if (!m->is_array()) bad("modalities", "must be an array of \"text\" and \"audio\"");
    for (size_t i = 0; i < m->size(); ++i) {
      const auto& v = (*m)[i];
      if (!v.is_string() || (v != "text" && v != "audio"))
        bad("modalities[" + std::to_string(i) + "]", "must be \"text\" or \"audio\"");
      if (v == "audio") s.on = true;
    }
  }
  auto a = body.find("audio");
  const bool has_audio = a != body.end() && !a->is_null();
  if (!s.on) {
    if (has_audio) bad("audio", "is set but 'modalities' does not ask for \"audio\"");
    return s;
  }
  if (opt.codebooks <= 0) bad("modalities", "asks for audio, but " + opt.no_speech);
  if (!has_audio || !a->is_object())
    bad("audio", "must be an object {\"voice\": …, \"format\": \"wav\"} when 'modalities' asks for audio");
  auto voice = a->find("voice");
  if (voice == a->end() || !voice->is_string()) bad("audio.voice", "must be a string (" + speech_voice_list() + ")");
  try {
    s.voice = &parse_voice(voice->get<std::string>());
  } catch (const Error& e) {
    bad("audio.voice", e.what());
  }
  auto format = a->find("format");
  if (format == a->end() || !format->is_string()) bad("audio.format", "must be a string (wav, mp3, flac, opus, pcm16)");
  s.format_name = format->get<std::string>();
  const auto* f = std::find_if(std::begin(kFormats), std::end(kFormats),
                               [&](const ChatFormat& c) { return s.format_name == c.name; });
  if (f == std::end(kFormats)) bad("audio.format", "'" + s.format_name + "' is not one of wav, mp3, flac, opus, pcm16");
  s.format = f->format;
  if (!audio::audio_format_writable(s.format))
    bad("audio.format", "'" + s.format_name + "' cannot be written by this build (its libsndfile lacks the encoder)");
  s.audio.mode = AudioOutMode::kInterleaved;
  s.audio.temperature = 0.8f;
  s.audio.top_k = 4;
  if (auto t = a->find("temperature"); t != a->end() && !t->is_null()) {
    if (!t->is_number() || !std::isfinite(t->get<double>()) || t->get<double>() < 0 || t->get<double>() > 2)
      bad("audio.temperature", "must be a number between 0 and 2");
    s.audio.temperature = t->get<float>();
  }
  if (auto k = a->find("top_k"); k != a->end() && !k->is_null()) {
    if (!k->is_number_integer() || k->get<int64_t>() < 0 || k->get<int64_t>() > opt.audio_vocab)
      bad("audio.top_k", "must be an integer between 0 (all codes) and " + std::to_string(opt.audio_vocab));
    s.audio.top_k = static_cast<int>(k->get<int64_t>());
  }
  s.audio.waveform = opt.waveform;
  return s;
}

std::string SpokenReplyStore::new_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t n;
  {
    std::lock_guard lock(mu_);
    n = ++counter_;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "audio_%llx%016llx", static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(rng()));
  return buf;
}

void SpokenReplyStore::drop_expired(int64_t now) {
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->expires_at > now) {
      ++it;
      continue;
    }
    bytes_ -= it->bytes;
    by_id_.erase(it->id);
    it = lru_.erase(it);
  }
}

int64_t SpokenReplyStore::put(const std::string& id, std::shared_ptr<const SpokenReply> reply) {
  const int64_t now = now_seconds(), expires = now + max_seconds_;
  const size_t bytes = reply->bytes() + id.size();
  std::lock_guard lock(mu_);
  drop_expired(now);
  if (bytes > max_bytes_) return expires;  // larger than the whole budget: a later reference is a 400
  if (auto old = by_id_.find(id); old != by_id_.end()) {
    bytes_ -= old->second->bytes;
    lru_.erase(old->second);
    by_id_.erase(old);
  }
  while (!lru_.empty() && bytes_ + bytes > max_bytes_) {
    bytes_ -= lru_.back().bytes;
    by_id_.erase(lru_.back().id);
    lru_.pop_back();
  }
  lru_.push_front({id, std::move(reply), expires, bytes});
  by_id_[id] = lru_.begin();
  bytes_ += bytes;
  return expires;
}

std::shared_ptr<const SpokenReply> SpokenReplyStore::find(const std::string& id) {
  std::lock_guard lock(mu_);
  drop_expired(now_seconds());
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->reply;
}

size_t SpokenReplyStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t SpokenReplyStore::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

std::vector<std::shared_ptr<const SpokenReply>> find_spoken_replies(const std::vector<ChatParams::SpokenRef>& refs,
                                                                    SpokenReplyStore& store, const SpokenChatOptions& opt) {
  std::vector<std::shared_ptr<const SpokenReply>> out;
  for (const auto& ref : refs) {
    if (opt.codebooks <= 0) bad(ref.param, "refers to a spoken reply, but " + opt.no_speech);
    auto reply = store.find(ref.id);
    if (!reply)
      bad(ref.param, "'" + ref.id + "' is not the id of a spoken reply this server still has (unknown, expired after " +
                         std::to_string(opt.store_seconds) + " s, or dropped for room: lfm serve --spoken-store-bytes, "
                         "--spoken-store-seconds)");
    out.push_back(std::move(reply));
  }
  return out;
}

SpokenChoice::SpokenChoice(std::string id, const ChatSpeech& speech, const SpokenChatOptions& opt)
    : id_(std::move(id)),
      format_(speech.format),
      sample_rate_(opt.sample_rate),
      recorder_(opt.codebooks, opt.audio_vocab),
      pcm_(audio::AudioFormat::kPcm, opt.sample_rate) {}

std::string SpokenChoice::add(const Event& ev) {
  recorder_.add(ev);
  if (ev.audio.empty()) return {};
  if (ev.sample_rate > 0) sample_rate_ = ev.sample_rate;
  samples_.insert(samples_.end(), ev.audio.begin(), ev.audio.end());
  const std::string bytes = pcm_.push(ev.audio);
  return bytes.empty() ? std::string() : encode_base64(bytes.data(), bytes.size());
}

int64_t SpokenChoice::keep(SpokenReplyStore& store, const std::string& transcript) {
  auto reply = std::make_shared<SpokenReply>(recorder_.take());
  reply->transcript = transcript;
  return store.put(id_, std::move(reply));
}

std::string SpokenChoice::encoded_base64() const {
  if (samples_.empty()) return {};
  const std::string bytes = audio::encode_audio(samples_, sample_rate_, format_);
  return encode_base64(bytes.data(), bytes.size());
}

nlohmann::json spoken_usage(nlohmann::json usage, const Usage& u) {
  usage["completion_tokens_details"] = {{"audio_tokens", u.audio_frames}};
  return usage;
}

}  // namespace lfm::server
