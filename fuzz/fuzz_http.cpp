// HTTP request bodies of /v1/chat/completions and /v1/completions: JSON text (nesting bounded as
// the server bounds it) through the request validation. A 400 (ApiError) or lfm::Error is the
// expected rejection; any other exception would reach a client as a 500 "internal error".
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_guard.h"
#include "fuzz_util.h"
#include "server/api_types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json body;
  try {
    body = lfm::parse_json(lfm::fuzz::as_text(data, size), "the request body");
  } catch (const lfm::Error&) {
    return 0;
  }
  if (!body.is_object()) return 0;
  try {
    lfm::server::parse_chat_request(body, 65536);
  } catch (const lfm::server::ApiError&) {
  } catch (const lfm::Error&) {
  }
  try {
    lfm::server::parse_completion_request(body, 65536);
  } catch (const lfm::server::ApiError&) {
  } catch (const lfm::Error&) {
  }
  return 0;
}
