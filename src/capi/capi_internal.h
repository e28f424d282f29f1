// What the C API's handles hold, and the helpers every lfm_* function uses: arguments checked,
// exceptions turned into a status and this thread's lfm_last_error() message, versioned structs
// read and written up to their struct_size.
#pragma once

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/chat_turn.h"
#include "kernels/backend.h"
#include <lfm/lfm.h>
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace lfm {
class ChatTemplate;
}

// One loaded model: what runs it and what reads its text. Shared with the engines made on it.
struct lfm_model_state {
  std::unique_ptr<lfm::ThreadPool> pool;
  std::unique_ptr<lfm::Backend> backend;
  std::unique_ptr<lfm::Model> model;
  std::unique_ptr<lfm::Tokenizer> tokenizer;    // null when the model ships none
  std::string tokenizer_error;                  // why there is none
  std::unique_ptr<lfm::ChatTemplate> chat_template;   // null without one
  std::unique_ptr<lfm::ChatTurnBuilder> chat;  // with a tokenizer
  ~lfm_model_state();
};

struct lfm_model {
  std::shared_ptr<lfm_model_state> state;
};

namespace lfm::capi {

// Errors the C API reports with a status other than LFM_ERR_INTERNAL.
struct ApiError : Error {
  ApiError(lfm_status s, const std::string& msg) : Error(msg), status(s) {}
  lfm_status status;
};

void set_error(const std::string& message);
void clear_error();

// Runs `body`, mapping exceptions to statuses (ApiError: its own; EngineBusy: LFM_ERR_BUSY;
// lfm::Error and JSON errors: `fallback`; std::bad_alloc and the rest: LFM_ERR_INTERNAL).
lfm_status guard(lfm_status fallback, const auto& body) noexcept;
lfm_status to_status(std::exception_ptr e, lfm_status fallback) noexcept;

lfm_status guard(lfm_status fallback, const auto& body) noexcept {
  try {
    body();
    return LFM_OK;
  } catch (...) {
    return to_status(std::current_exception(), fallback);
  }
}

[[noreturn]] inline void fail(lfm_status s, const std::string& msg) { throw ApiError(s, msg); }
inline void require(bool ok, const char* what) {
  if (!ok) fail(LFM_ERR_INVALID_ARGUMENT, what);
}

// A caller's versioned struct read into a full one holding the defaults: its first struct_size
// bytes are taken (struct_size must be at least the size of the field itself).
template <class T>
T read_struct(const T* in, const T& defaults, const char* name) {
  T out = defaults;
  if (!in) return out;
  require(in->struct_size >= sizeof(size_t), (std::string(name) + ": struct_size is not set").c_str());
  std::memcpy(&out, in, in->struct_size < sizeof(T) ? in->struct_size : sizeof(T));
  out.struct_size = sizeof(T);
  return out;
}
// A full struct written into the caller's, up to its struct_size.
template <class T>
void write_struct(T* out, const T& full, const char* name) {
  require(out != nullptr, (std::string(name) + ": the output struct is NULL").c_str());
  const size_t n = out->struct_size;
  require(n >= sizeof(size_t), (std::string(name) + ": struct_size is not set").c_str());
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&full) + sizeof(size_t),
              (n < sizeof(T) ? n : sizeof(T)) - sizeof(size_t));
}

const lfm_model_state& model_state(const lfm_model* m);
// The model's tokenizer (LFM_ERR_UNSUPPORTED when it has none).
const Tokenizer& model_tokenizer(const lfm_model_state& s);
// A chat turn over JSON messages and tools (tools_json may be NULL).
ChatTurn chat_turn(const lfm_model_state& s, const char* messages_json, const char* tools_json);

}  // namespace lfm::capi
