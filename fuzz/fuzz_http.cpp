// HTTP request bodies of /v1/chat/completions and /v1/completions: JSON text parsed as the server
// parses it (parse_request_json: ordered, nesting and keys per object bounded) through the request
// validation. A 400 (ApiError) or lfm::Error is the expected rejection; any other exception would
// reach a client as a 500 "internal error".
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/ordered_json_parse.h"
#include "fuzz_util.h"
#include "server/api_types.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::ordered_json body;
  try {
    body = lfm::parse_request_json(lfm::fuzz::as_text(data, size), "the request body");
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
