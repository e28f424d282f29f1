// The C API (include/lfm/lfm.h): engines (with a draft model for speculative decoding) and their
// statistics. Requests are in capi_request.cpp.
#include "capi/capi_internal.h"
#include "engine/engine.h"
#include "hub/resolve.h"
#include "hub/settings.h"
#include "model/state_plan.h"

using lfm::capi::fail;
using lfm::capi::guard;
using lfm::capi::require;

namespace {

lfm::Engine& engine_of(const lfm_engine* e) {
  require(e != nullptr && e->engine != nullptr, "engine: the handle is NULL");
  return *e->engine;
}

// The draft model, loaded on the model's backend as `lfm generate --draft-model` loads it.
std::unique_ptr<lfm::Model> load_draft(const lfm_model_state& s, const char* path) {
  try {
    const std::string local = lfm::hub::resolve_model_arg(path, lfm::hub::Need::kModel, lfm::hub::settings_from_env());
    lfm::LoadOptions load;
    if (!s.backend->host_memory()) load.backend = s.backend.get();
    load.run_on = s.backend.get();
    load.bf16_activations = s.bf16_activations;
    return lfm::load_model(local, load);
  } catch (const std::exception& e) {
    lfm::capi::fail(LFM_ERR_LOAD, std::string("lfm_engine_create: draft_model '") + path + "': " + e.what());
  }
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
    o->draft_tokens = 8;
  });
}

lfm_status lfm_engine_create(lfm_model* model, const lfm_engine_options* options, lfm_engine** out) {
  using namespace lfm;
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(out != nullptr, "lfm_engine_create: out is NULL");
    *out = nullptr;
    const auto& state = capi::model_state(model);
    // As Forward refuses it, but as the status a caller can act on: use lfm_embed instead.
    const ModelConfig& mc = state.model->config();
    if (!mc.has_lm_head || mc.bidirectional)
      capi::fail(LFM_ERR_UNSUPPORTED, "lfm_engine_create: " + mc.architecture +
                                    " has no language-model head: it is a retriever (lfm_embed, lfm_rerank) and "
                                    "cannot generate");
    lfm_engine_options defaults;
    lfm_engine_options_init(&defaults);
    const lfm_engine_options o = capi::read_struct(options, defaults, "lfm_engine_options");
    require(o.ctx_size > 0, "lfm_engine_create: ctx_size must be greater than 0");
    require(o.parallel > 0, "lfm_engine_create: parallel must be greater than 0");
    require(o.batch_tokens > 0, "lfm_engine_create: batch_tokens must be greater than 0");
    require(o.kv_memory_bytes >= 0, "lfm_engine_create: kv_memory_bytes must be 0 or more");
    require(o.draft_tokens >= 0 && o.draft_tokens <= 256, "lfm_engine_create: draft_tokens must be in [0, 256]");
    require(!o.draft_model || o.draft_tokens >= 1,
            "lfm_engine_create: a draft_model needs room for drafted tokens (draft_tokens is 0)");
    EngineOptions eo;
    eo.state.ctx_size = o.ctx_size;
    eo.state.parallel = o.parallel;
    eo.state.type = parse_state_type(o.kv_type ? o.kv_type : "auto", default_state_type(*state.model));
    eo.state.memory_bytes = o.kv_memory_bytes;
    eo.state.prefix_cache = o.prefix_cache != 0;
    eo.batch_tokens = o.batch_tokens;
    eo.prefill_chunk = -1;  // as the front ends: the inter-token latency target decides
    eo.state.draft_tokens = o.draft_tokens;
    auto e = std::make_unique<lfm_engine>();
    e->model = model->state;
    if (o.draft_model) e->draft = load_draft(state, o.draft_model);
    e->engine = std::make_unique<Engine>(*state.model, *state.backend, state.tokenizer.get(), eo, e->draft.get());
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
    c.drafted_tokens = s.drafted_tokens;
    c.accepted_tokens = s.accepted_tokens;
    lfm::capi::write_struct(out, c, "lfm_engine_stats");
  });
}

}  // extern "C"
