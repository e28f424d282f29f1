// Request parsing details of the OpenAI surface (src/server/api_types.cpp) that the HTTP tests do
// not reach one by one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_types.h"

namespace lfm::server {
namespace {

// Issue 41, item 5: logit_bias keys are decimal token ids, nothing std::stoll would also take.
TEST(ApiTypes, LogitBiasKeysAreDecimalIdsOnly) {
  auto body = [](const std::string& key) {
    return nlohmann::json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"logit_bias", {{key, 1.5}}}};
  };
  const ChatParams ok = parse_chat_request(body("5"), 100);
  ASSERT_EQ(ok.gen.req.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(ok.gen.req.sampling.logit_bias[0].first, 5);
  for (const std::string key : {" 5", "+5", "-0", "5 ", "0x5", "", "05a", "99999999999999999999", "100"}) {
    try {
      parse_chat_request(body(key), 100);
      ADD_FAILURE() << "key '" << key << "' was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << key;
      EXPECT_NE(std::string(e.what()).find("is not a token id"), std::string::npos) << e.what();
    }
  }
}

// Issue 56, item 2: the body's key order reaches the template — chat_template_kwargs, tools, and
// an assistant's tool-call arguments (an object, or a string holding one) — as the client wrote it.
TEST(ApiTypes, KeyOrderOfTheBodyIsKept) {
  const auto body = nlohmann::ordered_json::parse(R"({"messages": [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"zeta": 1, "alpha": "a"}}},
      {"type": "function", "function": {"name": "g", "arguments": "{\"zeta\": 2, \"alpha\": [true]}"}}]}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}}}}}],
    "chat_template_kwargs": {"zeta": 1, "alpha": 2}})");
  const ChatParams c = parse_chat_request(body, 100);
  EXPECT_EQ(c.messages[1]["content"], "<|tool_call_start|>[f(zeta=1, alpha=\"a\"), g(zeta=2, alpha=[True])]<|tool_call_end|>");
  EXPECT_EQ(c.template_kwargs.dump(), R"({"zeta":1,"alpha":2})");
  EXPECT_EQ(c.tools[0]["function"]["parameters"]["properties"].dump(), R"({"zeta":{"type":"integer"},"alpha":{"type":"string"}})");
}

}  // namespace
}  // namespace lfm::server
