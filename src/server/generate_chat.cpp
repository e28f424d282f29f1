// POST /v1/chat/completions: messages (and their images: chat_images.h) → the model's chat turn
// (chat_turn.h) → engine → the assistant message parsed into content, reasoning_content and
// tool_calls, whole or as SSE.
#include <memory>

#include "chat/output_parser.h"
#include "core/allocator.h"
#include "core/error.h"
#include "server/chat_speech.h"
#include "server/generate_util.h"
#include "server/server_impl.h"

namespace lfm::server {

using json = nlohmann::json;

namespace {

// A parsed tool call as a plain json value (invalid UTF-8 the model may have put in a name is
// replaced, not thrown on: found by fuzz_output_parser).
json tool_call_json(const chat::StreamEvent& e) {
  return json::parse(e.tool_call.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

}  // namespace

void Server::Impl::handle_chat(const httplib::Request& req, httplib::Response& res) {
  engine();  // a retriever's 400 first
  this->tok("/v1/chat/completions");
  if (!chat->has_template()) throw ApiError(400, "the model ships no chat template; use /v1/completions");
  const auto body = parse_json_body(req);
  check_model(body);
  ChatParams c = parse_chat_request(body, engine().vocab_size(), opt.sampling_defaults);
  const ChatSpeech speech = parse_chat_speech(body, opt.spoken_chat);  // chat_speech.h
  if (speech.on && (c.gen.n != 1 || c.gen.best_of != 1))
    throw ApiError(400, "'n' and 'best_of' must be 1 when 'modalities' asks for audio (one spoken reply per response)",
                   c.gen.n != 1 ? "n" : "best_of");
  grammar::WorkBudget budget = grammar_budget();
  const std::string gbnf = chat_grammar(c, requested_grammar(body, &budget), *tok_);
  if (!gbnf.empty() && (speech.on || !c.spoken.empty()))
    throw ApiError(400, "speech output and spoken turns cannot follow a grammar (response_format, grammar, regex or "
                        "strict tools)", speech.on ? "modalities" : c.spoken.front().param);
  if (!gbnf.empty()) c.gen.req.grammar = grammars.get(gbnf, engine(), grammar_param(body), &budget);
  if (speech.on) add_spoken_chat_prompt(c.messages, *speech.voice);
  ChatTurnInput in;
  in.messages = std::move(c.messages);
  in.tools = std::move(c.tools);
  in.tool_choice = c.tool_choice;
  in.named_tool = c.named_tool;
  in.template_kwargs = std::move(c.template_kwargs);
  in.spoken = find_spoken_replies(c.spoken, spoken_store, opt.spoken_chat);
  LoadedImages loaded = load_image_parts(c.images, opt.images, opt.image_setup ? std::string() : opt.no_images,
                                         opt.image_setup ? opt.image_setup->processor : image::ProcessorConfig(),
                                         &image_memory);
  in.images = std::move(loaded.images);
  in.audios = load_audio_parts(c.audios, opt.audio, opt.audio_setup ? std::string() : opt.no_audio,
                               opt.audio_setup ? opt.audio_setup->front_end.sample_rate : 16000);
  ChatTurn turn;
  try {
    turn = chat->build(in);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
  // The images are laid out in the turn (their tiles in its requests): the pixels go, their memory
  // is given back, and after a large working set so is the allocator's free memory (allocator.h).
  in.images = {};
  in.audios = {};
  const bool large = loaded.memory.bytes() >= (int64_t(64) << 20);
  loaded.memory.release();
  if (large) release_free_memory();
  Request r = c.gen.req;
  turn.apply(r);
  apply_max_tokens(r, c.gen.max_tokens, engine().ctx_size(), "messages");
  apply_speculation(r, c.gen, opt, engine());
  if (speech.on) r.audio_out = speech.audio;
  if (speech.on || !r.audio_frames.empty()) r.drafter = Drafter::kNone;  // speech output is not drafted
  const int64_t created = unix_seconds();
  std::vector<Request> reqs;
  add_candidates(reqs, r, c.gen);
  auto streams = submit_all(engine(), std::move(reqs));
  const std::string id = next_response_id("chatcmpl-");
  // One parser per candidate, each starting from the forced prefix (held back: the block
  // completes with the generated text).
  auto make_parser = [&](size_t i) {
    chat::OutputParserOptions po = turn.parser;
    po.tool_call_id_prefix = "call_" + std::to_string(streams[i]->id()) + "_";
    auto parser = std::make_shared<chat::StreamingOutputParser>(po);
    parser->feed(turn.forced);
    return parser;
  };
  const bool want_logprobs = c.gen.logprobs;
  auto logprob_entry = [this](const Event& ev) {
    json top = json::array();
    for (const auto& t : ev.top_logprobs)
      top.push_back({{"token", token_text(t.token)}, {"logprob", t.logprob}, {"bytes", token_bytes(t.token)}});
    return json{{"token", token_text(ev.token)},
                {"logprob", ev.logprob},
                {"bytes", token_bytes(ev.token)},
                {"top_logprobs", top}};
  };
  const json base = {{"id", id}, {"created", created}, {"model", opt.model_name}};
  const int best_of = c.gen.best_of;

  if (!c.gen.stream) {
    const std::vector<Generation> gens = read_whole(streams, http, metrics);
    json choices = json::array();
    for (size_t k : pick_choices(gens, c.gen.n, best_of)) {
      const Generation& g = gens[k];
      auto parser = make_parser(k);
      std::unique_ptr<SpokenChoice> spoken;
      if (speech.on) spoken = std::make_unique<SpokenChoice>(spoken_store.new_id(), speech, opt.spoken_chat);
      std::string content, reasoning;
      json tool_calls = json::array(), logprobs = json::array();
      auto absorb = [&](const std::vector<chat::StreamEvent>& events) {
        for (const auto& e : events) {
          if (e.kind == chat::StreamEvent::Kind::kContent) content += e.text;
          if (e.kind == chat::StreamEvent::Kind::kReasoning) reasoning += e.text;
          if (e.kind == chat::StreamEvent::Kind::kToolCall) tool_calls.push_back(tool_call_json(e));
        }
      };
      for (const Event& ev : g.tokens) {
        if (spoken) spoken->add(ev);
        if (ev.kind != Event::Kind::kToken) continue;
        if (want_logprobs) logprobs.push_back(logprob_entry(ev));
        absorb(parser->feed(ev.text));
      }
      if (spoken) spoken->add(g.done);
      absorb(parser->feed(g.done.text));
      absorb(parser->finish());
      json msg = {{"role", "assistant"}, {"content", content.empty() && !tool_calls.empty() ? json() : json(content)}};
      if (spoken) {
        // OpenAI: the text is the audio's transcript, content null.
        const std::string data = spoken->encoded_base64();
        const int64_t expires_at = spoken->keep(spoken_store, content);
        msg["content"] = nullptr;
        msg["audio"] = {{"id", spoken->id()}, {"data", data}, {"expires_at", expires_at}, {"transcript", content}};
      }
      if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
      if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
      choices.push_back({{"index", choices.size()},
                         {"message", msg},
                         {"logprobs", want_logprobs ? json{{"content", logprobs}} : json()},
                         {"finish_reason", finish_name(g.done.finish, !tool_calls.empty())}});
    }
    json out = base;
    out["object"] = "chat.completion";
    out["choices"] = std::move(choices);
    out["usage"] = usage_json(total_usage(gens, best_of));
    if (speech.on) out["usage"] = spoken_usage(out["usage"], total_usage(gens, best_of));
    res.set_content(dump(out), "application/json");
    return;
  }

  // Streaming: best_of == n, so request i is choice i.
  auto chunk = [base](size_t index, json delta, json logprobs, json finish) {
    json ch = base;
    ch["object"] = "chat.completion.chunk";
    ch["choices"] = json::array({{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(logprobs)},
                                  {"finish_reason", std::move(finish)}}});
    return dump(ch);
  };
  struct PerChoice {
    std::shared_ptr<chat::StreamingOutputParser> parser;
    bool sent_role = false;
    int n_calls = 0;
    Timing timing;
    std::shared_ptr<SpokenChoice> spoken;  // modalities audio
    std::string transcript;
  };
  auto per = std::make_shared<std::vector<PerChoice>>(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    (*per)[i].parser = make_parser(i);
    if (speech.on) (*per)[i].spoken = std::make_shared<SpokenChoice>(spoken_store.new_id(), speech, opt.spoken_chat);
  }
  auto usage = std::make_shared<std::vector<Generation>>(streams.size());
  const bool include_usage = c.gen.include_usage;
  auto on_event = [=, this](size_t i, const Event& ev, httplib::DataSink& sink) {
    PerChoice& pc = (*per)[i];
    if (!pc.sent_role) {
      pc.sent_role = true;
      if (!sse(sink, chunk(i, {{"role", "assistant"}, {"content", pc.spoken ? json() : json("")}}, nullptr, nullptr)))
        return false;
    }
    if (ev.kind == Event::Kind::kToken) pc.timing.token(metrics);
    if (pc.spoken) {
      const std::string data = pc.spoken->add(ev);
      if (!data.empty() && !sse(sink, chunk(i, {{"audio", {{"id", pc.spoken->id()}, {"data", data}}}}, nullptr, nullptr)))
        return false;
      if (ev.kind == Event::Kind::kAudio) return true;
    }
    std::vector<chat::StreamEvent> events = pc.parser->feed(ev.text);
    if (ev.kind == Event::Kind::kDone) {
      auto rest = pc.parser->finish();
      events.insert(events.end(), rest.begin(), rest.end());
    }
    json delta = json::object();
    auto flush_delta = [&](json lp) {
      if (delta.empty() && lp.is_null()) return true;
      const bool ok = sse(sink, chunk(i, delta, std::move(lp), nullptr));
      delta = json::object();
      return ok;
    };
    for (const auto& e : events) {
      if (e.kind == chat::StreamEvent::Kind::kToolCall) {
        if (!flush_delta(nullptr)) return false;
        json call = tool_call_json(e);
        call["index"] = pc.n_calls++;
        if (!sse(sink, chunk(i, {{"tool_calls", json::array({call})}}, nullptr, nullptr))) return false;
        continue;
      }
      if (pc.spoken && e.kind == chat::StreamEvent::Kind::kContent) {  // the text is the audio's transcript
        pc.transcript += e.text;
        if (!delta.contains("audio")) delta["audio"] = {{"id", pc.spoken->id()}, {"transcript", ""}};
        delta["audio"]["transcript"] = delta["audio"]["transcript"].get<std::string>() + e.text;
        continue;
      }
      const char* key = e.kind == chat::StreamEvent::Kind::kReasoning ? "reasoning_content" : "content";
      delta[key] = delta.value(key, std::string()) + e.text;
    }
    json lp = want_logprobs && ev.kind == Event::Kind::kToken ? json{{"content", json::array({logprob_entry(ev)})}}
                                                               : json();
    if (!flush_delta(std::move(lp))) return false;
    if (ev.kind != Event::Kind::kDone) return true;
    pc.timing.done(metrics, ev.usage);
    (*usage)[i].done.usage = ev.usage;
    if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kCancelled) {
      return sse(sink, error_body(ev.finish == FinishReason::kError ? (ev.request_error ? 400 : 500) : 503,
                                  ev.finish == FinishReason::kError ? ev.error : "the request was cancelled"));
    }
    if (pc.spoken) {
      const int64_t expires_at = pc.spoken->keep(spoken_store, pc.transcript);
      if (!sse(sink, chunk(i, {{"audio", {{"id", pc.spoken->id()}, {"expires_at", expires_at}}}}, nullptr, nullptr)))
        return false;
    }
    return sse(sink, chunk(i, json::object(), nullptr, finish_name(ev.finish, pc.n_calls > 0)));
  };
  const bool spoken_usage_details = speech.on;
  auto on_end = [=](httplib::DataSink& sink) {
    if (!include_usage) return true;
    json u = base;
    u["object"] = "chat.completion.chunk";
    u["choices"] = json::array();
    u["usage"] = usage_json(total_usage(*usage, best_of));
    if (spoken_usage_details) u["usage"] = spoken_usage(u["usage"], total_usage(*usage, best_of));
    return sse(sink, dump(u));
  };
  stream_response(res, std::move(streams), on_event, on_end);
}

}  // namespace lfm::server
