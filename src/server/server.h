// `lfm serve`: an OpenAI-compatible HTTP server on the engine (cpp-httplib: Debian-packaged,
// a fixed pool of handler threads with one blocking handler per connection, which suits a
// server whose streams each wait on their own engine event queue; Boost.Beast's async model
// would add a dependency and code without serving this load better).
//
// Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/audio/speech (server/speech.h), POST /v1/embeddings, POST /v1/rerank
// (and /rerank), GET /v1/models[/{id}], GET /health, GET /ready, POST /tokenize, POST /detokenize, GET /metrics (Prometheus; the Gateway API
// Inference Extension's model-server metrics: lfm:num_requests_waiting and lfm:num_requests_running
// gauges, lfm:kv_cache_usage_perc in 0..1, lfm:cache_config_info's block_size and num_gpu_blocks
// labels, and their vllm:* aliases; deploy/kubernetes/README.md has the table). Errors use OpenAI's
// shape. With an API key, /v1/*, /tokenize and /detokenize need `Authorization: Bearer KEY`;
// /health, /ready and /metrics stay open for probes and scrapers.
//
// Health (a Deployment's probes): /health is 200 while the process serves (liveness); /ready is
// 200 only while the model is loaded and no shutdown has begun (readiness). A server built with
// Server(opt) listens before its model is loaded: every other route answers 503 "loading" until
// set_model(). shutdown() turns /ready 503 at once, keeps serving new requests for
// drain_delay_s (the load balancer takes the endpoint out meanwhile), then refuses them (503) and
// lets in-flight requests finish for shutdown_grace_s.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/embedding_service.h"
#include "engine/engine.h"
#include "engine/generation_config.h"
#include "engine/audio_prompt.h"
#include "engine/image_prompt.h"
#include "grammar/work_budget.h"
#include "server/chat_audio.h"
#include "server/chat_images.h"
#include "server/chat_speech.h"
#include "server/metrics.h"
#include "server/speech_options.h"

namespace httplib {
class Server;
}

namespace lfm {
class Tokenizer;
}

namespace lfm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see bind())
  bool reuse_port = false;          // SO_REUSEPORT: share the port with other servers on purpose
  std::string api_key;              // empty: no authentication
  std::string model_name = "lfm";   // reported by /v1/models and in responses
  // Other names a request's "model" may give (e.g. the -m argument as written); any other
  // non-empty name is 404 model_not_found.
  std::vector<std::string> model_aliases;
  // CORS: empty: no CORS headers; else the Access-Control-Allow-Origin value ("*" or an origin),
  // and OPTIONS preflights are answered.
  std::string cors_origin;
  bool access_log = true;
  // Sampling fields a request leaves unset (lfm serve --generation-config; empty: OpenAI's).
  SamplingDefaults sampling_defaults;           // one line per request on stderr (never the content)
  int http_threads = 64;            // requests served at once (a stream holds one to its end)
  int reading_threads = 32;         // more threads for connections whose request is still arriving
  double request_read_timeout_s = 30;  // a request's headers and body must arrive within this
  size_t max_body_bytes = 8 << 20;  // larger request bodies get 413
  double shutdown_grace_s = 30;     // in-flight requests get this long after SIGTERM (after the drain delay)
  // After shutdown(): seconds new requests are still served while /ready already answers 503, so
  // that a load balancer (Kubernetes endpoints, the inference gateway's picker) stops sending
  // them before they would be refused. 0: refuse at once.
  double drain_delay_s = 0;
  // Also export the picker's gauges under vLLM's names (vllm:num_requests_waiting, …), for an
  // endpoint picker or dashboard that has no setting for another name.
  bool vllm_metric_aliases = true;
  // Structured output: the work and memory one request's grammar compile may take (schema or
  // regex → GBNF → grammar; passing it is a 400 naming the field), and the bytes the compiled
  // grammars kept for reuse may hold (their masks included).
  grammar::BudgetLimits grammar_budget;
  size_t grammar_cache_bytes = size_t{256} << 20;
  // Speculative decoding for requests that do not say ("speculative": {...}).
  Drafter drafter = Drafter::kNone;
  int64_t max_drafts = 8;
  // Images in chat messages (image_url parts; LFM2-VL): where from and how many, how big.
  ImageOptions images;
  // The model's vision side (load_image_prompt_setup); null: image parts are refused with
  // `no_images` as the 400's message (set it to say why: no vision tower, …).
  std::shared_ptr<const ImagePromptSetup> image_setup;
  std::string no_images = "the model has no vision tower: it does not take images (serve an LFM2-VL model)";
  // Audio (input_audio parts, /v1/audio/*; LFM2-Audio): how many clips, how big, how long.
  AudioOptions audio;
  // The model's speech side (audio_prompt_setup with the tokenizer); null: audio is refused with
  // `no_audio` as the 400's message.
  std::shared_ptr<const AudioPromptSetup> audio_setup;
  std::string no_audio = "the model has no speech encoder: it does not take audio (serve an LFM2-Audio model)";
  // Speech output (/v1/audio/speech, server/speech.h; LFM2.5-Audio): whether the model speaks
  // (false: 400 with `no_speech` as the message) and one request's limits.
  bool speech_out = false;
  std::string no_speech = "the model does not speak: it has no audio output (serve an LFM2.5-Audio model)";
  SpeechOptions speech;
  // /v1/rerank: the most documents one call may score (more is a 400 naming the limit).
  int64_t max_rerank_documents = 1000;
  // Why /v1/embeddings and /v1/rerank answer 400 when there is no embedding service.
  std::string no_embeddings =
      "this model generates text: /v1/embeddings and /v1/rerank need a retriever (LFM2.5-Embedding, a ColBERT "
      "model), or lfm serve --embeddings to embed with this model's hidden states";
  // Spoken chat (chat completions with modalities audio, server/chat_speech.h; LFM2-Audio).
  SpokenChatOptions spoken_chat;
};

class Server {
 public:
  // `tok` may be null (a GGUF without a tokenizer): then only /v1/completions with token-id
  // prompts works, the rest answers 400.
  Server(Engine& engine, const Tokenizer* tok, const ServerOptions& opt);
  // Either may be null: a retriever has no engine (generation routes answer 400), a generative
  // model no embedding service unless asked for (embedding routes answer 400).
  Server(Engine* engine, EmbeddingService* embeddings, const Tokenizer* tok, const ServerOptions& opt);
  // A server without its model yet: it can bind and run (the probes and /metrics answer, /ready is
  // 503, every other route 503 "loading") until set_model().
  explicit Server(const ServerOptions& opt);
  // Serves the model from now on (once; the pointers must outlive the server). The fields of
  // `with_model` that loading decides are taken (sampling defaults, images, audio, speech, spoken
  // chat, the body limit); the rest keep the values given to the constructor.
  void set_model(Engine* engine, EmbeddingService* embeddings, const Tokenizer* tok, const ServerOptions& with_model);
  // Whether the model is loaded (set_model, or a constructor that took it).
  bool model_loaded() const;
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; returns the port (useful with port 0). Throws lfm::Error.
  int bind();
  // Serves until shutdown() has drained it. Returns when no handler is running any more.
  void run();
  // /ready turns 503 at once; new requests are still served for `drain_delay_s` (the options'
  // when not given), then refused (503) while in-flight requests finish for up to the grace
  // period; what is left is cancelled, then the listening socket closes so run() returns. Safe
  // from any thread; returns at once; a second call does nothing.
  void shutdown();
  void shutdown(double drain_delay_s);

  Metrics& metrics() { return metrics_; }

 private:
  friend struct FuzzAccess;  // fuzz/fuzz_server.cpp: serves connections from memory
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Metrics metrics_;
};

}  // namespace lfm::server
