// The C API (include/lfm/lfm.h): errors, models, tokenizer and chat template. Engines and
// requests are in capi_engine.cpp.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>

#include "capi/capi_internal.h"
#include "chat/chat_template.h"
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

nlohmann::ordered_json parse_json(const char* text, const char* what, bool array) {
  auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(LFM_ERR_INVALID_ARGUMENT, std::string(what) + ": not valid JSON");
  if (array && !j.is_array()) fail(LFM_ERR_INVALID_ARGUMENT, std::string(what) + ": expected a JSON array");
  return j;
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

ChatTurn chat_turn(const lfm_model_state& s, const char* messages_json, const char* tools_json) {
  require(messages_json != nullptr, "chat: messages_json is NULL");
  tokenizer_of(s);
  ChatTurnInput in;
  in.messages = parse_json(messages_json, "chat: messages_json", true);
  if (tools_json) in.tools = parse_json(tools_json, "chat: tools_json", true);
  return s.chat->build(in);
}

const Tokenizer& model_tokenizer(const lfm_model_state& s) { return tokenizer_of(s); }

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
      s->chat = std::make_unique<ChatTurnBuilder>(t);
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
    const auto messages = parse_json(messages_json, "messages_json", true);
    const auto tools = tools_json ? parse_json(tools_json, "tools_json", true) : nlohmann::ordered_json();
    copy_text(s.chat_template->render(messages, tools, true), text, capacity, length);
  });
}

lfm_status lfm_chat_tokens(const lfm_model* model, const char* messages_json, const char* tools_json, int32_t* ids,
                           size_t capacity, size_t* n_ids) {
  using namespace lfm::capi;
  return guard(LFM_ERR_INVALID_ARGUMENT, [&] {
    copy_ids(chat_turn(model_state(model), messages_json, tools_json).prompt, ids, capacity, n_ids);
  });
}

}  // extern "C"
