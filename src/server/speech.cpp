// POST /v1/audio/speech (LFM2.5-Audio), as OpenAI defines it (the fields and choices are in
// server/speech.h): a JSON body → the TTS turn (engine/speech_prompt.h) in sequential mode → the
// waveform the engine streams, encoded as it comes (audio/audio_encode.h) → chunked bytes, or
// server-sent speech.audio.delta / speech.audio.done events. Every check is made before the
// request is submitted; the response's status waits for the first audio bytes, so an answer that
// fails before speaking is a JSON error like the other endpoints', and one that fails later ends
// its stream without the closing chunk (the client sees a cut response, not a short file).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>

#include "audio/audio_encode.h"
#include "core/base64.h"
#include "core/error.h"
#include "core/utf8.h"
#include "engine/speech_prompt.h"
#include "server/generate_util.h"
#include "server/speech.h"
#include "server/server_impl.h"

namespace lfm::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

const std::set<std::string> kKnownFields = {"model",       "input",        "voice", "response_format", "speed",
                                            "instructions", "stream_format", "temperature", "top_k",
                                            "audio_temperature", "audio_top_k", "seed", "speak_now"};

const ojson* field(const ojson& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

float number_in(const ojson& body, const char* name, double lo, double hi, float fallback) {
  const ojson* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < lo || v->get<double>() > hi)
    throw ApiError(400, cat("'", name, "' must be a number from ", lo, " to ", hi), name);
  return v->get<float>();
}

int count_in(const ojson& body, const char* name, int fallback) {
  const ojson* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > 1000000)
    throw ApiError(400, cat("'", name, "' must be a whole number from 0 (all) up"), name);
  return static_cast<int>(v->get<int64_t>());
}

}  // namespace

SpeechRequest parse_speech_request(const ojson& body, const SpeechOptions& opt) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  for (const auto& [name, value] : body.items()) {
    (void)value;
    if (!kKnownFields.count(name)) throw ApiError(400, "'" + name + "' is not a field of this endpoint", name);
  }
  SpeechRequest p;
  const ojson* input = field(body, "input");
  if (!input) throw ApiError(400, "'input' is missing: give the text to speak", "input");
  if (!input->is_string()) throw ApiError(400, "'input' must be a string", "input");
  p.input = input->get<std::string>();
  if (find_invalid_utf8(p.input) != std::string_view::npos) throw ApiError(400, "'input' is not valid UTF-8", "input");
  // Characters as OpenAI counts them (code points), before anything is tokenized.
  const size_t chars = static_cast<size_t>(
      std::count_if(p.input.begin(), p.input.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
  if (chars == 0) throw ApiError(400, "'input' is empty: give the text to speak", "input");
  if (chars > opt.max_input_chars)
    throw ApiError(400, cat("'input' has ", chars, " characters, over the limit of ", opt.max_input_chars), "input");

  const ojson* voice = field(body, "voice");
  if (!voice) throw ApiError(400, "'voice' is missing: choose one of " + speech_voice_list(), "voice");
  if (!voice->is_string()) throw ApiError(400, "'voice' must be a string: one of " + speech_voice_list(), "voice");
  try {
    p.voice = &parse_voice(voice->get<std::string>());
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "voice");
  }

  if (const ojson* f = field(body, "response_format")) {
    if (!f->is_string()) throw ApiError(400, "'response_format' must be a string", "response_format");
    try {
      p.format = audio::parse_audio_format(f->get<std::string>());
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "response_format");
    }
  }
  if (!audio::audio_format_writable(p.format)) {
    std::string writable;
    for (audio::AudioFormat f : audio::writable_audio_formats()) writable += cat(writable.empty() ? "" : ", ", audio::audio_format_name(f));
    throw ApiError(400,
                   cat(audio::audio_format_name(p.format), " is not available on this server (its libsndfile cannot ",
                       "write it", field(body, "response_format") ? "" : "; mp3 is the default format", "): set ",
                       "'response_format' to one of ", writable),
                   "response_format");
  }
  if (const ojson* s = field(body, "speed")) {
    if (!s->is_number() || s->get<double>() != 1.0)
      throw ApiError(400, "'speed' must be 1: the model has no speaking-rate control (change the rate on playback)", "speed");
  }
  if (const ojson* i = field(body, "instructions"); i && !i->is_string())
    throw ApiError(400, "'instructions' must be a string", "instructions");
  if (const ojson* s = field(body, "stream_format")) {
    if (!s->is_string() || (*s != "audio" && *s != "sse"))
      throw ApiError(400, "'stream_format' must be \"audio\" or \"sse\"", "stream_format");
    p.sse = *s == "sse";
  }
  p.text.temperature = number_in(body, "temperature", 0, 2, 0);
  p.text.top_k = count_in(body, "top_k", 0);
  p.audio.temperature = number_in(body, "audio_temperature", 0, 2, opt.audio_temperature);
  p.audio.top_k = count_in(body, "audio_top_k", opt.audio_top_k);
  if (const ojson* s = field(body, "seed")) {
    if (!s->is_number_integer()) throw ApiError(400, "'seed' must be an integer", "seed");
    p.text.seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
  }
  if (const ojson* s = field(body, "speak_now")) {
    if (!s->is_boolean()) throw ApiError(400, "'speak_now' must be true or false", "speak_now");
    p.speak_now = s->get<bool>();
    if (p.speak_now && opt.audio_start_id < 0)
      throw ApiError(400, "'speak_now' needs the model's <|audio_start|> id, which this server does not know", "speak_now");
  }
  return p;
}

namespace {

// Output tokens: every generated step, text tokens and audio frames alike.
json speech_usage(const Usage& u) {
  return {{"input_tokens", u.prompt_tokens},
          {"output_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// One answer's state, shared by the handler (until the first bytes) and the chunked provider.
struct SpeechRun {
  std::shared_ptr<RequestStream> stream;
  audio::AudioFormat format;
  bool sse = false;
  double max_seconds = 0;
  std::optional<audio::AudioStreamEncoder> enc;
  int sample_rate = 0;
  int64_t samples = 0;
  bool cut = false;     // stopped at max_seconds (by us: not an error)
  bool ended = false;   // kDone taken
  bool written = false; // the response's last frame written
  Event done;
  Timing timing;

  // Takes one event; returns the encoded bytes it made (the last ones with kDone). Throws
  // ApiError for an answer that failed or was cancelled, and for one without any audio.
  std::string take(Event& ev, Metrics& metrics) {
    std::string bytes;
    if (ev.kind == Event::Kind::kToken) timing.token(metrics);
    if (!ev.audio.empty() && !cut) {
      if (!enc) {
        sample_rate = ev.sample_rate;
        enc.emplace(format, sample_rate);
      }
      if (ev.sample_rate != sample_rate)
        throw std::runtime_error(cat("speech: the engine changed the sample rate from ", sample_rate, " to ", ev.sample_rate, " Hz"));
      bytes = enc->push(ev.audio);
      samples += static_cast<int64_t>(ev.audio.size());
      if (static_cast<double>(samples) / sample_rate >= max_seconds) {
        cut = true;
        stream->cancel();
      }
    }
    if (ev.kind != Event::Kind::kDone) return bytes;
    ended = true;
    timing.done(metrics, ev.usage);
    done = std::move(ev);
    if (done.finish == FinishReason::kError) {
      if (done.request_error) throw ApiError(400, done.error, "input");
      throw std::runtime_error(done.error);
    }
    if (done.finish == FinishReason::kCancelled && !cut)
      throw ApiError(503, "the request was cancelled (client gone, or the server is shutting down)");
    if (!enc) throw std::runtime_error(cat("speech: the model produced no audio (", done.usage.completion_tokens, " tokens)"));
    metrics.add("lfm:speech_audio_seconds_total", static_cast<double>(samples) / sample_rate);
    return bytes + enc->finish();
  }

  // The bytes as the response carries them.
  std::string frame(const std::string& bytes) const {
    if (!sse || bytes.empty()) return bytes;
    return "data: " + dump({{"type", "speech.audio.delta"}, {"audio", encode_base64(bytes.data(), bytes.size())}}) + "\n\n";
  }
  std::string closing() const {
    if (!sse) return "";
    return "data: " + dump({{"type", "speech.audio.done"}, {"usage", speech_usage(done.usage)}}) + "\n\n";
  }
};

}  // namespace

void Server::Impl::handle_speech(const httplib::Request& req, httplib::Response& res) {
  engine();  // a retriever's 400 first
  this->tok("/v1/audio/speech");
  if (!opt.speech_out || !chat) throw ApiError(400, opt.no_speech);
  const auto body = parse_json_body(req);
  check_model(body);
  const SpeechRequest p = parse_speech_request(body, opt.speech);
  Request r;
  try {
    r = tts_request(*chat, p.input, *p.voice, p.audio, p.text);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "input");
  }
  if (p.speak_now) {  // as lfm speak --speak-now: the turn opens with <|audio_start|>
    r.prompt.push_back(opt.speech.audio_start_id);
    r.audio_out.audio_first = true;
  }
  apply_max_tokens(r, std::nullopt, engine().ctx_size(), "input");
  std::vector<Request> reqs;
  reqs.push_back(std::move(r));
  auto run = std::make_shared<SpeechRun>();
  run->stream = submit_all(engine(), std::move(reqs))[0];
  run->format = p.format;
  run->sse = p.sse;
  run->max_seconds = opt.speech.max_audio_seconds;

  // Until the first bytes (or the end), on this thread: a failure here is still an HTTP error.
  std::string first;
  Event ev;
  auto checked = Clock::now();
  try {
    while (first.empty() && !run->ended) {
      if (run->stream->next_for(ev, std::chrono::milliseconds(50))) first = run->take(ev, metrics);
      if (Clock::now() - checked >= std::chrono::milliseconds(50)) {
        checked = Clock::now();
        if (http.client_gone() || draining.load())
          throw ApiError(503, draining.load() ? "the server is shutting down" : "the client went away");
      }
    }
  } catch (...) {
    run->stream->cancel();  // (a no-op once it has ended)
    throw;
  }
  first = run->frame(first);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      p.sse ? "text/event-stream" : audio::audio_content_type(p.format),
      [run, first, this](size_t, httplib::DataSink& sink) mutable {
        auto write = [&](const std::string& s) { return s.empty() || (sink.is_writable() && sink.write(s.data(), s.size())); };
        if (!first.empty()) {
          if (!write(first)) return false;
          first.clear();
        }
        Event e;
        try {
          while (!run->ended) {
            if (!run->stream->next_for(e, std::chrono::milliseconds(100))) {
              if (!sink.is_writable()) return false;  // client gone while we waited
              return true;                            // httplib calls again
            }
            if (!write(run->frame(run->take(e, metrics)))) return false;
          }
        } catch (const std::exception& ex) {
          // Too late for a status: end without the closing chunk, so the client sees the cut.
          std::fprintf(stderr, "lfm serve: /v1/audio/speech failed while streaming: %s\n", ex.what());
          return false;
        }
        if (!write(run->closing())) return false;
        run->written = true;
        sink.done();
        return true;
      },
      [run](bool success) {
        if (!success || !run->written) run->stream->cancel();  // disconnected or aborted
      });
}

}  // namespace lfm::server
