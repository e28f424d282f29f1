// POST /v1/chat/completions and /v1/completions: request → engine → OpenAI response, whole or
// as server-sent events. A streaming client that goes away cancels its request (the engine
// frees its state at once).
#include <atomic>
#include <chrono>
#include <memory>

#include "chat/output_parser.h"
#include "core/error.h"
#include "server/server_impl.h"

namespace lfm::server {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::atomic<uint64_t> g_next_id{1};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* finish_name(FinishReason r, bool tool_calls) {
  if (tool_calls && r == FinishReason::kStop) return "tool_calls";
  return r == FinishReason::kLength ? "length" : "stop";
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// Time-to-first-token, inter-token latency and end-to-end latency, and the token counters.
struct Timing {
  Clock::time_point start = Clock::now(), last;
  bool first = true;
  void token(Metrics& m) {
    const auto now = Clock::now();
    if (first)
      m.observe_ttft(std::chrono::duration<double>(now - start).count());
    else
      m.observe_itl(std::chrono::duration<double>(now - last).count());
    first = false;
    last = now;
  }
  void done(Metrics& m, const Usage& u) {
    note_usage(u.prompt_tokens, u.completion_tokens);
    m.observe_e2e(std::chrono::duration<double>(Clock::now() - start).count());
    m.add("lfm:prompt_tokens_total", static_cast<double>(u.prompt_tokens));
    m.add("lfm:generation_tokens_total", static_cast<double>(u.completion_tokens));
    m.add("lfm:prefix_cache_hit_tokens_total", static_cast<double>(u.cached_tokens));
    m.add("lfm:num_preemptions_total", static_cast<double>(u.preemptions));
    m.add("lfm:spec_decode_num_draft_tokens_total", static_cast<double>(u.drafted_tokens));
    m.add("lfm:spec_decode_num_accepted_tokens_total", static_cast<double>(u.accepted_tokens));
  }
};

// max_tokens against the context: past it is the client's error (400 context_length_exceeded,
// naming `prompt_param`: "messages" on chat, "prompt" on completions), absent means "until the
// context is full".
void apply_max_tokens(Request& r, const std::optional<int64_t>& max_tokens, int64_t ctx, const char* prompt_param) {
  const int64_t p = static_cast<int64_t>(r.prompt.size());
  if (p >= ctx)
    throw ApiError(400, "the prompt has " + std::to_string(p) + " tokens; the context size is " + std::to_string(ctx),
                   prompt_param, "context_length_exceeded");
  if (max_tokens && p + *max_tokens > ctx)
    throw ApiError(400,
                   "the prompt (" + std::to_string(p) + " tokens) plus max_tokens (" + std::to_string(*max_tokens) +
                       ") is past the context size " + std::to_string(ctx),
                   "max_tokens", "context_length_exceeded");
  r.max_tokens = max_tokens ? *max_tokens : -1;
}

// The request's speculative decoding, or the server's default.
void apply_speculation(Request& r, const GenerationParams& g, const ServerOptions& opt, const Engine& engine) {
  r.drafter = g.drafter.value_or(opt.drafter);
  r.max_drafts = g.max_drafts.value_or(opt.max_drafts);
  if (r.drafter == Drafter::kModel && !engine.has_draft_model())
    throw ApiError(400, "speculative.draft \"model\" needs a draft model, and this server has none (lfm serve --draft-model)",
                   "speculative.draft");
}

// Reads the events of a request whose whole response is being built, and cancels the request
// when its client has closed the connection (the engine then ends it with kCancelled at once
// instead of running it to max_tokens for nobody). The socket is looked at every 50 ms, whether
// or not tokens keep coming.
class WholeResponseReader {
 public:
  WholeResponseReader(RequestStream& stream, const GuardedHttpServer& http) : stream_(stream), http_(http) {}
  bool next(Event& ev) {
    while (true) {
      const auto now = Clock::now();
      if (now - checked_ >= kEvery) {
        checked_ = now;
        if (!stream_.cancel_requested() && http_.client_gone()) stream_.cancel();
      }
      if (stream_.next_for(ev, kEvery)) return true;
      if (stream_.finished()) return false;
    }
  }

 private:
  static constexpr std::chrono::milliseconds kEvery{50};
  RequestStream& stream_;
  const GuardedHttpServer& http_;
  Clock::time_point checked_ = Clock::now();
};

// Writes one SSE event; false when the client is gone.
bool sse(httplib::DataSink& sink, const std::string& data) {
  const std::string frame = "data: " + data + "\n\n";
  return sink.is_writable() && sink.write(frame.data(), frame.size());
}

// Drives a stream with server-sent events: `on_event` turns each engine event into frames; the
// request is cancelled when the client disconnects.
template <typename OnEvent>
void stream_response(httplib::Response& res, std::shared_ptr<RequestStream> stream, OnEvent on_event) {
  auto done = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream, done, on_event](size_t, httplib::DataSink& sink) mutable {
        Event ev;
        if (!stream->next_for(ev, std::chrono::milliseconds(100))) {
          if (stream->finished()) {
            sink.done();
            return true;
          }
          if (!sink.is_writable()) {  // client gone while we waited
            stream->cancel();
            return false;
          }
          return true;
        }
        if (!on_event(ev, sink)) {
          stream->cancel();
          return false;
        }
        if (ev.kind == Event::Kind::kDone) {
          *done = true;
          if (!sse(sink, "[DONE]")) return false;
          sink.done();
        }
        return true;
      },
      [stream, done](bool success) {
        if (!success || !*done) stream->cancel();  // disconnected or aborted: free the state
      });
}

}  // namespace

void Server::Impl::handle_chat(const httplib::Request& req, httplib::Response& res) {
  this->tok("/v1/chat/completions");
  if (!chat->has_template()) throw ApiError(400, "the model ships no chat template; use /v1/completions");
  const json body = parse_json_body(req);
  check_model(body);
  ChatParams c = parse_chat_request(body, engine.vocab_size(), opt.sampling_defaults);
  ChatTurnInput in;
  in.messages = std::move(c.messages);
  in.tools = std::move(c.tools);
  in.tool_choice = c.tool_choice;
  in.named_tool = c.named_tool;
  in.template_kwargs = std::move(c.template_kwargs);
  const ChatTurn turn = chat->build(in);
  Request r = std::move(c.gen.req);
  turn.apply(r);
  apply_max_tokens(r, c.gen.max_tokens, engine.ctx_size(), "messages");
  apply_speculation(r, c.gen, opt, engine);
  Timing timing;
  const int64_t created = unix_seconds();
  auto stream = engine.submit(std::move(r));
  const std::string id = "chatcmpl-" + std::to_string(g_next_id++);
  chat::OutputParserOptions po = turn.parser;
  po.tool_call_id_prefix = "call_" + std::to_string(stream->id()) + "_";
  auto parser = std::make_shared<chat::StreamingOutputParser>(po);
  parser->feed(turn.forced);  // held back: the block completes with the generated text
  const bool want_logprobs = c.gen.logprobs;
  auto logprob_entry = [this, want_logprobs](const Event& ev) {
    json top = json::array();
    for (const auto& t : ev.top_logprobs)
      top.push_back({{"token", token_text(t.token)}, {"logprob", t.logprob}, {"bytes", token_bytes(t.token)}});
    return json{{"token", token_text(ev.token)},
                {"logprob", ev.logprob},
                {"bytes", token_bytes(ev.token)},
                {"top_logprobs", top}};
  };
  const json base = {{"id", id}, {"created", created}, {"model", opt.model_name}};

  if (!c.gen.stream) {
    std::string content, reasoning;
    json tool_calls = json::array(), logprobs = json::array();
    auto absorb = [&](const std::vector<chat::StreamEvent>& events) {
      for (const auto& e : events) {
        if (e.kind == chat::StreamEvent::Kind::kContent) content += e.text;
        if (e.kind == chat::StreamEvent::Kind::kReasoning) reasoning += e.text;
        if (e.kind == chat::StreamEvent::Kind::kToolCall) tool_calls.push_back(json::parse(e.tool_call.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)));
      }
    };
    Event ev;
    WholeResponseReader reader(*stream, http);
    while (reader.next(ev)) {
      if (ev.kind == Event::Kind::kToken) {
        timing.token(metrics);
        if (want_logprobs) logprobs.push_back(logprob_entry(ev));
      }
      absorb(parser->feed(ev.text));
      if (ev.kind != Event::Kind::kDone) continue;
      absorb(parser->finish());
      timing.done(metrics, ev.usage);
      if (ev.finish == FinishReason::kError) throw std::runtime_error(ev.error);
      if (ev.finish == FinishReason::kCancelled) throw ApiError(503, "the request was cancelled (server shutting down)");
      json msg = {{"role", "assistant"}, {"content", content.empty() && !tool_calls.empty() ? json() : json(content)}};
      if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
      if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
      json out = base;
      out["object"] = "chat.completion";
      out["choices"] = json::array({{{"index", 0},
                                     {"message", msg},
                                     {"logprobs", want_logprobs ? json{{"content", logprobs}} : json()},
                                     {"finish_reason", finish_name(ev.finish, !tool_calls.empty())}}});
      out["usage"] = usage_json(ev.usage);
      res.set_content(dump(out), "application/json");
    }
    return;
  }

  auto chunk = [base](json delta, json logprobs, json finish) {
    json ch = base;
    ch["object"] = "chat.completion.chunk";
    ch["choices"] = json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                                  {"finish_reason", std::move(finish)}}});
    return dump(ch);
  };
  auto sent_role = std::make_shared<bool>(false);
  auto n_calls = std::make_shared<int>(0);
  auto timing_p = std::make_shared<Timing>(timing);
  const bool include_usage = c.gen.include_usage;
  stream_response(res, stream, [=, this](const Event& ev, httplib::DataSink& sink) {
    if (!*sent_role) {
      *sent_role = true;
      if (!sse(sink, chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) return false;
    }
    if (ev.kind == Event::Kind::kToken) timing_p->token(metrics);
    std::vector<chat::StreamEvent> events = parser->feed(ev.text);
    if (ev.kind == Event::Kind::kDone) {
      auto rest = parser->finish();
      events.insert(events.end(), rest.begin(), rest.end());
    }
    json delta = json::object();
    auto flush_delta = [&](json lp) {
      if (delta.empty() && lp.is_null()) return true;
      const bool ok = sse(sink, chunk(delta, std::move(lp), nullptr));
      delta = json::object();
      return ok;
    };
    for (const auto& e : events) {
      if (e.kind == chat::StreamEvent::Kind::kToolCall) {
        if (!flush_delta(nullptr)) return false;
        // Replace, not throw, on invalid UTF-8 the model may have put in a name (found by fuzz_output_parser).
        json call = json::parse(e.tool_call.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
        call["index"] = (*n_calls)++;
        if (!sse(sink, chunk({{"tool_calls", json::array({call})}}, nullptr, nullptr))) return false;
        continue;
      }
      const char* key = e.kind == chat::StreamEvent::Kind::kReasoning ? "reasoning_content" : "content";
      delta[key] = delta.value(key, std::string()) + e.text;
    }
    json lp = want_logprobs && ev.kind == Event::Kind::kToken ? json{{"content", json::array({logprob_entry(ev)})}}
                                                               : json();
    if (!flush_delta(std::move(lp))) return false;
    if (ev.kind != Event::Kind::kDone) return true;
    timing_p->done(metrics, ev.usage);
    if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kCancelled) {
      return sse(sink, error_body(ev.finish == FinishReason::kError ? 500 : 503,
                                  ev.finish == FinishReason::kError ? ev.error : "the request was cancelled"));
    }
    if (!sse(sink, chunk(json::object(), nullptr, finish_name(ev.finish, *n_calls > 0)))) return false;
    if (include_usage) {
      json u = base;
      u["object"] = "chat.completion.chunk";
      u["choices"] = json::array();
      u["usage"] = usage_json(ev.usage);
      if (!sse(sink, dump(u))) return false;
    }
    return true;
  });
}

void Server::Impl::handle_completion(const httplib::Request& req, httplib::Response& res) {
  const json body = parse_json_body(req);
  check_model(body);
  CompletionParams c = parse_completion_request(body, engine.vocab_size(), opt.sampling_defaults);
  Request r = std::move(c.gen.req);
  r.prompt = c.prompt_text ? tok("a text prompt").encode(*c.prompt_text, /*add_special=*/true) : c.prompt_ids;
  if (r.prompt.empty()) throw ApiError(400, "'prompt' is empty", "prompt");
  apply_max_tokens(r, c.gen.max_tokens, engine.ctx_size(), "prompt");
  apply_speculation(r, c.gen, opt, engine);
  Timing timing;
  auto stream = engine.submit(std::move(r));
  const json base = {{"id", "cmpl-" + std::to_string(g_next_id++)},
                     {"object", "text_completion"},
                     {"created", unix_seconds()},
                     {"model", opt.model_name}};
  const bool want_logprobs = c.gen.logprobs;
  auto logprob_of = [this](const Event& ev) {
    json top = json::object();
    for (const auto& t : ev.top_logprobs) top[token_text(t.token)] = t.logprob;
    return std::make_pair(json(token_text(ev.token)), std::make_pair(json(ev.logprob), top));
  };
  if (!c.gen.stream) {
    std::string text;
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    Event ev;
    WholeResponseReader reader(*stream, http);
    while (reader.next(ev)) {
      if (ev.kind == Event::Kind::kToken) {
        timing.token(metrics);
        if (want_logprobs) {
          auto [t, rest] = logprob_of(ev);
          tokens.push_back(t);
          lps.push_back(rest.first);
          tops.push_back(rest.second);
          offsets.push_back(text.size());
        }
      }
      text += ev.text;
      if (ev.kind != Event::Kind::kDone) continue;
      timing.done(metrics, ev.usage);
      if (ev.finish == FinishReason::kError) throw std::runtime_error(ev.error);
      if (ev.finish == FinishReason::kCancelled) throw ApiError(503, "the request was cancelled (server shutting down)");
      json out = base;
      out["choices"] = json::array(
          {{{"index", 0},
            {"text", text},
            {"logprobs", want_logprobs ? json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops},
                                              {"text_offset", offsets}}
                                       : json()},
            {"finish_reason", finish_name(ev.finish, false)}}});
      out["usage"] = usage_json(ev.usage);
      res.set_content(dump(out), "application/json");
    }
    return;
  }
  auto timing_p = std::make_shared<Timing>(timing);
  const bool include_usage = c.gen.include_usage;
  stream_response(res, stream, [=, this](const Event& ev, httplib::DataSink& sink) {
    if (ev.kind == Event::Kind::kToken) timing_p->token(metrics);
    json lp;
    if (want_logprobs && ev.kind == Event::Kind::kToken) {
      auto [t, rest] = logprob_of(ev);
      lp = {{"tokens", {t}}, {"token_logprobs", {rest.first}}, {"top_logprobs", {rest.second}}};
    }
    const bool last = ev.kind == Event::Kind::kDone;
    if (last) {
      timing_p->done(metrics, ev.usage);
      if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kCancelled)
        return sse(sink, error_body(ev.finish == FinishReason::kError ? 500 : 503,
                                    ev.finish == FinishReason::kError ? ev.error : "the request was cancelled"));
    }
    if (ev.kind == Event::Kind::kToken || last) {  // one chunk per token, even while its text is held back
      json ch = base;
      ch["choices"] = json::array({{{"index", 0},
                                    {"text", ev.text},
                                    {"logprobs", lp},
                                    {"finish_reason", last ? json(finish_name(ev.finish, false)) : json()}}});
      if (!sse(sink, dump(ch))) return false;
    }
    if (last && include_usage) {
      json u = base;
      u["choices"] = json::array();
      u["usage"] = usage_json(ev.usage);
      if (!sse(sink, dump(u))) return false;
    }
    return true;
  });
}

}  // namespace lfm::server
