// The C API (include/lfm/lfm.h): errors, models, tokenizer and chat template. Engines and
// requests are in capi_engine.cpp.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>

#include "capi/capi_internal.h"
#include "model/detokenizer.h"
#include "model/speech_out.h"
#include "chat/chat_template.h"
#include "core/ordered_json_parse.h"
#include "engine/engine.h"
#include "hub/resolve.h"
#include "hub/settings.h"
#include "kernels/backend_factory.h"
#include "tokenizer/load_tokenizer.h"

using lfm::capi::fail;
using lfm::capi::guard;
using lfm::capi::require;

lfm_model_state::~lfm_model_state() = default;

namespace lfm::capi {

namespace {
thread_local std::string t_error;
}

void set_error(const std::string& message) { t_error = message; }
void clear_error() { t_error.clear(); }

lfm_status to_status(std::exception_ptr e, lfm_status fallback) noexcept {
  try {
    try {
      std::rethrow_exception(e);
    } catch (const ApiError& x) {
      set_error(x.what());
      return x.status;
    } catch (const EngineBusy& x) {
      set_error(x.what());
      return LFM_ERR_BUSY;
    } catch (const Error& x) {
      set_error(x.what());
      return fallback;
    } catch (const nlohmann::json::exception& x) {
      set_error(std::string("invalid JSON: ") + x.what());
      return LFM_ERR_INVALID_ARGUMENT;
    } catch (const std::bad_alloc&) {
      set_error("out of memory");
      return LFM_ERR_INTERNAL;
    } catch (const std::exception& x) {
      set_error(x.what());
      return fallback == LFM_ERR_LOAD ? LFM_ERR_LOAD : LFM_ERR_INTERNAL;
    } catch (...) {
      set_error("unknown error");
      return LFM_ERR_INTERNAL;
    }
  } catch (...) {  // setting the message itself failed (no memory)
    return LFM_ERR_INTERNAL;
  }
}

const lfm_model_state& model_state(const lfm_model* m) {
  require(m != nullptr && m->state != nullptr, "model: the handle is NULL");
  return *m->state;
}

namespace {

const Tokenizer& tokenizer_of(const lfm_model_state& s) {
  if (!s.tokenizer) fail(LFM_ERR_UNSUPPORTED, "model has no tokenizer: " + s.tokenizer_error);
  return *s.tokenizer;
}

// Copies ids or text out under the size-query convention of lfm.h.
void copy_ids(const std::vector<int32_t>& ids, int32_t* out, size_t capacity, size_t* n) {
  require(n != nullptr, "the count output pointer is NULL");
  *n = ids.size();
  if (ids.size() > capacity) fail(LFM_ERR_BUFFER_TOO_SMALL, "the id buffer holds " + std::to_string(capacity) +
                                                                " ids; " + std::to_string(ids.size()) + " needed");
  require(out != nullptr || ids.empty(), "the id buffer is NULL");
  if (!ids.empty()) std::memcpy(out, ids.data(), ids.size() * sizeof(int32_t));
}

void copy_text(const std::string& s, char* out, size_t capacity, size_t* length) {
  require(length != nullptr, "the length output pointer is NULL");
  *length = s.size();
  if (s.size() + 1 > capacity) fail(LFM_ERR_BUFFER_TOO_SMALL, "the text buffer holds " + std::to_string(capacity) +
                                                                  " bytes; " + std::to_string(s.size() + 1) + " needed");
  require(out != nullptr, "the text buffer is NULL");
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
}

std::optional<std::string> opt_str(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

}  // namespace

nlohmann::ordered_json parse_json(const char* text, const char* what, bool array) {
  // As the server parses a request body: once, keeping key order, in linear time, with nesting
  // and the keys of one object capped (core/ordered_json_parse.h).
  nlohmann::ordered_json j;
  try {
    j = parse_request_json(text, what);
  } catch (const Error& e) {
    fail(LFM_ERR_INVALID_ARGUMENT, e.what());
  }
  if (array && !j.is_array()) fail(LFM_ERR_INVALID_ARGUMENT, std::string(what) + ": expected a JSON array");
  return j;
}

const Tokenizer& model_tokenizer(const lfm_model_state& s) { return tokenizer_of(s); }

namespace {

// The model's vision side (load_image_prompt_setup), or why it takes no images.
void load_image_setup(lfm_model_state& s, const std::string& local) {
  if (!s.model->vision()) {
    s.image_error = "the model has no vision tower (images need an LFM2-VL model: a checkpoint folder, or a .gguf "
                    "language model with lfm_model_options.mmproj)";
  } else if (!s.tokenizer) {
    s.image_error = "the model has a vision tower but no tokenizer: images cannot be laid out (" + s.tokenizer_error + ")";
  } else {
    try {
      s.image_setup = std::make_shared<const ImagePromptSetup>(load_image_prompt_setup(local, *s.model, *s.tokenizer));
    } catch (const Error& e) {
      s.image_error = std::string("the model cannot take images: ") + e.what();
    }
  }
}

}  // namespace

}  // namespace lfm::capi

extern "C" {

const char* lfm_last_error(void) { return lfm::capi::t_error.c_str(); }

const char* lfm_status_name(lfm_status status) {
  switch (status) {
    case LFM_OK: return "ok";
    case LFM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case LFM_ERR_LOAD: return "load failed";
    case LFM_ERR_UNSUPPORTED: return "unsupported";
    case LFM_ERR_BUSY: return "busy";
    case LFM_ERR_TIMEOUT: return "timeout";
    case LFM_ERR_END: return "end of stream";
    case LFM_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case LFM_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

int lfm_api_version(void) { return LFM_API_VERSION; }
const char* lfm_version(void) { return "0.1.0"; }

lfm_status lfm_model_options_init(lfm_model_options* o) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    require(o != nullptr, "lfm_model_options_init: options is NULL");
    *o = lfm_model_options{};
    o->struct_size = sizeof(*o);
  });
}

lfm_status lfm_model_load(const char* path, const lfm_model_options* options, lfm_model** out) {
  using namespace lfm;
  return guard(LFM_ERR_LOAD, [&] {
    require(out != nullptr, "lfm_model_load: out is NULL");
    *out = nullptr;
    require(path != nullptr && *path, "lfm_model_load: path is NULL or empty");
    lfm_model_options defaults{};
    defaults.struct_size = sizeof(defaults);
    const lfm_model_options o = capi::read_struct(options, defaults, "lfm_model_options");
    require(o.threads >= 0, "lfm_model_load: threads must be 0 or more");
    const std::string local = hub::resolve_model_arg(path, hub::Need::kModel, hub::settings_from_env());
    auto s = std::make_shared<lfm_model_state>();
    s->pool = std::make_unique<ThreadPool>(o.threads);
    const DeviceKind device = parse_device(o.device ? o.device : "cpu");
    s->backend = make_backend(device, *s->pool);
    LoadOptions load;
    if (!s->backend->host_memory()) load.backend = s->backend.get();
    load.run_on = s->backend.get();
    load.bf16_activations = o.bf16_activations != 0;
    if (o.mmproj) load.mmproj = o.mmproj;
    s->model = load_model(local, load);
    s->bf16_activations = load.bf16_activations;
    try {
      s->tokenizer = load_tokenizer(local);
    } catch (const std::exception& e) {
      s->tokenizer_error = e.what();
    }
    if (s->tokenizer) {
      const Tokenizer& t = *s->tokenizer;
      if (!t.chat_template().empty())
        s->chat_template = std::make_unique<ChatTemplate>(t.chat_template(), capi::opt_str(t.bos_token()),
                                                          capi::opt_str(t.eos_token()), capi::opt_str(t.pad_token()));
    }
    capi::load_image_setup(*s, local);
    capi::load_audio_setup(*s);
    try {
      s->embedder = std::make_unique<Embedder>(*s->model, s->tokenizer.get(), *s->backend);
    } catch (const Error& e) {
      s->embed_error = e.what();
    }
    if (s->tokenizer) {
      s->chat = std::make_unique<ChatTurnBuilder>(*s->tokenizer, s->image_setup, s->audio_setup);
      s->chat_text = std::make_unique<ChatTurnBuilder>(*s->tokenizer, nullptr, s->audio_setup);
    }
    *out = new lfm_model{std::move(s)};
  });
}

lfm_status lfm_model_free(lfm_model* model) {
  delete model;  // engines made on it hold the state
  return LFM_OK;
}

lfm_status lfm_model_get_info(const lfm_model* model, lfm_model_info* out) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    const auto& s = lfm::capi::model_state(model);
    lfm_model_info i{};
    i.struct_size = sizeof(i);
    const auto& c = s.model->config();
    i.vocab_size = c.vocab_size;
    i.n_layers = c.n_layers;
    i.parameters = s.model->parameter_count();
    i.has_tokenizer = s.tokenizer != nullptr;
    i.has_chat_template = s.chat_template != nullptr;
    i.bos_token = s.tokenizer ? s.tokenizer->bos_id() : -1;
    i.eos_token = s.tokenizer ? s.tokenizer->eos_id() : (c.eos_token_ids.empty() ? -1 : c.eos_token_ids[0]);
    i.has_vision = s.image_setup != nullptr;
    i.image_token = s.image_setup ? s.image_setup->image_token_id : -1;
    i.has_audio = s.audio_setup != nullptr;
    i.audio_token = s.audio_setup ? s.audio_setup->audio_token_id : -1;
    i.audio_sample_rate = s.audio_setup ? s.audio_setup->front_end.sample_rate : 0;
    // The encoder's positions: max_positions rows of 8 frames of one hop each.
    i.audio_max_seconds = s.audio_setup ? static_cast<int32_t>(s.audio_setup->max_positions * 8 *
                                                               s.audio_setup->front_end.hop_length /
                                                               s.audio_setup->front_end.sample_rate)
                                        : 0;
    if (const lfm::SpeechOutModel* so = s.model->speech_out()) {
      i.can_speak = 1;
      i.speech_waveform = s.model->detokenizer() != nullptr;
      i.speech_sample_rate = s.model->detokenizer() ? s.model->detokenizer()->sample_rate() : 24000;
      i.speech_codebooks = static_cast<int32_t>(so->config().codebooks);
      i.speech_audio_vocab = static_cast<int32_t>(so->config().audio_vocab);
    }
    i.can_generate = c.has_lm_head && !c.bidirectional;
    i.retriever = !s.model->retrieval() ? LFM_RETRIEVER_NONE
                  : s.model->retrieval()->config().colbert() ? LFM_RETRIEVER_COLBERT
                                                             : LFM_RETRIEVER_DENSE;
    i.embedding_dim = s.embedder ? s.embedder->dim() : 0;
    i.embedding_max_tokens = s.embedder ? s.embedder->max_tokens() : 0;
    lfm::capi::write_struct(out, i, "lfm_model_info");
  });
}

lfm_status lfm_tokenize(const lfm_model* model, const char* text, int32_t add_special, int32_t* ids, size_t capacity,
                        size_t* n_ids) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    const auto& tok = lfm::capi::model_tokenizer(lfm::capi::model_state(model));
    require(text != nullptr, "lfm_tokenize: text is NULL");
    lfm::capi::copy_ids(tok.encode(text, add_special != 0), ids, capacity, n_ids);
  });
}

lfm_status lfm_detokenize(const lfm_model* model, const int32_t* ids, size_t n_ids, int32_t skip_special, char* text,
                          size_t capacity, size_t* length) {
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    const auto& tok = lfm::capi::model_tokenizer(lfm::capi::model_state(model));
    require(ids != nullptr || n_ids == 0, "lfm_detokenize: ids is NULL");
    lfm::capi::copy_text(tok.decode(std::span<const int32_t>(ids, n_ids), skip_special != 0), text, capacity, length);
  });
}

lfm_status lfm_apply_chat_template(const lfm_model* model, const char* messages_json, const char* tools_json,
                                   char* text, size_t capacity, size_t* length) {
  using namespace lfm::capi;
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    const auto& s = model_state(model);
    require(messages_json != nullptr, "lfm_apply_chat_template: messages_json is NULL");
    model_tokenizer(s);
    if (!s.chat_template) fail(LFM_ERR_UNSUPPORTED, "model ships no chat template");
    const lfm::ChatTurnInput in = chat_input(s, messages_json, tools_json, nullptr, nullptr);
    copy_text(s.chat_template->render(s.audio_setup ? lfm::with_audio_placeholders(in.messages, s.audio_setup->placeholder_text)
                                                    : in.messages,
                                      in.tools, true),
              text, capacity, length);
  });
}

lfm_status lfm_chat_tokens(const lfm_model* model, const char* messages_json, const char* tools_json, int32_t* ids,
                           size_t capacity, size_t* n_ids) {
  using namespace lfm::capi;
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    const auto& s = model_state(model);
    copy_ids(chat_turn(s, chat_input(s, messages_json, tools_json, nullptr, nullptr), false).prompt, ids, capacity,
             n_ids);
  });
}

}  // extern "C"
