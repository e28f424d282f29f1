// Shared by the two generation endpoints (generate_chat.cpp, generate_completion.cpp): the
// engine requests behind one HTTP request (n / best_of choices, several prompts), reading them
// whole or as server-sent events, usage and metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api_types.h"
#include "server/guarded_http.h"
#include "server/metrics.h"
#include "server/server.h"

namespace lfm::server {

using Clock = std::chrono::steady_clock;

inline std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}
std::string next_response_id(const char* prefix);  // "chatcmpl-7", "cmpl-8"
const char* finish_name(FinishReason r, bool tool_calls);
nlohmann::json usage_json(const Usage& u);

// Time-to-first-token, inter-token latency and end-to-end latency, and the token counters (per
// engine request).
struct Timing {
  Clock::time_point start = Clock::now(), last;
  bool first = true;
  void token(Metrics& m);
  void done(Metrics& m, const Usage& u);
};

// max_tokens against the context (400 context_length_exceeded naming `prompt_param`).
void apply_max_tokens(Request& r, const std::optional<int64_t>& max_tokens, int64_t ctx, const char* prompt_param);
// The request's speculative decoding, or the server's default.
void apply_speculation(Request& r, const GenerationParams& g, const ServerOptions& opt, const Engine& engine);

// best_of copies of `r` (choice j samples with seed + j when a seed is given, so choices
// differ); with best_of > n the logprobs that rank them are computed.
void add_candidates(std::vector<Request>& out, const Request& r, const GenerationParams& g);
// Submits every request; when one is refused, those already queued are cancelled and the error
// goes on (the client gets one answer for the whole request).
std::vector<std::shared_ptr<RequestStream>> submit_all(Engine& engine, std::vector<Request> reqs);

// All events of one engine request, read whole.
struct Generation {
  std::vector<Event> tokens;  // kToken events, and kAudio ones among them (speech output)
  Event done;
  double cumulative_logprob = 0;
};
// Reads every request to its end; cancels them all when the client closes the connection (looked
// at every 50 ms). Throws as the handlers expect when one ended in an error or was cancelled.
std::vector<Generation> read_whole(const std::vector<std::shared_ptr<RequestStream>>& streams,
                                   const GuardedHttpServer& http, Metrics& metrics);
// The candidates to answer with, per prompt: the n with the highest cumulative logprob out of
// each prompt's best_of (in generation order when best_of == n).
std::vector<size_t> pick_choices(const std::vector<Generation>& gens, int n, int best_of);
// Usage of a whole response: each prompt's tokens once, every candidate's completion tokens.
Usage total_usage(const std::vector<Generation>& gens, int best_of);

// Streams events of several requests as SSE: `on_event(i, ev, sink)` writes request i's frames
// (false: the client is gone), `on_end(sink)` the frames after the last request ended, then
// [DONE]. Every request is cancelled when the client disconnects.
using StreamEventFn = std::function<bool(size_t, const Event&, httplib::DataSink&)>;
using StreamEndFn = std::function<bool(httplib::DataSink&)>;
void stream_response(httplib::Response& res, std::vector<std::shared_ptr<RequestStream>> streams, StreamEventFn on_event,
                     StreamEndFn on_end);
// Writes one SSE event; false when the client is gone.
bool sse(httplib::DataSink& sink, const std::string& data);

}  // namespace lfm::server
