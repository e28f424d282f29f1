// The C API (include/lfm/lfm.h): engines, requests and their event streams.
#include <chrono>
#include <mutex>

#include "capi/capi_internal.h"
#include "engine/engine.h"
#include "model/state_plan.h"

using lfm::capi::fail;
using lfm::capi::guard;
using lfm::capi::require;

struct lfm_engine {
  std::shared_ptr<lfm_model_state> model;  // outlives the engine
  std::unique_ptr<lfm::Engine> engine;
};

struct lfm_request {
  std::shared_ptr<lfm::RequestStream> stream;
  std::mutex mu;      // one reader at a time; the strings of the last event
  lfm::Event last;    // what the last lfm_event's pointers point into
  bool done = false;  // the DONE event was read
};

namespace {

lfm::Engine& engine_of(const lfm_engine* e) {
  require(e != nullptr && e->engine != nullptr, "engine: the handle is NULL");
  return *e->engine;
}

lfm_request& request_of(lfm_request* r) {
  require(r != nullptr && r->stream != nullptr, "request: the handle is NULL");
  return *r;
}

lfm_finish_reason finish_of(lfm::FinishReason f) {
  switch (f) {
    case lfm::FinishReason::kStop: return LFM_FINISH_STOP;
    case lfm::FinishReason::kLength: return LFM_FINISH_LENGTH;
    case lfm::FinishReason::kCancelled: return LFM_FINISH_CANCELLED;
    case lfm::FinishReason::kError: return LFM_FINISH_ERROR;
    case lfm::FinishReason::kNone: break;
  }
  return LFM_FINISH_NONE;
}

// The C view of r.last (its strings stay where they are until the next event).
lfm_event c_event(const lfm_request& r) {
  const lfm::Event& ev = r.last;
  lfm_event c{};
  c.struct_size = sizeof(c);
  const bool done = ev.kind == lfm::Event::Kind::kDone;
  c.kind = done ? LFM_EVENT_DONE : LFM_EVENT_TOKEN;
  c.token = done ? -1 : ev.token;
  c.text = ev.text.c_str();
  c.text_length = ev.text.size();
  c.logprob = ev.logprob;
  c.finish_reason = done ? finish_of(ev.finish) : LFM_FINISH_NONE;
  c.stop = ev.stop.c_str();
  c.error = ev.error.c_str();
  c.prompt_tokens = ev.usage.prompt_tokens;
  c.completion_tokens = ev.usage.completion_tokens;
  c.cached_tokens = ev.usage.cached_tokens;
  c.queue_seconds = ev.usage.queue_seconds;
  c.first_token_seconds = ev.usage.first_token_seconds;
  c.total_seconds = ev.usage.total_seconds;
  return c;
}

// Waits for the next event into r.last (r.mu held): LFM_OK, LFM_ERR_TIMEOUT or LFM_ERR_END.
lfm_status advance(lfm_request& r, int32_t timeout_ms) {
  if (r.done) fail(LFM_ERR_END, "request: its last event was already read");
  lfm::Event ev;
  const bool got = timeout_ms < 0 ? r.stream->next(ev) : r.stream->next_for(ev, std::chrono::milliseconds(timeout_ms));
  if (!got) {
    if (r.stream->finished()) fail(LFM_ERR_END, "request: its last event was already read");
    fail(LFM_ERR_TIMEOUT, "request: no event within " + std::to_string(timeout_ms) + " ms");
  }
  r.last = std::move(ev);
  if (r.last.kind == lfm::Event::Kind::kDone) r.done = true;
  return LFM_OK;
}

}  // namespace

extern "C" {

lfm_status lfm_engine_options_init(lfm_engine_options* o) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(o != nullptr, "lfm_engine_options_init: options is NULL");
    *o = lfm_engine_options{};
    o->struct_size = sizeof(*o);
    o->ctx_size = 4096;
    o->parallel = 1;
    o->prefix_cache = 1;
    o->batch_tokens = 512;
  });
}

lfm_status lfm_engine_create(lfm_model* model, const lfm_engine_options* options, lfm_engine** out) {
  using namespace lfm;
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(out != nullptr, "lfm_engine_create: out is NULL");
    *out = nullptr;
    const auto& state = capi::model_state(model);
    lfm_engine_options defaults;
    lfm_engine_options_init(&defaults);
    const lfm_engine_options o = capi::read_struct(options, defaults, "lfm_engine_options");
    require(o.ctx_size > 0, "lfm_engine_create: ctx_size must be greater than 0");
    require(o.parallel > 0, "lfm_engine_create: parallel must be greater than 0");
    require(o.batch_tokens > 0, "lfm_engine_create: batch_tokens must be greater than 0");
    require(o.kv_memory_bytes >= 0, "lfm_engine_create: kv_memory_bytes must be 0 or more");
    EngineOptions eo;
    eo.state.ctx_size = o.ctx_size;
    eo.state.parallel = o.parallel;
    eo.state.type = parse_state_type(o.kv_type ? o.kv_type : "auto", default_state_type(*state.model));
    eo.state.memory_bytes = o.kv_memory_bytes;
    eo.state.prefix_cache = o.prefix_cache != 0;
    eo.batch_tokens = o.batch_tokens;
    eo.prefill_chunk = -1;  // as the front ends: the inter-token latency target decides
    auto e = std::make_unique<lfm_engine>();
    e->model = model->state;
    e->engine = std::make_unique<Engine>(*state.model, *state.backend, state.tokenizer.get(), eo);
    *out = e.release();
  });
}

lfm_status lfm_engine_free(lfm_engine* engine) {
  if (!engine) return LFM_OK;
  return guard(LFM_ERR_INTERNAL, [&] {
    if (engine->engine) {
      engine->engine->cancel_all();  // every stream gets its DONE event before the scheduler stops
      engine->engine->wait_idle();
    }
    delete engine;
  });
}

lfm_status lfm_engine_get_stats(const lfm_engine* engine, lfm_engine_stats* out) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    const lfm::EngineStats s = engine_of(engine).stats();
    lfm_engine_stats c{};
    c.struct_size = sizeof(c);
    c.running = s.running;
    c.waiting = s.waiting;
    c.finished = s.finished;
    c.cancelled = s.cancelled;
    c.failed = s.failed;
    c.preemptions = s.preemptions;
    c.steps = s.steps;
    c.prompt_tokens = s.prompt_tokens;
    c.generated_tokens = s.generated_tokens;
    c.cached_tokens = s.cached_tokens;
    lfm::capi::write_struct(out, c, "lfm_engine_stats");
  });
}

lfm_status lfm_sampling_params_init(lfm_sampling_params* p) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(p != nullptr, "lfm_sampling_params_init: params is NULL");
    *p = lfm_sampling_params{};
    p->struct_size = sizeof(*p);
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->max_tokens = -1;
  });
}

lfm_status lfm_prompt_init(lfm_prompt* p) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(p != nullptr, "lfm_prompt_init: prompt is NULL");
    *p = lfm_prompt{};
    p->struct_size = sizeof(*p);
  });
}

lfm_status lfm_request_submit(lfm_engine* engine, const lfm_prompt* prompt, const lfm_sampling_params* params,
                              lfm_request** out) {
  using namespace lfm;
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(out != nullptr, "lfm_request_submit: out is NULL");
    *out = nullptr;
    Engine& eng = engine_of(engine);
    require(prompt != nullptr, "lfm_request_submit: prompt is NULL");
    lfm_prompt pdef;
    lfm_prompt_init(&pdef);
    const lfm_prompt p = capi::read_struct(prompt, pdef, "lfm_prompt");
    lfm_sampling_params sdef;
    lfm_sampling_params_init(&sdef);
    const lfm_sampling_params sp = capi::read_struct(params, sdef, "lfm_sampling_params");
    const int given = (p.n_ids > 0) + (p.text != nullptr) + (p.messages_json != nullptr);
    require(given == 1, "lfm_request_submit: the prompt needs exactly one of ids, text or messages_json");
    require(p.ids != nullptr || p.n_ids == 0, "lfm_request_submit: ids is NULL");
    require(sp.stop != nullptr || sp.n_stop == 0, "lfm_request_submit: stop is NULL");
    const lfm_model_state& ms = *engine->model;
    Request r;
    if (p.n_ids > 0) r.prompt.assign(p.ids, p.ids + p.n_ids);
    if (p.text) r.prompt = capi::model_tokenizer(ms).encode(p.text, true);
    if (p.messages_json) capi::chat_turn(ms, p.messages_json, p.tools_json).apply(r);
    r.sampling.temperature = sp.temperature;
    r.sampling.top_k = sp.top_k;
    r.sampling.top_p = sp.top_p;
    r.sampling.min_p = sp.min_p;
    r.sampling.repetition_penalty = sp.repetition_penalty;
    r.sampling.presence_penalty = sp.presence_penalty;
    r.sampling.frequency_penalty = sp.frequency_penalty;
    if (sp.has_seed) r.sampling.seed = sp.seed;
    r.sampling.logprobs = sp.logprobs != 0;
    require(sp.max_tokens >= -1, "lfm_request_submit: max_tokens must be -1 or more");
    r.max_tokens = sp.max_tokens;
    r.ignore_eos = sp.ignore_eos != 0;
    for (size_t i = 0; i < sp.n_stop; ++i) {
      require(sp.stop[i] != nullptr, "lfm_request_submit: a stop string is NULL");
      r.stop.emplace_back(sp.stop[i]);
    }
    if (!r.stop.empty()) capi::model_tokenizer(ms);  // stop strings are matched in text
    auto req = std::make_unique<lfm_request>();
    req->stream = eng.submit(std::move(r));
    *out = req.release();
  });
}

lfm_status lfm_request_next(lfm_request* request, lfm_event* event, int32_t timeout_ms) {
  return guard(LFM_ERR_INTERNAL, [&] {
    lfm_request& r = request_of(request);
    require(event != nullptr, "lfm_request_next: event is NULL");
    std::lock_guard lock(r.mu);
    advance(r, timeout_ms);
    lfm::capi::write_struct(event, c_event(r), "lfm_event");
  });
}

lfm_status lfm_request_run(lfm_request* request, lfm_event_callback callback, void* user_data) {
  return guard(LFM_ERR_INTERNAL, [&] {
    lfm_request& r = request_of(request);
    require(callback != nullptr, "lfm_request_run: callback is NULL");
    std::lock_guard lock(r.mu);
    while (!r.done) {
      advance(r, -1);
      const lfm_event ev = c_event(r);
      if (callback(&ev, user_data) != 0) r.stream->cancel();
    }
  });
}

lfm_status lfm_request_cancel(lfm_request* request) {
  return guard(LFM_ERR_INTERNAL, [&] { request_of(request).stream->cancel(); });
}

lfm_status lfm_request_free(lfm_request* request) {
  if (!request) return LFM_OK;
  return guard(LFM_ERR_INTERNAL, [&] {
    if (request->stream && !request->stream->finished()) request->stream->cancel();
    delete request;
  });
}

}  // extern "C"
