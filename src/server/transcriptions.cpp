// POST /v1/audio/transcriptions and /v1/audio/translations (LFM2-Audio), as OpenAI defines them: a
// multipart/form-data upload (`file`, `model`, `prompt`, `response_format` json | text |
// verbose_json | srt | vtt, `language`, `temperature`, `stream`) → the clip decoded and resampled
// (chat_audio.h) → one transcription chat turn (engine/transcription.h) → the transcript, whole or
// as server-sent transcript.text.delta / transcript.text.done events. The model gives no
// timestamps inside a clip: verbose_json, srt and vtt hold one segment spanning the clip.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "core/error.h"
#include "engine/transcription.h"
#include "server/generate_util.h"
#include "server/server_impl.h"

namespace lfm::server {

using json = nlohmann::json;

namespace {

// The form's fields this endpoint reads; OpenAI's others it accepts and leaves alone.
const std::set<std::string> kKnownFields = {"file",     "model",       "prompt", "response_format", "language",
                                            "temperature", "stream",   "timestamp_granularities[]",
                                            "timestamp_granularities", "include[]", "chunking_strategy"};

struct TranscriptionForm {
  std::string file_bytes, file_name;
  std::string model, prompt, language;
  std::string format = "json";
  float temperature = 0;
  bool stream = false;
};

const std::string* form_value(const httplib::Request& req, const char* key) {
  auto it = req.files.find(key);
  return it == req.files.end() ? nullptr : &it->second.content;
}

TranscriptionForm parse_form(const httplib::Request& req) {
  if (!req.is_multipart_form_data())
    throw ApiError(400, "the request must be multipart/form-data with the audio in a 'file' field (Content-Type was '" +
                            req.get_header_value("Content-Type") + "')");
  for (const auto& [name, part] : req.files) {
    (void)part;
    if (!kKnownFields.count(name)) throw ApiError(400, "'" + name + "' is not a field of this endpoint", name);
    if (req.files.count(name) > 1 && name.find("[]") == std::string::npos)
      throw ApiError(400, "'" + name + "' is given more than once", name);
  }
  TranscriptionForm f;
  auto file = req.files.find("file");
  if (file == req.files.end()) throw ApiError(400, "'file' is missing: upload the audio as a form field named 'file'", "file");
  if (file->second.content.empty()) throw ApiError(400, "'file' is empty", "file");
  f.file_bytes = file->second.content;
  f.file_name = file->second.filename;
  if (auto v = form_value(req, "model")) f.model = *v;
  if (auto v = form_value(req, "prompt")) f.prompt = *v;
  if (auto v = form_value(req, "language")) {
    f.language = *v;
    const bool iso = (f.language.size() == 2 || f.language.size() == 3) &&
                     std::all_of(f.language.begin(), f.language.end(), [](char c) { return c >= 'a' && c <= 'z'; });
    if (!f.language.empty() && !iso)
      throw ApiError(400, "'language' must be an ISO-639-1 code such as 'en' (got '" + f.language + "')", "language");
  }
  if (auto v = form_value(req, "response_format")) {
    f.format = v->empty() ? "json" : *v;
    if (f.format != "json" && f.format != "text" && f.format != "verbose_json" && f.format != "srt" && f.format != "vtt")
      throw ApiError(400, "'response_format' must be one of json, text, verbose_json, srt, vtt (got '" + f.format + "')",
                     "response_format");
  }
  if (auto v = form_value(req, "temperature")) {
    char* end = nullptr;
    const double t = std::strtod(v->c_str(), &end);
    if (v->empty() || end != v->c_str() + v->size() || !std::isfinite(t) || t < 0 || t > 2)
      throw ApiError(400, "'temperature' must be a number from 0 to 2 (got '" + *v + "')", "temperature");
    f.temperature = static_cast<float>(t);
  }
  if (auto v = form_value(req, "stream")) {
    if (*v != "true" && *v != "false") throw ApiError(400, "'stream' must be true or false (got '" + *v + "')", "stream");
    f.stream = *v == "true";
  }
  if (f.stream && f.format != "json" && f.format != "text")
    throw ApiError(400, "'stream' works with response_format json or text, not " + f.format, "stream");
  return f;
}

json transcription_usage(const Usage& u, double seconds) {
  return {{"type", "tokens"},
          {"input_tokens", u.prompt_tokens},
          {"output_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"input_token_details", {{"audio_tokens", u.prompt_tokens}, {"text_tokens", 0}}},
          {"seconds", seconds}};
}

}  // namespace

void Server::Impl::handle_transcription(const httplib::Request& req, httplib::Response& res, bool translate) {
  engine();  // a retriever's 400 first
  this->tok(translate ? "/v1/audio/translations" : "/v1/audio/transcriptions");
  if (!chat || !chat->takes_audio()) throw ApiError(400, opt.no_audio);
  const TranscriptionForm f = parse_form(req);
  if (!serves_model(f.model))
    throw ApiError(404, "the model '" + f.model + "' does not exist; this server serves '" + opt.model_name + "'",
                   "model", "model_not_found");
  const AudioPromptSetup& setup = *chat->audio_setup();
  ChatTurnInput in;
  in.messages = transcription_messages(f.prompt, translate);
  in.audios.push_back(decode_audio_bytes(std::span(reinterpret_cast<const uint8_t*>(f.file_bytes.data()), f.file_bytes.size()),
                                         "file", opt.audio, setup.front_end.sample_rate));
  const double seconds = static_cast<double>(in.audios[0].size()) / setup.front_end.sample_rate;
  ChatTurn turn;
  try {
    turn = chat->build(in);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "file");
  }
  in.audios = {};
  Request r;
  r.sampling.temperature = f.temperature;
  r.sampling.logprobs = f.format == "verbose_json";  // the segment's avg_logprob
  turn.apply(r);
  apply_max_tokens(r, std::nullopt, engine().ctx_size(), "file");
  std::vector<Request> reqs;
  reqs.push_back(std::move(r));
  auto streams = submit_all(engine(), std::move(reqs));
  const std::string task = translate ? "translate" : "transcribe";

  if (!f.stream) {
    const std::vector<Generation> gens = read_whole(streams, http, metrics);
    const Generation& g = gens[0];
    std::string text;
    std::vector<int32_t> ids;
    double logprob = 0;
    for (const Event& ev : g.tokens) {
      text += ev.text;
      ids.push_back(ev.token);
      logprob += ev.logprob;
    }
    text += g.done.text;
    // The reply is the transcript; the model ends it with <|im_end|> (a stop id, not in the text).
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    const Usage& u = g.done.usage;
    if (f.format == "text") {
      res.set_content(text + "\n", "text/plain; charset=utf-8");
    } else if (f.format == "srt") {
      res.set_content("1\n" + srt_timestamp(0) + " --> " + srt_timestamp(seconds) + "\n" + text + "\n\n",
                      "application/x-subrip; charset=utf-8");
    } else if (f.format == "vtt") {
      res.set_content("WEBVTT\n\n" + vtt_timestamp(0) + " --> " + vtt_timestamp(seconds) + "\n" + text + "\n\n",
                      "text/vtt; charset=utf-8");
    } else if (f.format == "verbose_json") {
      json segment = {{"id", 0},
                      {"seek", 0},
                      {"start", 0.0},
                      {"end", seconds},
                      {"text", text},
                      {"tokens", ids},
                      {"temperature", f.temperature},
                      {"avg_logprob", ids.empty() ? 0.0 : logprob / static_cast<double>(ids.size())}};
      json out = {{"task", task},
                  {"language", f.language.empty() ? json() : json(f.language)},
                  {"duration", seconds},
                  {"text", text},
                  {"segments", json::array({segment})},
                  {"usage", transcription_usage(u, seconds)}};
      res.set_content(dump(out), "application/json");
    } else {
      res.set_content(dump({{"text", text}, {"usage", transcription_usage(u, seconds)}}), "application/json");
    }
    return;
  }

  auto full = std::make_shared<std::string>();
  auto timing = std::make_shared<Timing>();
  auto on_event = [=, this](size_t, const Event& ev, httplib::DataSink& sink) {
    if (ev.kind == Event::Kind::kToken) timing->token(metrics);
    if (!ev.text.empty()) {
      *full += ev.text;
      if (!sse(sink, dump({{"type", "transcript.text.delta"}, {"delta", ev.text}}))) return false;
    }
    if (ev.kind != Event::Kind::kDone) return true;
    timing->done(metrics, ev.usage);
    if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kCancelled)
      return sse(sink, error_body(ev.finish == FinishReason::kError ? (ev.request_error ? 400 : 500) : 503,
                                  ev.finish == FinishReason::kError ? ev.error : "the request was cancelled"));
    std::string text = *full;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return sse(sink, dump({{"type", "transcript.text.done"}, {"text", text}, {"usage", transcription_usage(ev.usage, seconds)}}));
  };
  stream_response(res, std::move(streams), on_event, [](httplib::DataSink&) { return true; });
}

}  // namespace lfm::server
