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
#include "server/chat_turn.h"
#include "server/guarded_http.h"
#include "server/metrics.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace lfm::server {

struct Server::Impl {
  Impl(Engine& e, const Tokenizer* t, const ServerOptions& o, Metrics& m) : engine(e), tok_(t), opt(o), metrics(m) {}

  Engine& engine;
  const Tokenizer* tok_;
  // The tokenizer, or 400 naming what needed it.
  const Tokenizer& tok(const char* what) const;
  ServerOptions opt;
  Metrics& metrics;
  std::unique_ptr<ChatTurnBuilder> chat;  // null without a tokenizer
  GuardedHttpServer http{opt.http_threads, opt.reading_threads};
  std::atomic<bool> draining{false};
  std::atomic<bool> bound{false};
  std::thread grace_thread;
  std::mutex shutdown_mu;
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();

  void register_routes();
  void handle_chat(const httplib::Request& req, httplib::Response& res);
  void handle_completion(const httplib::Request& req, httplib::Response& res);
  std::string token_text(int32_t id) const;
};

// OpenAI's error body.
std::string error_body(int status, const std::string& message, const std::string& param = {},
                       const std::string& type = {});
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = {});
nlohmann::json parse_json_body(const httplib::Request& req);  // throws ApiError(400)

}  // namespace lfm::server
