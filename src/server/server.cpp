#include "server/server.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>

#include "core/error.h"
#include "core/ordered_json_parse.h"
#include "engine/speech_prompt.h"
#include "server/server_impl.h"

namespace lfm::server {

using json = nlohmann::json;

std::string error_body(int status, const std::string& message, const std::string& param, const std::string& code) {
  // OpenAI's types: invalid_request_error for the client's mistakes (404 and 413 included),
  // authentication_error, rate_limit_error, server_error.
  const char* type = status == 401 ? "authentication_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  std::string c = code;
  if (c.empty() && status == 401) c = "invalid_api_key";
  if (c.empty() && status == 429) c = "rate_limit_exceeded";
  json e = {{"message", message},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", c.empty() ? json() : json(c)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param,
                const std::string& code) {
  res.status = status;
  res.set_content(error_body(status, message, param, code), "application/json");
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {
// The access log's view of the request the calling thread handles (one thread per connection,
// and httplib's logger runs on it after the response is written).
struct AccessNote {
  std::chrono::steady_clock::time_point start;
  int64_t prompt_tokens = -1, completion_tokens = -1;
};
thread_local AccessNote t_access;
}  // namespace

void note_usage(int64_t prompt_tokens, int64_t completion_tokens) {
  if (t_access.prompt_tokens < 0) t_access.prompt_tokens = t_access.completion_tokens = 0;
  t_access.prompt_tokens += prompt_tokens;
  t_access.completion_tokens += completion_tokens;
}

nlohmann::ordered_json parse_json_body(const httplib::Request& req) {
  // Once, in the client's key order and in linear time: the schema, tools, template variables
  // and tool-call arguments are handed on from this value, never re-parsed (parse_request_json
  // bounds the nesting and the keys of any one object).
  try {
    return parse_request_json(req.body, "the request body");
  } catch (const JsonFieldError& e) {
    throw ApiError(400, e.what(), e.field());
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

std::string Server::Impl::token_text(int32_t id) const {
  return tok_ ? tok_->decode(std::vector<int32_t>{id}, false) : std::to_string(id);
}

std::vector<int> Server::Impl::token_bytes(int32_t id) const {
  std::string raw;
  if (tok_) tok_->append_token_bytes(id, raw);
  std::vector<int> out;
  out.reserve(raw.size());
  for (char ch : raw) out.push_back(static_cast<unsigned char>(ch));
  return out;
}

bool Server::Impl::serves_model(const std::string& name) const {
  if (name.empty() || name == opt.model_name) return true;
  return std::find(opt.model_aliases.begin(), opt.model_aliases.end(), name) != opt.model_aliases.end();
}

void Server::Impl::check_model(const nlohmann::ordered_json& body) const {
  if (!body.is_object()) return;
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) throw ApiError(400, "'model' must be a string", "model");
  if (!serves_model(it->get<std::string>()))
    throw ApiError(404, "the model '" + it->get<std::string>() + "' does not exist; this server serves '" + opt.model_name + "'",
                   "model", "model_not_found");
}

Engine& Server::Impl::engine() const {
  if (!engine_)
    throw ApiError(400, "this model is a retriever: it embeds and scores texts (/v1/embeddings, /v1/rerank) and does "
                        "not generate");
  return *engine_;
}

EmbeddingService& Server::Impl::embeddings() const {
  if (!embeddings_) throw ApiError(400, opt.no_embeddings);
  return *embeddings_;
}

int64_t Server::Impl::embedding_context() const {
  return embeddings_ ? embeddings_->embedder().max_tokens() : 0;
}

const Tokenizer& Server::Impl::tok(const char* what) const {
  if (!tok_) throw ApiError(400, std::string("the model has no tokenizer: ") + what + " needs one (send token ids to /v1/completions)");
  return *tok_;
}

namespace {

// The label of a route for the request counter (unknown paths collapse into one label).
std::string route_label(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/rerank", "/rerank",
                        "/v1/audio/speech", "/v1/audio/transcriptions", "/v1/audio/translations",
                        "/v1/models", "/health", "/tokenize", "/detokenize", "/metrics"})
    if (path == r) return r;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

bool needs_key(const std::string& path) { return path != "/health" && path != "/metrics"; }

// RFC 9112 §6.3: a message whose length is ambiguous is refused, not guessed (a proxy in front
// could read it the other way: request smuggling). Returns why, or "" when the framing is sound.
std::string framing_problem(const httplib::Request& req) {
  const size_t n_length = req.get_header_value_count("Content-Length");
  if (n_length > 1) return "the request has more than one Content-Length header";
  if (n_length == 1) {
    if (req.has_header("Transfer-Encoding")) return "the request has both Content-Length and Transfer-Encoding";
    const std::string v = req.get_header_value("Content-Length");
    if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return "Content-Length '" + v + "' is not a decimal number";
  }
  return "";
}

// Whether `given` equals `expected` in time that depends on the expected length only (a byte by
// byte comparison that stops early tells an attacker how many leading bytes were right).
// The token of an `Authorization: Bearer TOKEN` header, the scheme matched case-insensitively
// (RFC 9110 §11.1); empty when the header holds another scheme.
std::string bearer_token(const std::string& header) {
  const size_t sp = header.find(' ');
  if (sp == std::string::npos) return "";
  std::string scheme = header.substr(0, sp);
  for (char& ch : scheme) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (scheme != "bearer") return "";
  const size_t start = header.find_first_not_of(' ', sp);
  return start == std::string::npos ? "" : header.substr(start);
}

// The request's path as the access log prints it: printable ASCII only, at most 200 bytes.
std::string loggable(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size() && i < 200; ++i) out += path[i] >= 0x20 && path[i] < 0x7f ? path[i] : '?';
  return out;
}

bool same_secret(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i)
    diff |= static_cast<unsigned char>(expected[i] ^ (i < given.size() ? given[i] : 0));
  return diff == 0;
}

}  // namespace

void Server::Impl::register_routes() {
  http.set_payload_max_length(opt.max_body_bytes);
  http.set_read_deadline(std::chrono::milliseconds(static_cast<int64_t>(opt.request_read_timeout_s * 1000)));
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_access = AccessNote{std::chrono::steady_clock::now()};
    if (!opt.cors_origin.empty()) {
      // Set first, so every answer carries them (errors included: a browser otherwise hides them).
      res.set_header("Access-Control-Allow-Origin", opt.cors_origin);
      if (opt.cors_origin != "*") res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS") {  // a preflight: answered before authentication (it carries no key)
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        res.set_header("Access-Control-Max-Age", "86400");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (const std::string why = framing_problem(req); !why.empty()) {
      send_error(res, 400, why);
      res.set_header("Connection", "close");  // the body's end is unknown: this connection is done
      return httplib::Server::HandlerResponse::Handled;
    }
    if (draining && req.path != "/metrics") {
      send_error(res, 503, "the server is shutting down");
      res.set_header("Retry-After", "5");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!opt.api_key.empty() && needs_key(req.path)) {
      const std::string auth = req.get_header_value("Authorization");
      if (!same_secret(bearer_token(auth), opt.api_key)) {
        send_error(res, 401, auth.empty() ? "missing API key (Authorization: Bearer …)" : "invalid API key");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, 404, "no route for " + req.method + " " + req.path);
    else if (res.status == 413)
      send_error(res, 413, "the request body is too large");
    else
      send_error(res, res.status, "request failed with status " + std::to_string(res.status));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), e.param, e.code);
      if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    } catch (const EngineBusy& e) {
      send_error(res, 429, e.what());
      res.set_header("Retry-After", "1");
    } catch (const Error& e) {
      send_error(res, 400, e.what());
    } catch (const std::bad_alloc&) {
      send_error(res, 500, "out of memory while handling the request");
    } catch (const nlohmann::json::exception& e) {
      // A JSON value of an unexpected type that no validation step caught: still the client's input.
      send_error(res, 400, std::string("malformed request: ") + e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      send_error(res, 500, "internal error");
    }
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    http.response_written();
    metrics.add("lfm:http_requests_total", 1,
                "route=\"" + route_label(req.path) + "\",status=\"" + std::to_string(res.status) + "\"");
    if (opt.access_log) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_access.start).count();
      std::string tokens;
      if (t_access.prompt_tokens >= 0)
        tokens = " prompt_tokens=" + std::to_string(t_access.prompt_tokens) +
                 " completion_tokens=" + std::to_string(t_access.completion_tokens);
      std::fprintf(stderr, "lfm serve: %s %s %d%s %.1f ms\n", loggable(req.method).c_str(), loggable(req.path).c_str(),
                   res.status, tokens.c_str(), ms);
    }
  });

  // Every handler starts by marking its request read (GuardedHttpServer: the deadline stops);
  // all but the probes then take a serving slot, so /health and /metrics answer when all are busy.
  const auto served = [this](bool take_slot, httplib::Server::Handler h) {
    return [this, take_slot, h = std::move(h)](const httplib::Request& q, httplib::Response& r) {
      http.read_done(take_slot);
      h(q, r);
    };
  };
  http.Post("/v1/chat/completions", served(true, [this](const httplib::Request& q, httplib::Response& r) { handle_chat(q, r); }));
  http.Post("/v1/completions", served(true, [this](const httplib::Request& q, httplib::Response& r) { handle_completion(q, r); }));
  http.Post("/v1/audio/transcriptions", served(true, [this](const httplib::Request& q, httplib::Response& r) {
    handle_transcription(q, r, false);
  }));
  http.Post("/v1/audio/translations", served(true, [this](const httplib::Request& q, httplib::Response& r) {
    handle_transcription(q, r, true);
  }));
  http.Post("/v1/audio/speech", served(true, [this](const httplib::Request& q, httplib::Response& r) { handle_speech(q, r); }));
  http.Post("/v1/embeddings", served(true, [this](const httplib::Request& q, httplib::Response& r) { handle_embeddings(q, r); }));
  http.Post("/v1/rerank", served(true, [this](const httplib::Request& q, httplib::Response& r) { handle_rerank(q, r); }));
  http.Post("/rerank", served(true, [this](const httplib::Request& q, httplib::Response& r) { handle_rerank(q, r); }));
  const auto model_object = [this](const std::string& id) {
    json m{{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "lfm"}, {"max_model_len", engine_ ? engine_->ctx_size() : embedding_context()}};
    if (opt.speech_out) {  // a speech model: /v1/audio/speech's voices
      m["voices"] = json::array();
      for (const SpeechVoice& v : speech_voices()) m["voices"].push_back(v.id);
    }
    return m;
  };
  http.Get("/v1/models", served(true, [this, model_object](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"object", "list"}, {"data", json::array({model_object(opt.model_name)})}}.dump(), "application/json");
  }));
  // Ids may hold slashes (a Hub name such as LiquidAI/LFM2-1.2B given as an alias).
  http.Get("/v1/models/(.+)", served(true, [this, model_object](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (!serves_model(id) || id.empty())
      throw ApiError(404, "the model '" + id + "' does not exist; this server serves '" + opt.model_name + "'", "model",
                     "model_not_found");
    res.set_content(model_object(id).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }));
  http.Get("/health", served(false, [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  }));
  // vLLM's route: forgets the whole prefix cache (its KV-cache events announce AllBlocksCleared).
  http.Post("/reset_prefix_cache", served(true, [this](const httplib::Request&, httplib::Response& res) {
    engine().reset_prefix_cache();
    res.set_content(R"({"status":"ok"})", "application/json");
  }));
  http.Post("/tokenize", served(true, [this](const httplib::Request& req, httplib::Response& res) {
    const auto body = parse_json_body(req);
    const char* key = body.contains("content") ? "content" : "prompt";
    if (!body.is_object() || !body.contains(key) || !body[key].is_string())
      throw ApiError(400, "'content' must be a string", "content");
    const bool special = body.value("add_special", true);
    const auto ids = tok("/tokenize").encode(body[key].get<std::string>(), special);
    res.set_content(json{{"tokens", ids}, {"count", ids.size()}}.dump(), "application/json");
  }));
  http.Post("/detokenize", served(true, [this](const httplib::Request& req, httplib::Response& res) {
    const auto body = parse_json_body(req);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
      throw ApiError(400, "'tokens' must be an array of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= INT32_MAX)
        throw ApiError(400, "'tokens' must hold non-negative integer token ids", "tokens");
      ids.push_back(t.get<int32_t>());
    }
    const std::string text = tok("/detokenize").decode(ids, body.value("skip_special", false));
    res.set_content(json{{"content", text}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }));
  http.Get("/metrics", served(false, [this](const httplib::Request&, httplib::Response& res) {
    const EngineStats s = engine_ ? engine_->stats() : EngineStats{};
    const double total = static_cast<double>(std::max<int64_t>(1, s.cache.blocks_total));
    std::vector<Metrics::Gauge> gauges = {
        {"lfm:num_requests_waiting", "Requests queued, not yet running (TotalQueuedRequests).",
         static_cast<double>(s.waiting)},
        {"lfm:num_requests_running", "Requests being processed (TotalRunningRequests).",
         static_cast<double>(s.running)},
        {"lfm:kv_cache_usage_perc", "Fraction of KV blocks held by requests, 0 to 1 (KVCacheUtilization).",
         static_cast<double>(s.cache.blocks_used) / total},
        {"lfm:kv_blocks_used", "KV blocks held by requests.", static_cast<double>(s.cache.blocks_used)},
        {"lfm:kv_blocks_cached", "KV blocks kept by the prefix cache, evictable.", static_cast<double>(s.cache.blocks_cached)},
        {"lfm:kv_blocks_total", "KV blocks in the pool.", static_cast<double>(s.cache.blocks_total)},
        {"lfm:conv_slots_used", "Conv-state slots held by running requests.", static_cast<double>(s.cache.slots_used)},
        {"lfm:conv_slots_total", "Conv-state slots in the pool.", static_cast<double>(s.cache.slots_total)},
        {"lfm:num_preemptions_total", "Requests preempted when KV blocks ran out (resumed by recomputation).",
         static_cast<double>(s.preemptions), true},
        {"lfm:num_requests_cancelled_total", "Requests cancelled (client gone, or shutdown).",
         static_cast<double>(s.cancelled), true},
        {"lfm:http_read_timeouts_total",
         "Connections closed because a request's headers and body did not arrive in time.",
         static_cast<double>(http.timeouts()), true},
    };
    if (embeddings_) {
      const EmbeddingServiceStats e = embeddings_->stats();
      gauges.push_back({"lfm:embedding_calls_waiting", "Embedding and rerank calls queued, not yet running.",
                        static_cast<double>(e.calls_waiting)});
      gauges.push_back({"lfm:embedding_calls_running", "Embedding and rerank calls being encoded.",
                        static_cast<double>(e.calls_running)});
      gauges.push_back({"lfm:embedding_tokens_queued", "Tokens of embedding calls waiting to be encoded.",
                        static_cast<double>(e.tokens_queued)});
      gauges.push_back({"lfm:embedding_calls_total", "Embedding and rerank calls finished.",
                        static_cast<double>(e.calls_total), true});
      gauges.push_back({"lfm:embedding_texts_total", "Texts encoded.", static_cast<double>(e.texts_total), true});
      gauges.push_back({"lfm:embedding_tokens_total", "Tokens encoded.", static_cast<double>(e.tokens_total), true});
      gauges.push_back({"lfm:embedding_passes_total", "Encoder passes (each a batch of texts from one or more calls).",
                        static_cast<double>(e.passes_total), true});
      gauges.push_back({"lfm:embedding_calls_cancelled_total", "Embedding calls cancelled (client gone, shutdown).",
                        static_cast<double>(e.cancelled_total), true});
    }
    res.set_content(metrics.render(gauges), "text/plain; version=0.0.4");
  }));
}

Server::Server(Engine& engine, const Tokenizer* tokp, const ServerOptions& opt) : Server(&engine, nullptr, tokp, opt) {}

Server::Server(Engine* engine, EmbeddingService* embeddings, const Tokenizer* tokp, const ServerOptions& opt)
    : impl_(std::make_unique<Impl>(engine, embeddings, tokp, opt, metrics_)) {
  if (!tokp) {
    impl_->register_routes();
    return;
  }
  impl_->chat = std::make_unique<ChatTurnBuilder>(*tokp, opt.image_setup, opt.audio_setup);
  impl_->register_routes();
}

Server::~Server() {
  if (impl_->grace_thread.joinable()) impl_->grace_thread.join();
}

int Server::bind() {
  // httplib's default socket options set SO_REUSEPORT, which lets a second server bind the same
  // port and silently take part of its connections. Only SO_REUSEADDR by default (a restarted
  // server binds while old connections sit in TIME_WAIT; Linux still refuses a port that another
  // socket listens on); SO_REUSEPORT only when asked for (--reuse-port).
  const bool share = impl_->opt.reuse_port;
  impl_->http.set_socket_options([share](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (share) ::setsockopt(sock, SOL_SOCKET, SO_REUSEPORT, &yes, sizeof yes);
  });
  int port = impl_->opt.port;
  errno = 0;
  const bool ok = port == 0 ? (port = impl_->http.bind_to_any_port(impl_->opt.host)) > 0
                            : impl_->http.bind_to_port(impl_->opt.host, port);
  if (!ok) {
    const int err = errno;
    const std::string where = impl_->opt.host + ":" + std::to_string(impl_->opt.port);
    if (err == EADDRINUSE)
      fail("serve: port ", impl_->opt.port, " is already in use on ", impl_->opt.host,
           " (another lfm serve, or another program, is listening there): stop it, choose another --port, or pass "
           "--reuse-port to share the port with it on purpose");
    fail("serve: cannot listen on ", where, err ? std::string(": ") + std::strerror(err) : std::string(),
         " (address not available here, or a port below 1024 without the privilege)");
  }
  impl_->http.set_port(port);
  impl_->bound = true;
  return port;
}

void Server::run() {
  LFM_CHECK(impl_->bound, "serve: bind() first");
  impl_->http.listen_after_bind();  // returns after stop(), once every handler has finished
}

void Server::shutdown() {
  std::lock_guard lock(impl_->shutdown_mu);
  if (impl_->draining.exchange(true)) return;
  Impl* im = impl_.get();
  im->grace_thread = std::thread([im] {
    // New requests already get 503 (draining). httplib's stop() would also cut streams that are
    // running, so it waits until they are done, or until the grace period is over and what is
    // left has been cancelled (those streams end with an error event).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(im->opt.shutdown_grace_s);
    auto idle = [im] {
      const EngineStats s = im->engine_ ? im->engine_->stats() : EngineStats{};
      const EmbeddingServiceStats e = im->embeddings_ ? im->embeddings_->stats() : EmbeddingServiceStats{};
      return s.running == 0 && s.waiting == 0 && e.calls_running == 0 && e.calls_waiting == 0;
    };
    while (!idle() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!idle()) {
      if (im->engine_) im->engine_->cancel_all();  // embedding calls are cancelled by their handlers (draining)
      while (!idle()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let handlers write their last frames
    im->http.stop();
  });
}

}  // namespace lfm::server
