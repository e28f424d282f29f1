// Shared state of the server's translation units (server.cpp: HTTP wiring and small routes;
// generate.cpp: the two generation endpoints).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "server/api_types.h"
#include "engine/chat_turn.h"
#include "server/guarded_http.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace lfm::server {

int64_t unix_seconds();  // now, as OpenAI's "created" fields give it

struct Server::Impl {
  Impl(Engine* e, EmbeddingService* emb, const Tokenizer* t, const ServerOptions& o, Metrics& m)
      : engine_(e), embeddings_(emb), tok_(t), opt(o), metrics(m) {}

  Engine* engine_;               // null for a retriever
  EmbeddingService* embeddings_;  // null unless the model embeds
  // The engine, or 400: the model is a retriever and does not generate.
  Engine& engine() const;
  EmbeddingService& embeddings() const;
  int64_t embedding_context() const;  // the longest text the embedder takes (/v1/models)
  const Tokenizer* tok_;
  // The tokenizer, or 400 naming what needed it.
  const Tokenizer& tok(const char* what) const;
  ServerOptions opt;
  Metrics& metrics;
  std::unique_ptr<ChatTurnBuilder> chat;  // null without a tokenizer
  GrammarCache grammars{32, opt.grammar_cache_bytes};  // compiled structured-output grammars, by GBNF text
  MemoryBudget image_memory{opt.images.max_server_memory};  // all requests' images at once (chat_images.h)
  SpokenReplyStore spoken_store{opt.spoken_chat.store_bytes, opt.spoken_chat.store_seconds};  // chat_speech.h
  GuardedHttpServer http{opt.http_threads, opt.reading_threads};
  std::atomic<bool> loaded{false};    // the model is there (set_model); release/acquire publishes it
  std::atomic<bool> stopping{false};  // shutdown() was called: /ready is 503
  std::atomic<bool> draining{false};  // new requests are refused (after the drain delay)
  std::atomic<bool> bound{false};
  std::atomic<bool> run_called{false}, run_returned{false};  // Server::run()'s progress (stop_listening)
  std::thread grace_thread;
  // Closes the listening socket so run() returns; draining must already be set. Waits for a
  // run() under way to have started listening (httplib's stop() before that is lost).
  void stop_listening() {
    while (run_called.load() && !run_returned.load() && !http.is_running())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    http.stop();
  }
  std::mutex shutdown_mu;
  const int64_t created = unix_seconds();  // the server's start (/v1/models)

  // A budget for one request's grammar compile, cancelled when its client leaves or the server
  // starts draining (called on the handler's thread: client_gone() looks at its connection).
  grammar::WorkBudget grammar_budget() {
    return grammar::WorkBudget(opt.grammar_budget, [this] { return draining.load() || http.client_gone(); });
  }
  void register_routes();
  void handle_chat(const httplib::Request& req, httplib::Response& res);
  void handle_completion(const httplib::Request& req, httplib::Response& res);
  // /v1/audio/transcriptions, or /v1/audio/translations with `translate` (transcriptions.cpp).
  void handle_transcription(const httplib::Request& req, httplib::Response& res, bool translate);
  void handle_speech(const httplib::Request& req, httplib::Response& res);  // /v1/audio/speech (speech.cpp)
  void handle_embeddings(const httplib::Request& req, httplib::Response& res);  // embeddings.cpp
  void handle_rerank(const httplib::Request& req, httplib::Response& res);
  // Waits for an embedding call; cancels it (and throws) when the client leaves or the server drains.
  std::vector<Embedding> wait_embeddings(const std::shared_ptr<EmbeddingService::Call>& call);
  std::string token_text(int32_t id) const;
  // The token's own bytes (a piece of a UTF-8 character stays as it is), as 0–255 values.
  std::vector<int> token_bytes(int32_t id) const;
  // Whether a request's "model" names this server's model (absent or empty does).
  bool serves_model(const std::string& name) const;
  // 404 model_not_found unless the body's "model" is absent, empty, the name or an alias.
  void check_model(const nlohmann::ordered_json& body) const;
};

// What a generation handler tells the access log about its request (one handler per thread).
void note_usage(int64_t prompt_tokens, int64_t completion_tokens);

// OpenAI's error body: {"error": {"message", "type", "param", "code"}}; `code` is OpenAI's
// string code or, empty, null.
std::string error_body(int status, const std::string& message, const std::string& param = {},
                       const std::string& code = {});
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {},
                const std::string& code = {});
// The body in the client's key order, parsed once (parse_request_json: linear time, nesting and
// keys per object capped). Throws ApiError(400) naming the field where there is one.
nlohmann::ordered_json parse_json_body(const httplib::Request& req);

}  // namespace lfm::server
