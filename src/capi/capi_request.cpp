// The C API (include/lfm/lfm.h): requests (prompt, sampling, structured output, speculative
// decoding, images) and their event streams.
#include <chrono>
#include <cmath>

#include "capi/capi_internal.h"

using lfm::capi::fail;
using lfm::capi::guard;
using lfm::capi::require;

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
lfm_event c_event(const lfm_request& r, std::vector<int32_t>& top_ids, std::vector<float>& top_lps) {
  const lfm::Event& ev = r.last;
  lfm_event c{};
  c.struct_size = sizeof(c);
  const bool done = ev.kind == lfm::Event::Kind::kDone;
  const bool audio = ev.kind == lfm::Event::Kind::kAudio;
  c.kind = done ? LFM_EVENT_DONE : audio ? LFM_EVENT_AUDIO : LFM_EVENT_TOKEN;
  c.token = done || audio ? -1 : ev.token;
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
  c.drafted_tokens = ev.usage.drafted_tokens;
  c.accepted_tokens = ev.usage.accepted_tokens;
  c.image_tiles = ev.usage.image_tiles;
  c.audio_clips = ev.usage.audio_clips;
  c.encode_seconds = ev.usage.encode_seconds;
  c.audio_codes = ev.audio_codes.data();
  c.n_audio_codes = ev.audio_codes.size();
  c.audio = ev.audio.data();
  c.n_audio = ev.audio.size();
  c.audio_end = ev.audio_end ? 1 : 0;
  c.sample_rate = ev.sample_rate;
  c.audio_frames = ev.usage.audio_frames;
  c.audio_seconds = ev.usage.audio_seconds;
  static const char kEmpty[] = "";
  c.message_json = done ? r.message_json.c_str() : kEmpty;
  c.message_json_length = done ? r.message_json.size() : 0;
  top_ids.clear();
  top_lps.clear();
  for (const auto& t : ev.top_logprobs) {
    top_ids.push_back(t.token);
    top_lps.push_back(t.logprob);
  }
  c.top_tokens = top_ids.data();
  c.top_logprobs = top_lps.data();
  c.n_top = top_ids.size();
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
  lfm::capi::parse_chat_event(r);
  return LFM_OK;
}

// The sampling fields of the params (the engine validates their ranges at submit).
void apply_sampling(lfm::Request& r, const lfm_sampling_params& sp, int64_t vocab) {
  r.sampling.temperature = sp.temperature;
  r.sampling.top_k = sp.top_k;
  r.sampling.top_p = sp.top_p;
  r.sampling.min_p = sp.min_p;
  r.sampling.repetition_penalty = sp.repetition_penalty;
  r.sampling.presence_penalty = sp.presence_penalty;
  r.sampling.frequency_penalty = sp.frequency_penalty;
  if (sp.has_seed) r.sampling.seed = sp.seed;
  r.sampling.logprobs = sp.logprobs != 0;
  require(sp.top_logprobs >= 0 && sp.top_logprobs <= 20, "lfm_request_submit: top_logprobs must be in [0, 20]");
  r.sampling.top_logprobs = static_cast<int>(sp.top_logprobs);
  if (sp.top_logprobs > 0) r.sampling.logprobs = true;
  require(sp.n_logit_bias == 0 || (sp.logit_bias_ids != nullptr && sp.logit_bias_values != nullptr),
          "lfm_request_submit: logit_bias_ids or logit_bias_values is NULL");
  for (size_t i = 0; i < sp.n_logit_bias; ++i) {
    const int32_t id = sp.logit_bias_ids[i];
    const float v = sp.logit_bias_values[i];
    require(id >= 0 && id < vocab, ("lfm_request_submit: logit_bias id " + std::to_string(id) +
                                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")")
                                       .c_str());
    require(std::isfinite(v), "lfm_request_submit: a logit_bias value is not finite");
    r.sampling.logit_bias.emplace_back(id, v);
  }
}

// Speculative decoding: the drafter and its room (refused when the engine cannot draft).
void apply_drafter(lfm::Request& r, const lfm_sampling_params& sp, const lfm::Engine& eng) {
  switch (sp.drafter) {
    case LFM_DRAFTER_NONE: r.drafter = lfm::Drafter::kNone; break;
    case LFM_DRAFTER_NGRAM: r.drafter = lfm::Drafter::kNgram; break;
    case LFM_DRAFTER_MODEL: r.drafter = lfm::Drafter::kModel; break;
    default:
      fail(LFM_ERR_INVALID_ARGUMENT, "lfm_request_submit: unknown drafter " + std::to_string(sp.drafter) +
                                         " (LFM_DRAFTER_NONE 0, LFM_DRAFTER_NGRAM 1 or LFM_DRAFTER_MODEL 2)");
  }
  require(sp.max_drafts >= 0 && sp.max_drafts <= 256, "lfm_request_submit: max_drafts must be in [0, 256]");
  r.max_drafts = sp.max_drafts;
  if (r.drafter == lfm::Drafter::kModel && !eng.has_draft_model())
    fail(LFM_ERR_INVALID_ARGUMENT, "lfm_request_submit: the drafter is LFM_DRAFTER_MODEL but the engine has no draft "
                                   "model (lfm_engine_options.draft_model)");
  if (r.drafter != lfm::Drafter::kNone && eng.cache_options().draft_tokens == 0)
    fail(LFM_ERR_INVALID_ARGUMENT, "lfm_request_submit: the request asks for drafts but the engine keeps no room for "
                                   "them (lfm_engine_options.draft_tokens is 0)");
}

}  // namespace

extern "C" {

lfm_status lfm_sampling_params_init(lfm_sampling_params* p) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(p != nullptr, "lfm_sampling_params_init: params is NULL");
    *p = lfm_sampling_params{};
    p->struct_size = sizeof(*p);
    p->top_p = 1.0f;
    p->repetition_penalty = 1.0f;
    p->max_tokens = -1;
    p->max_drafts = 8;
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
    const int given = (p.n_ids > 0) + (p.text != nullptr) + (p.messages_json != nullptr) + (p.speak_text != nullptr);
    require(given == 1, "lfm_request_submit: the prompt needs exactly one of ids, text, messages_json or speak_text");
    require(p.ids != nullptr || p.n_ids == 0, "lfm_request_submit: ids is NULL");
    require(sp.stop != nullptr || sp.n_stop == 0, "lfm_request_submit: stop is NULL");
    require(!p.tool_choice || p.messages_json, "lfm_request_submit: tool_choice is for chat prompts (messages_json)");
    const lfm_model_state& ms = *engine->model;
    Request r;
    std::vector<capi::PendingImage> pending = capi::prompt_images(ms, p);
    std::vector<std::vector<float>> clips = capi::prompt_audio(ms, p);
    std::optional<ChatTurn> turn;
    std::optional<ChatTurnInput> chat;
    if (p.n_ids > 0) r.prompt.assign(p.ids, p.ids + p.n_ids);
    if (p.text) {
      std::string text = p.text;
      if (!clips.empty()) replace_audio_markers(text, capi::audio_setup(ms).placeholder_text);
      r.prompt = capi::model_tokenizer(ms).encode(text, true);
    }
    if (p.messages_json) {
      chat = capi::chat_input(ms, p.messages_json, p.tools_json, p.tool_choice, &pending, &clips, p.max_audio_seconds);
      capi::prepare_spoken_chat(p, *chat);
      turn = capi::chat_turn(ms, *chat, true);
      turn->apply(r);
      chat->images = {};  // laid out in the turn: the decoded pixels and samples are not needed any more
      chat->audios = {};
    } else if (p.speak_text) {
      require(pending.empty() && clips.empty(), "lfm_request_submit: speak_text takes no images or audio");
      capi::speak_turn(ms, p).apply(r);
    } else {
      if (!pending.empty()) {
        const std::vector<image::Image> images = capi::decode_images(ms, std::move(pending));
        ImagePrompt laid = expand_images(r.prompt, images, capi::image_setup(ms));
        r.prompt = std::move(laid.ids);
        r.images = std::move(laid.images);
      }
      if (!clips.empty()) {
        AudioPrompt laid = expand_audio(r.prompt, clips, capi::audio_setup(ms));
        r.prompt = std::move(laid.ids);
        r.audios = std::move(laid.audios);
      }
    }
    apply_sampling(r, sp, eng.vocab_size());
    require(sp.max_tokens >= -1, "lfm_request_submit: max_tokens must be -1 or more");
    r.max_tokens = sp.max_tokens;
    r.ignore_eos = sp.ignore_eos != 0;
    for (size_t i = 0; i < sp.n_stop; ++i) {
      require(sp.stop[i] != nullptr, "lfm_request_submit: a stop string is NULL");
      r.stop.emplace_back(sp.stop[i]);
    }
    if (!r.stop.empty()) capi::model_tokenizer(ms);  // stop strings are matched in text
    apply_drafter(r, sp, eng);
    capi::apply_speech(ms, p, r);
    r.grammar = capi::request_grammar(*engine, sp, chat ? &*chat : nullptr);
    r.jump_forward = sp.no_jump_forward == 0;
    auto req = std::make_unique<lfm_request>();
    req->stream = eng.submit(std::move(r));
    if (turn) capi::start_chat_parser(*req, *turn);
    *out = req.release();
  });
}

lfm_status lfm_request_next(lfm_request* request, lfm_event* event, int32_t timeout_ms) {
  return guard(LFM_ERR_INTERNAL, [&] {
    lfm_request& r = request_of(request);
    require(event != nullptr, "lfm_request_next: event is NULL");
    // Checked before the event is taken off the stream: a refused call loses nothing.
    require(event->struct_size >= sizeof(size_t), "lfm_event: struct_size is not set (set it to sizeof(lfm_event))");
    std::lock_guard lock(r.mu);
    advance(r, timeout_ms);
    lfm::capi::write_struct(event, c_event(r, r.top_ids, r.top_lps), "lfm_event");
  });
}

lfm_status lfm_request_run(lfm_request* request, lfm_event_callback callback, void* user_data) {
  return guard(LFM_ERR_INTERNAL, [&] {
    lfm_request& r = request_of(request);
    require(callback != nullptr, "lfm_request_run: callback is NULL");
    std::lock_guard lock(r.mu);
    while (!r.done) {
      advance(r, -1);
      const lfm_event ev = c_event(r, r.top_ids, r.top_lps);
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
