// lfm serve: the OpenAI-compatible HTTP server (src/server/). It listens before the model is
// loaded (/health 200, /ready 503, model routes 503 "loading"), so a Deployment's probes see a
// live, unready pod; a load that fails still exits non-zero with its message. SIGTERM turns
// /ready 503, keeps serving for --drain-delay seconds (the endpoint leaves the load balancers),
// then refuses new requests, lets in-flight ones finish for --shutdown-grace seconds (then cancels
// them) and exits 0. SIGINT (a terminal's Ctrl-C) skips the drain delay.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cli/command.h"
#include "cli/common.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/embedder.h"
#include "engine/embedding_service.h"
#include "engine/engine.h"
#include "engine/generation_config.h"
#include "engine/image_prompt.h"
#include "engine/speech_prompt.h"
#include "kernels/backend_factory.h"
#include "model/model.h"
#include "model/waveform_decoder.h"
#include "model/speech_out.h"
#include "model/state_plan.h"
#include "server/kv_events.h"
#include "server/server.h"
#include "tokenizer/load_tokenizer.h"

namespace lfm::cli {
namespace {

int run_serve(int argc, char** argv) {
  CLI::App app{
      "Serve a model over an OpenAI-compatible HTTP API (chat, completions, models, tokenize, metrics); an "
      "LFM2-VL model also takes images in chat messages (image_url parts with data: URIs)."};
  configure_app(app);
  std::string model;
  server::ServerOptions so;
  struct {
    bool enabled = false;
    std::string pooling;
    int64_t batch_tokens = 8192;
  } embed;
  StateArgs state;
  state.parallel = 4;
  int threads = 0;
  int64_t max_queue = 256;
  app.add_option("-m,--model", model,
                 std::string("Model: Hugging Face folder (with tokenizer files) or .gguf file") + kModelRefHelp)
      ->required();
  app.add_option("--host", so.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", so.port, "Port (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_flag("--reuse-port", so.reuse_port,
               "Share the port with other servers already listening on it (SO_REUSEPORT: the kernel spreads "
               "connections between them); without it a used port is an error");
  app.add_option("--api-key", so.api_key, "Require `Authorization: Bearer KEY` on /v1/*, /tokenize, /detokenize");
  app.add_option("--model-name", so.model_name, "Model id reported by /v1/models (default: the folder or file name)");
  app.add_option("--model-alias", so.model_aliases,
                 "Another name a request's \"model\" may give (repeatable; the -m argument as written always is one); "
                 "other names get 404 model_not_found");
  app.add_option("--cors-origin", so.cors_origin,
                 "Allow browsers on this origin (or *) to call the API: Access-Control-Allow-* headers on every "
                 "answer and OPTIONS preflights answered (default: no CORS headers)");
  app.add_flag("--embeddings", embed.enabled,
               "Also serve /v1/embeddings and /v1/rerank from a generative model's hidden states (last-token pooling, "
               "normalised, unless --pooling says otherwise); a retriever serves them always");
  app.add_option("--pooling", embed.pooling, "Pooling for /v1/embeddings: cls, mean, last or none (default: the model's)");
  app.add_option("--embed-batch-tokens", embed.batch_tokens,
                 "Tokens per encoder pass for embedding and rerank work (texts of concurrent requests share passes)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--rerank-max-documents", so.max_rerank_documents,
                 "Most documents one /v1/rerank call may score (more is a 400)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  bool no_access_log = false;
  app.add_flag("--no-access-log", no_access_log,
               "Do not print the one line per request (method, path, status, tokens, latency) on stderr");
  std::string generation_config = "auto";
  app.add_option("--generation-config", generation_config,
                 "Sampling defaults for fields a request leaves unset: auto (the model folder's "
                 "generation_config.json: temperature, top_p, top_k, min_p, repetition_penalty, as vLLM), none "
                 "(OpenAI's defaults), or a JSON file")
      ->capture_default_str();
  add_state_options(app, state, /*engine=*/true);
  LoadOptions load;
  add_load_options(app, load);
  std::string device = "cpu";
  add_device_option(app, device);
  app.add_option("--max-queue", max_queue, "Requests that may wait; beyond, 429 with Retry-After")
      ->capture_default_str()
      ->check(positive_number());
  app.add_option("--http-threads", so.http_threads,
                 "Requests served at once (each stream holds one; /health and /metrics need none, and 32 more "
                 "threads read incoming requests)")
      ->capture_default_str()
      ->check(CLI::Range(2, 4096));
  app.add_option("--max-body", so.max_body_bytes, "Largest request body in bytes (larger: 413)")->capture_default_str();
  app.add_option("--request-read-timeout", so.request_read_timeout_s,
                 "Seconds a request's headers and body may take to arrive (slower clients are disconnected)")
      ->capture_default_str()
      ->check(positive_number());
  app.add_option("--shutdown-grace", so.shutdown_grace_s,
                 "Seconds in-flight requests get to finish once new ones are refused (after SIGINT, or SIGTERM's drain "
                 "delay); then they are cancelled")
      ->capture_default_str()
      ->check(non_negative_number());
  so.drain_delay_s = 5;
  app.add_option("--drain-delay", so.drain_delay_s,
                 "Seconds after SIGTERM during which /ready answers 503 but new requests are still served, so a load "
                 "balancer (Kubernetes endpoints, the inference gateway) stops sending them before they would be "
                 "refused; SIGINT skips it")
      ->capture_default_str()
      ->check(non_negative_number());
  bool no_vllm_metrics = false;
  app.add_flag("--no-vllm-metrics", no_vllm_metrics,
               "Do not export the endpoint picker's gauges a second time under vLLM's names (vllm:num_requests_waiting, "
               "vllm:num_requests_running, vllm:kv_cache_usage_perc, vllm:cache_config_info, …)");
  // Structured output's compile budget (grammar/work_budget.h), in friendlier units.
  uint64_t grammar_msteps = so.grammar_budget.steps / 1000000, grammar_mib = so.grammar_budget.bytes >> 20;
  size_t grammar_cache_mib = so.grammar_cache_bytes >> 20;
  app.add_option("--grammar-budget", grammar_msteps,
                 "Millions of work steps one request's response_format / grammar / regex may take to compile "
                 "(about a second's work; more: a 400 naming the field)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1000000}));
  app.add_option("--grammar-memory", grammar_mib, "MiB one request's grammar compile may allocate (more: a 400)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{65536}));
  app.add_option("--grammar-cache-memory", grammar_cache_mib,
                 "MiB the compiled grammars kept for reuse may hold, their token masks included")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{1} << 20));
  app.add_option("--spoken-store-bytes", so.spoken_chat.store_bytes,
                 "Memory for spoken chat replies kept by id for later turns (least recently used dropped first)")
      ->capture_default_str();
  app.add_option("--spoken-store-seconds", so.spoken_chat.store_seconds,
                 "Seconds a spoken chat reply's id stays usable (its expires_at)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(30) * 86400));
  app.add_option("-t,--threads", threads, "Compute threads (0: all cores)")
      ->capture_default_str()
      ->check(non_negative_number());
  DraftArgs draft;
  add_draft_options(app, draft);
  app.add_option("--max-images", so.images.max_images,
                 "Images one chat request may hold (image_url parts; LFM2-VL models only)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(1024)));
  app.add_option("--max-image-bytes", so.images.max_image_bytes,
                 "Largest image in encoded bytes (before base64); larger: 400. With a vision model and no --max-body, "
                 "the body limit grows to hold one such image")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(1) << 30));
  app.add_option("--image-dir", so.images.image_dir,
                 "Let image_url parts name local files (file:///… or a path, relative ones from DIR) under DIR only "
                 "(symlinks resolved; nothing outside). Without it only data: URIs are accepted; http(s) URLs "
                 "never are")
      ->check(CLI::ExistingDirectory);
  std::string image_memory = "2G", request_image_memory = "1G";
  app.add_option("--image-memory", image_memory,
                 "Memory all requests' images may take at once to decode and preprocess (e.g. 2G, 512M), checked "
                 "from their headers before decoding; a request that does not fit now: 429 with Retry-After")
      ->capture_default_str();
  app.add_option("--image-memory-per-request", request_image_memory,
                 "Memory one request's images may take to decode and preprocess; more: 413")
      ->capture_default_str();
  app.add_option("--max-audio-clips", so.audio.max_clips,
                 "Audio clips one chat request may hold (input_audio parts; LFM2-Audio models only)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(64)));
  app.add_option("--max-audio-bytes", so.audio.max_audio_bytes,
                 "Largest audio upload or input_audio part in encoded bytes (before base64); larger: 400. With a "
                 "speech model and no --max-body, the body limit grows to hold one such clip")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(1) << 30));
  app.add_option("--max-audio-seconds", so.audio.max_audio_seconds,
                 "Longest audio clip in seconds, read from the file's header before decoding; longer: 400")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--max-speech-chars", so.speech.max_input_chars,
                 "Longest /v1/audio/speech input in characters; longer: 400 (LFM2.5-Audio models only)")
      ->capture_default_str()
      ->check(CLI::Range(size_t(1), size_t(1) << 20));
  app.add_option("--max-speech-seconds", so.speech.max_audio_seconds,
                 "Longest /v1/audio/speech answer in seconds of audio; the speech stops there")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  server::KvEventsOptions kv_events;
  app.add_option("--kv-events", kv_events.endpoint,
                 "Publish the prefix cache's changes as vLLM's KV-cache events (msgpack over a ZeroMQ PUB socket) on "
                 "this endpoint: bound when it holds * (tcp://*:5557), else connected (tcp://indexer:5557, as llm-d's "
                 "indexer wants); docs/design/kv_events.md");
  app.add_option("--kv-events-replay", kv_events.replay_endpoint,
                 "Also answer replay requests (the first sequence number wanted) on this ROUTER endpoint, bound");
  app.add_option("--kv-events-topic", kv_events.topic,
                 "The events' topic frame (llm-d reads kv@<pod-id>@<model-name>; default: empty, as vLLM)");
  app.add_option("--kv-events-hash-seed", kv_events.hash_seed,
                 "Seed of the block hashes (vLLM's PYTHONHASHSEED, llm-d's hashSeed; default: empty, llm-d's default)");
  app.add_option("--kv-events-buffer", kv_events.buffer_batches, "Event batches kept for replay")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  int malloc_arenas = AllocatorSettings().max_arenas;
  app.add_option("--malloc-arenas", malloc_arenas,
                 "glibc malloc arenas the server's threads share (fewer: less memory kept after large requests; "
                 "0: the C library's defaults, an arena per thread up to 8 per core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  auto* max_body_opt = app.get_option("--max-body");
  LFM_CLI_PARSE(app, argc, argv);
  so.access_log = !no_access_log;
  so.vllm_metric_aliases = !no_vllm_metrics;
  so.images.max_server_memory = parse_byte_size(image_memory);
  so.images.max_request_memory = parse_byte_size(request_image_memory);
  LFM_CHECK(so.images.max_request_memory > 0 && so.images.max_server_memory > 0,
            "--image-memory and --image-memory-per-request must be positive");
  // Before any thread allocates: the settings apply to arenas as they are created.
  if (malloc_arenas > 0) {
    AllocatorSettings as;
    as.max_arenas = malloc_arenas;
    if (!configure_allocator(as)) std::fprintf(stderr, "lfm serve: the allocator settings were not applied\n");
  }
  so.grammar_budget.steps = grammar_msteps * 1000000;
  so.grammar_budget.bytes = grammar_mib << 20;
  so.grammar_cache_bytes = grammar_cache_mib << 20;
  so.model_aliases.push_back(model);
  so.drafter = draft.kind();
  so.max_drafts = draft.draft_max;
  if (so.model_name == "lfm") {
    std::string name = model;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    so.model_name = name.substr(name.find_last_of('/') + 1);
  }

  // Block the stop signals in every thread (they inherit this mask); one thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client closing its socket must not kill the server

  // What the model needs, declared before the server so that the server (whose handler threads
  // use them) goes first when the scope ends.
  Runtime rt;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<server::KvEventPublisher> kv_publisher;  // outlives the engine that calls it
  std::unique_ptr<Engine> engine;
  std::unique_ptr<ThreadPool> embed_pool;
  std::unique_ptr<Backend> embed_backend;
  std::unique_ptr<Embedder> embedder;
  std::unique_ptr<EmbeddingService> embeddings;
  // The listener starts before the model is loaded (a download or a large file can take minutes):
  // liveness answers, readiness says "loading".
  server::Server srv(so);
  const int port = srv.bind();
  std::printf("probes on http://%s:%d (/health, /ready), loading the model\n", so.host.c_str(), port);
  std::fflush(stdout);
  std::thread runner([&srv] { srv.run(); });
  const double drain_delay = so.drain_delay_s;
  std::thread([&srv, stop_signals, drain_delay] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (!srv.model_loaded()) {
      // Nothing is served yet and the load cannot be interrupted cleanly: leave now.
      std::fprintf(stderr, "lfm serve: %s received while loading the model, exiting\n", name);
      std::fflush(stderr);
      std::_Exit(0);
    }
    const double delay = sig == SIGINT ? 0.0 : drain_delay;
    if (delay > 0)
      std::fprintf(stderr, "lfm serve: %s received, /ready is 503; serving new requests for %.1f s more, then finishing "
                   "in-flight requests\n", name, delay);
    else
      std::fprintf(stderr, "lfm serve: %s received, finishing in-flight requests\n", name);
    srv.shutdown(delay);
  }).detach();
  // A load that fails (an exception out of here) closes the listener first: nothing was served.
  struct StopOnFailedLoad {
    server::Server& srv;
    std::thread& runner;
    ~StopOnFailedLoad() {
      if (!runner.joinable()) return;
      srv.shutdown(0);
      runner.join();
    }
  } stop_on_failed_load{srv, runner};
  model = resolve_model_arg(model);  // after the name is taken from what the user wrote
  so.sampling_defaults = load_sampling_defaults(generation_config, model);
  if (!so.sampling_defaults.empty())
    std::fprintf(stderr, "lfm serve: sampling defaults from %s: %s (for fields a request leaves unset)\n",
                 so.sampling_defaults.source.c_str(), so.sampling_defaults.describe().c_str());
  rt = open_runtime(model, threads, load, device);
  try {
    tok = load_tokenizer(model);
  } catch (const Error& e) {
    std::fprintf(stderr, "lfm serve: no tokenizer (%s): only /v1/completions with token ids will work\n", e.what());
  }
  // A retriever serves /v1/embeddings and /v1/rerank only; a generative model serves them too
  // with --embeddings, from its hidden states, on a CPU backend of its own beside the engine's.
  const bool retriever = !rt.model->config().has_lm_head;
  EmbedderOptions emb_opt;
  emb_opt.batch_tokens = embed.batch_tokens;
  if (!embed.pooling.empty()) emb_opt.pooling = parse_pooling(embed.pooling);
  if (retriever) {
    LFM_CHECK(kv_events.endpoint.empty(), "serve: --kv-events needs a generative model (a retriever has no KV cache)");
    embedder = std::make_unique<Embedder>(*rt.model, tok.get(), *rt.backend, emb_opt);
  } else {
    EngineOptions eo = engine_options(state, *rt.model);
    eo.max_queued = max_queue;
    // Room for drafts whenever a drafter is available to requests: ngram always is.
    if (eo.state.draft_tokens == 0) eo.state.draft_tokens = draft.draft_max;
    apply_draft_options(draft, rt, load, eo);
    if (!kv_events.endpoint.empty()) {
      LFM_CHECK(eo.state.prefix_cache, "serve: --kv-events announces the prefix cache, which is off (--no-prefix-cache)");
      kv_events.block_tokens = eo.state.block_tokens;
      kv_events.medium = rt.backend->host_memory() ? "CPU" : "GPU";
      kv_publisher = std::make_unique<server::KvEventPublisher>(kv_events);
      eo.cache_listener = kv_publisher.get();
      const bool bound = !kv_publisher->pub_bound().empty();
      std::fprintf(stderr, "lfm serve: KV-cache events on %s (%s; topic \"%s\", blocks of %lld, medium %s)%s%s\n",
                   bound ? kv_publisher->pub_bound().c_str() : kv_events.endpoint.c_str(), bound ? "bound" : "connected",
                   kv_events.topic.c_str(), static_cast<long long>(kv_events.block_tokens), kv_events.medium.c_str(),
                   kv_events.replay_endpoint.empty() ? "" : ", replay on ", kv_publisher->replay_bound().c_str());
    }
    engine = std::make_unique<Engine>(*rt.model, *rt.backend, tok.get(), eo, rt.draft.get());
    if (embed.enabled) {
      LFM_CHECK(rt.backend->host_memory(), "serve: --embeddings on a generative model runs on the CPU; drop --device ",
                device, " or serve a retriever");
      embed_pool = std::make_unique<ThreadPool>(threads);
      embed_backend = make_backend(DeviceKind::kCpu, *embed_pool);
      if (!emb_opt.pooling) emb_opt.pooling = Pooling::kLast;  // a causal model's summary of the text
      emb_opt.normalize = true;
      embedder = std::make_unique<Embedder>(*rt.model, tok.get(), *embed_backend, emb_opt);
    }
  }
  if (embedder) {
    EmbeddingServiceOptions eso;
    eso.batch_tokens = embed.batch_tokens;
    embeddings = std::make_unique<EmbeddingService>(*embedder, eso);
  }
  if (rt.model->vision()) {
    if (!tok) {
      so.no_images = "the model has a vision tower but no tokenizer was found: images cannot be laid out";
    } else {
      try {
        so.image_setup = std::make_shared<const ImagePromptSetup>(load_image_prompt_setup(model, *rt.model, *tok));
      } catch (const Error& e) {
        so.no_images = std::string("this server cannot take images: ") + e.what();
        std::fprintf(stderr, "lfm serve: images are refused: %s\n", e.what());
      }
    }
  }
  if (so.image_setup) {
    if (!so.images.image_dir.empty()) {
      so.images.image_dir = std::filesystem::canonical(so.images.image_dir).string();
      std::fprintf(stderr, "lfm serve: image_url parts may name files under %s\n", so.images.image_dir.c_str());
    }
    // Room in a body for one image of the largest size, base64-encoded, and the rest of the request.
    const size_t one_image = (so.images.max_image_bytes + 2) / 3 * 4 + (1u << 20);
    if (max_body_opt->count() == 0 && so.max_body_bytes < one_image) so.max_body_bytes = one_image;
    std::fprintf(stderr,
                 "lfm serve: images: up to %zu per request, %zu bytes each (request bodies up to %zu bytes); image "
                 "memory %lld bytes per request, %lld for all\n",
                 so.images.max_images, so.images.max_image_bytes, so.max_body_bytes,
                 static_cast<long long>(so.images.max_request_memory), static_cast<long long>(so.images.max_server_memory));
  }
  if (rt.model->audio()) {
    if (!tok) {
      so.no_audio = "the model has a speech encoder but no tokenizer was found: audio cannot be laid out";
    } else {
      try {
        so.audio_setup = std::make_shared<const AudioPromptSetup>(audio_prompt_setup(*rt.model, tok.get()));
      } catch (const Error& e) {
        so.no_audio = std::string("this server cannot take audio: ") + e.what();
        std::fprintf(stderr, "lfm serve: audio is refused: %s\n", e.what());
      }
    }
  }
  if (so.audio_setup) {
    // Room in a body for one clip of the largest size, base64-encoded, and the rest of the request.
    const size_t one_clip = (so.audio.max_audio_bytes + 2) / 3 * 4 + (1u << 20);
    if (max_body_opt->count() == 0 && so.max_body_bytes < one_clip) so.max_body_bytes = one_clip;
    std::fprintf(stderr,
                 "lfm serve: audio: up to %zu clips per chat request, %zu bytes and %.0f s each (request bodies up to "
                 "%zu bytes); /v1/audio/transcriptions and /v1/audio/translations\n",
                 so.audio.max_clips, so.audio.max_audio_bytes, so.audio.max_audio_seconds, so.max_body_bytes);
  }
  if (rt.model->speech_out()) {
    if (!tok) {
      so.no_speech = "the model speaks but no tokenizer was found: the TTS prompt cannot be written";
    } else {
      so.speech_out = true;
      so.speech.audio_start_id = rt.model->speech_out()->config().audio_start_id;
      std::fprintf(stderr, "lfm serve: speech: /v1/audio/speech, voices %s; inputs up to %zu characters, answers up to %.0f s\n",
                   speech_voice_list().c_str(), so.speech.max_input_chars, so.speech.max_audio_seconds);
    }
  }
  if (const SpeechOutModel* speech = rt.model->speech_out(); speech && so.audio_setup) {
    // Spoken chat needs the audio placeholder (spoken turns are put back where it stands).
    so.spoken_chat.codebooks = speech->config().codebooks;
    so.spoken_chat.audio_vocab = speech->config().audio_vocab;
    if (const WaveformDecoder* detok = rt.model->detokenizer()) {
      so.spoken_chat.waveform = true;
      so.spoken_chat.sample_rate = detok->sample_rate();
    }
    std::fprintf(stderr, "lfm serve: spoken chat (modalities audio): replies kept in %zu bytes for %lld s\n",
                 so.spoken_chat.store_bytes, static_cast<long long>(so.spoken_chat.store_seconds));
  }
  if (engine) {
    const auto c = engine->cache_options();
    std::fprintf(stderr, "lfm serve: %s on %s, %lld sequences x %lld tokens, %lld KV blocks of %lld (%s)\n",
                 so.model_name.c_str(), rt.backend->name(), static_cast<long long>(state.parallel),
                 static_cast<long long>(engine->ctx_size()), static_cast<long long>(c.n_blocks),
                 static_cast<long long>(c.block_tokens), dtype_name(c.type));
  }
  if (embedder)
    std::fprintf(stderr, "lfm serve: %s: /v1/embeddings and /v1/rerank (%s, %s pooling, %lld-wide vectors, texts up to "
                 "%lld tokens, %lld tokens per pass)\n",
                 so.model_name.c_str(), embedder->colbert() ? "ColBERT, MaxSim" : "cosine",
                 pooling_name(embedder->config().pooling), static_cast<long long>(embedder->dim()),
                 static_cast<long long>(embedder->max_tokens()), static_cast<long long>(embed.batch_tokens));
  srv.set_model(engine.get(), embeddings.get(), tok.get(), so);
  std::printf("listening on http://%s:%d\n", so.host.c_str(), port);
  std::fflush(stdout);
  runner.join();
  std::fprintf(stderr, "lfm serve: stopped\n");
  return 0;
}

CommandRegistrar reg({"serve", "serve the model over an OpenAI-compatible HTTP API", run_serve});

}  // namespace
}  // namespace lfm::cli
