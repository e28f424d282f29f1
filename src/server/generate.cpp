// POST /v1/completions, and what both generation endpoints share (generate_util.h): request →
// engine → OpenAI response, whole or as server-sent events. A client that goes away cancels its
// requests (the engine frees their state at once).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "server/generate_util.h"
#include "server/server_impl.h"

namespace lfm::server {

using json = nlohmann::json;

namespace {
std::atomic<uint64_t> g_next_id{1};
}  // namespace

std::string next_response_id(const char* prefix) { return prefix + std::to_string(g_next_id++); }

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

void Timing::token(Metrics& m) {
  const auto now = Clock::now();
  if (first)
    m.observe_ttft(std::chrono::duration<double>(now - start).count());
  else
    m.observe_itl(std::chrono::duration<double>(now - last).count());
  first = false;
  last = now;
}

void Timing::done(Metrics& m, const Usage& u) {
  note_usage(u.prompt_tokens, u.completion_tokens);
  m.observe_e2e(std::chrono::duration<double>(Clock::now() - start).count());
  m.add("lfm:prompt_tokens_total", static_cast<double>(u.prompt_tokens));
  m.add("lfm:generation_tokens_total", static_cast<double>(u.completion_tokens));
  m.add("lfm:prefix_cache_hit_tokens_total", static_cast<double>(u.cached_tokens));
  m.add("lfm:spec_decode_num_draft_tokens_total", static_cast<double>(u.drafted_tokens));
  m.add("lfm:spec_decode_num_accepted_tokens_total", static_cast<double>(u.accepted_tokens));
}

void apply_max_tokens(Request& r, const std::optional<int64_t>& max_tokens, int64_t ctx, const char* prompt_param) {
  const int64_t p = static_cast<int64_t>(r.prompt.size());
  if (p >= ctx)
    throw ApiError(400, "the prompt has " + std::to_string(p) + " tokens; the context size is " + std::to_string(ctx),
                   prompt_param, "context_length_exceeded");
  // Compared with the room left, never summed: max_tokens may be near 2^63 (p < ctx here).
  if (max_tokens && *max_tokens > ctx - p)
    throw ApiError(400,
                   "the prompt (" + std::to_string(p) + " tokens) plus max_tokens (" + std::to_string(*max_tokens) +
                       ") is past the context size " + std::to_string(ctx),
                   "max_tokens", "context_length_exceeded");
  r.max_tokens = max_tokens ? *max_tokens : -1;
}

void apply_speculation(Request& r, const GenerationParams& g, const ServerOptions& opt, const Engine& engine) {
  r.drafter = g.drafter.value_or(opt.drafter);
  r.max_drafts = g.max_drafts.value_or(opt.max_drafts);
  if (r.drafter == Drafter::kModel && !engine.has_draft_model())
    throw ApiError(400, "speculative.draft \"model\" needs a draft model, and this server has none (lfm serve --draft-model)",
                   "speculative.draft");
}

void add_candidates(std::vector<Request>& out, const Request& r, const GenerationParams& g) {
  for (int j = 0; j < g.best_of; ++j) {
    Request c = r;
    if (c.sampling.seed) c.sampling.seed = *c.sampling.seed + static_cast<uint64_t>(j);
    if (g.best_of > g.n) c.sampling.logprobs = true;  // ranks the candidates
    out.push_back(std::move(c));
  }
}

std::vector<std::shared_ptr<RequestStream>> submit_all(Engine& engine, std::vector<Request> reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  try {
    for (auto& r : reqs) streams.push_back(engine.submit(std::move(r)));
  } catch (...) {
    for (auto& s : streams) s->cancel();
    throw;
  }
  return streams;
}

std::vector<Generation> read_whole(const std::vector<std::shared_ptr<RequestStream>>& streams,
                                   const GuardedHttpServer& http, Metrics& metrics) {
  // Round robin over the requests (they run at once), so each token is timed as it comes; the
  // socket is looked at every 50 ms whether or not tokens keep coming.
  constexpr auto kEvery = std::chrono::milliseconds(50);
  std::vector<Generation> gens(streams.size());
  std::vector<Timing> timing(streams.size());
  std::vector<bool> ended(streams.size(), false);
  size_t left = streams.size();
  auto checked = Clock::now();
  bool cancelled = false;
  auto take = [&](size_t i, Event& ev) {
    if (ev.kind == Event::Kind::kToken) {
      timing[i].token(metrics);
      gens[i].cumulative_logprob += ev.logprob;
      gens[i].tokens.push_back(std::move(ev));
      return;
    }
    if (ev.kind == Event::Kind::kAudio) {  // speech output: kept in order among the tokens
      gens[i].tokens.push_back(std::move(ev));
      return;
    }
    timing[i].done(metrics, ev.usage);
    gens[i].done = std::move(ev);
    ended[i] = true;
    --left;
  };
  Event ev;
  while (left > 0) {
    bool any = false;
    for (size_t i = 0; i < streams.size(); ++i)
      while (!ended[i] && streams[i]->next_for(ev, std::chrono::milliseconds(0))) {
        take(i, ev);
        any = true;
      }
    if (left == 0) break;
    if (Clock::now() - checked >= kEvery) {
      checked = Clock::now();
      if (!cancelled && http.client_gone()) {
        cancelled = true;
        for (const auto& s : streams) s->cancel();
      }
    }
    if (any) continue;
    const size_t first = static_cast<size_t>(std::find(ended.begin(), ended.end(), false) - ended.begin());
    if (streams[first]->next_for(ev, std::chrono::milliseconds(10))) take(first, ev);
  }
  for (const auto& g : gens) {
    if (g.done.finish == FinishReason::kError) {
      // The request's own input failed once it ran (a grammar past the matcher's limits): 400.
      if (g.done.request_error) throw ApiError(400, g.done.error);
      throw std::runtime_error(g.done.error);
    }
    if (g.done.finish == FinishReason::kCancelled)
      throw ApiError(503, "the request was cancelled (client gone, or the server is shutting down)");
  }
  return gens;
}

std::vector<size_t> pick_choices(const std::vector<Generation>& gens, int n, int best_of) {
  std::vector<size_t> out;
  for (size_t p = 0; p * best_of < gens.size(); ++p) {
    std::vector<size_t> idx(static_cast<size_t>(best_of));
    std::iota(idx.begin(), idx.end(), p * best_of);
    if (best_of > n)
      std::stable_sort(idx.begin(), idx.end(),
                       [&](size_t a, size_t b) { return gens[a].cumulative_logprob > gens[b].cumulative_logprob; });
    out.insert(out.end(), idx.begin(), idx.begin() + n);
  }
  return out;
}

Usage total_usage(const std::vector<Generation>& gens, int best_of) {
  Usage u;
  for (size_t i = 0; i < gens.size(); ++i) {
    const Usage& g = gens[i].done.usage;
    if (i % best_of == 0) {  // the prompt once
      u.prompt_tokens += g.prompt_tokens;
      u.cached_tokens += g.cached_tokens;
    }
    u.completion_tokens += g.completion_tokens;
    u.audio_frames += g.audio_frames;
    u.audio_seconds += g.audio_seconds;
  }
  return u;
}

bool sse(httplib::DataSink& sink, const std::string& data) {
  const std::string frame = "data: " + data + "\n\n";
  return sink.is_writable() && sink.write(frame.data(), frame.size());
}

void stream_response(httplib::Response& res, std::vector<std::shared_ptr<RequestStream>> streams, StreamEventFn on_event,
                     StreamEndFn on_end) {
  struct State {
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<bool> ended;
    size_t left = 0;
    bool done = false;  // [DONE] written
    void cancel_all() {
      for (auto& s : streams) s->cancel();
    }
  };
  auto st = std::make_shared<State>();
  st->streams = std::move(streams);
  st->ended.assign(st->streams.size(), false);
  st->left = st->streams.size();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, on_event, on_end](size_t, httplib::DataSink& sink) {
        // One call handles what has arrived (or waits briefly for it); httplib calls again.
        Event ev;
        bool any = false;
        for (size_t i = 0; i < st->streams.size(); ++i) {
          if (st->ended[i]) continue;
          const bool got = st->streams[i]->next_for(ev, std::chrono::milliseconds(any || st->left > 1 ? 0 : 100));
          if (!got) continue;
          any = true;
          if (!on_event(i, ev, sink)) {
            st->cancel_all();
            return false;
          }
          if (ev.kind == Event::Kind::kDone) {
            st->ended[i] = true;
            --st->left;
          }
        }
        if (st->left == 0) {
          if (!on_end(sink) || !sse(sink, "[DONE]")) return false;
          st->done = true;
          sink.done();
          return true;
        }
        if (!any) {
          if (st->left > 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          if (!sink.is_writable()) {  // client gone while we waited
            st->cancel_all();
            return false;
          }
        }
        return true;
      },
      [st](bool success) {
        if (!success || !st->done) st->cancel_all();  // disconnected or aborted: free the state
      });
}

// ---- POST /v1/completions ----

void Server::Impl::handle_completion(const httplib::Request& req, httplib::Response& res) {
  engine();  // a retriever's 400 first
  const auto body = parse_json_body(req);
  check_model(body);
  CompletionParams c = parse_completion_request(body, engine().vocab_size(), opt.sampling_defaults);
  grammar::WorkBudget budget = grammar_budget();
  const std::string gbnf = requested_grammar(body, &budget);
  if (!gbnf.empty()) c.gen.req.grammar = grammars.get(gbnf, engine(), grammar_param(body), &budget);
  std::vector<Request> reqs;
  std::vector<std::string> echoes;  // each prompt's text, for echo
  for (size_t p = 0; p < c.prompts.size(); ++p) {
    const CompletionPrompt& prompt = c.prompts[p];
    const std::string param = c.prompts.size() > 1 ? "prompt[" + std::to_string(p) + "]" : "prompt";
    Request r = c.gen.req;
    r.prompt = prompt.text ? tok("a text prompt").encode(*prompt.text, /*add_special=*/true) : prompt.ids;
    if (r.prompt.empty()) throw ApiError(400, "'" + param + "' is empty", param);
    if (opt.image_setup &&
        std::find(r.prompt.begin(), r.prompt.end(), opt.image_setup->image_token_id) != r.prompt.end())
      throw ApiError(400,
                     "'" + param + "' holds the image placeholder <image>; /v1/completions takes no images: send "
                     "them as image_url parts to /v1/chat/completions",
                     param);
    if (opt.audio_setup &&
        std::find(r.prompt.begin(), r.prompt.end(), opt.audio_setup->audio_token_id) != r.prompt.end())
      throw ApiError(400,
                     "'" + param + "' holds the audio placeholder " + opt.audio_setup->placeholder_text +
                         "; /v1/completions takes no audio: send it as an input_audio part to /v1/chat/completions",
                     param);
    apply_max_tokens(r, c.gen.max_tokens, engine().ctx_size(), param.c_str());
    apply_speculation(r, c.gen, opt, engine());
    if (c.echo) echoes.push_back(prompt.text ? *prompt.text : tok("echo of token ids").decode(prompt.ids, false));
    add_candidates(reqs, r, c.gen);
  }
  auto streams = submit_all(engine(), std::move(reqs));
  const json base = {{"id", next_response_id("cmpl-")},
                     {"object", "text_completion"},
                     {"created", unix_seconds()},
                     {"model", opt.model_name}};
  const bool want_logprobs = c.gen.logprobs;
  auto logprob_of = [this](const Event& ev) {
    json top = json::object();
    for (const auto& t : ev.top_logprobs) top[token_text(t.token)] = t.logprob;
    return std::make_pair(json(token_text(ev.token)), std::make_pair(json(ev.logprob), top));
  };
  const int n = c.gen.n, best_of = c.gen.best_of;
  if (!c.gen.stream) {
    const std::vector<Generation> gens = read_whole(streams, http, metrics);
    json choices = json::array();
    for (size_t k : pick_choices(gens, n, best_of)) {
      const Generation& g = gens[k];
      std::string text = c.echo ? echoes[k / best_of] : "";
      json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
      for (const Event& ev : g.tokens) {
        if (want_logprobs) {
          auto [t, rest] = logprob_of(ev);
          tokens.push_back(t);
          lps.push_back(rest.first);
          tops.push_back(rest.second);
          offsets.push_back(text.size());
        }
        text += ev.text;
      }
      text += g.done.text;
      choices.push_back({{"index", choices.size()},
                         {"text", text},
                         {"logprobs", want_logprobs ? json{{"tokens", tokens}, {"token_logprobs", lps},
                                                           {"top_logprobs", tops}, {"text_offset", offsets}}
                                                    : json()},
                         {"finish_reason", finish_name(g.done.finish, false)}});
    }
    json out = base;
    out["choices"] = std::move(choices);
    out["usage"] = usage_json(total_usage(gens, best_of));
    res.set_content(dump(out), "application/json");
    return;
  }
  // Streaming: best_of == n, so request i is choice i.
  struct PerChoice {
    Timing timing;
    bool echoed = false;
  };
  auto per = std::make_shared<std::vector<PerChoice>>(streams.size());
  auto usage = std::make_shared<std::vector<Generation>>(streams.size());
  const bool include_usage = c.gen.include_usage;
  auto on_event = [=, this](size_t i, const Event& ev, httplib::DataSink& sink) {
    PerChoice& pc = (*per)[i];
    if (ev.kind == Event::Kind::kToken) pc.timing.token(metrics);
    json lp;
    if (want_logprobs && ev.kind == Event::Kind::kToken) {
      auto [t, rest] = logprob_of(ev);
      lp = {{"tokens", {t}}, {"token_logprobs", {rest.first}}, {"top_logprobs", {rest.second}}};
    }
    const bool last = ev.kind == Event::Kind::kDone;
    if (last) {
      pc.timing.done(metrics, ev.usage);
      (*usage)[i].done.usage = ev.usage;
      if (ev.finish == FinishReason::kError || ev.finish == FinishReason::kCancelled)
        return sse(sink, error_body(ev.finish == FinishReason::kError ? (ev.request_error ? 400 : 500) : 503,
                                    ev.finish == FinishReason::kError ? ev.error : "the request was cancelled"));
    }
    std::string text = ev.text;
    if (!echoes.empty() && !pc.echoed) text = echoes[i / static_cast<size_t>(n)] + text;
    pc.echoed = true;
    // One chunk per token, even while its text is held back.
    json ch = base;
    ch["choices"] = json::array({{{"index", i},
                                  {"text", text},
                                  {"logprobs", lp},
                                  {"finish_reason", last ? json(finish_name(ev.finish, false)) : json()}}});
    return sse(sink, dump(ch));
  };
  auto on_end = [=](httplib::DataSink& sink) {
    if (!include_usage) return true;
    json u = base;
    u["choices"] = json::array();
    u["usage"] = usage_json(total_usage(*usage, best_of));
    return sse(sink, dump(u));
  };
  stream_response(res, std::move(streams), on_event, on_end);
}

}  // namespace lfm::server
